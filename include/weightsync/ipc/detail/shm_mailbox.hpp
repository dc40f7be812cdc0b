// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! ShmMailbox: the per-sync control messages of a same-host transport (ipc) through POSIX shared
//! memory instead of TCP on loopback. One producer posts a message per round (a blob up to
//! kInlineBytes, or "the blob follows on the socket"); each consumer posts its outcome per round.
//! A post is a store, and a futex wake only when a waiter sleeps; a wait spins (yielding) for
//! Tuning::Wait::mailbox_spin_for, then sleeps on the futex, so that a short wait (a small pull's
//! outcome) ends in about a microsecond and a long one (a trainer computing between syncs) costs
//! no CPU. Every wait is bounded and watches the peers through a callback.
//!
//! The segment is created by the producer with a random name, opened by every consumer, and
//! unlinked as soon as they have (ShmMailbox::unlink): nothing is left in /dev/shm if a process
//! dies. Linux only (futexes on shared memory).

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <thread>
#include <utility>

#include "weightsync/detail/format.hpp"
#include "weightsync/detail/frame.hpp"
#include "weightsync/error.hpp"
#include "weightsync/tuning.hpp"

namespace weightsync::detail {

class ShmMailbox {
 public:
  //! A producer's message of up to this many bytes travels in the segment; a longer one (a plan
  //! sent in full) is announced there and sent on the socket.
  static constexpr std::size_t kInlineBytes = std::size_t{64} << 10;
  //! A consumer's outcome text of up to this many bytes travels in the segment (longer is cut).
  static constexpr std::size_t kOutcomeText = 4096;

  ShmMailbox() = default;
  ShmMailbox(ShmMailbox&& o) noexcept { *this = std::move(o); }
  ShmMailbox& operator=(ShmMailbox&& o) noexcept {
    if (this != &o) {
      reset();
      base_ = std::exchange(o.base_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
      consumers_ = std::exchange(o.consumers_, 0);
      name_ = std::move(o.name_);
      owner_ = std::exchange(o.owner_, false);
    }
    return *this;
  }
  ShmMailbox(const ShmMailbox&) = delete;
  ShmMailbox& operator=(const ShmMailbox&) = delete;
  ~ShmMailbox() { reset(); }

  //! The producer's side: a new segment for `consumers` consumers, under a random name.
  //! @throws config_error("shared memory") when it cannot be made (the caller falls back to TCP).
  static ShmMailbox create(int consumers) {
    if (consumers < 1 || consumers > 4096)
      throw config_error("consumers", cat("must be in 1..4096, got ", consumers));
    ShmMailbox m;
    m.consumers_ = consumers;
    m.bytes_ = size_for(consumers);
    std::random_device rd;
    const std::uint64_t tag = (std::uint64_t{rd()} << 32) ^ rd();
    m.name_ = cat("/weightsync-", ::getpid(), "-", tag);
    const int fd = ::shm_open(m.name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0)
      throw config_error("shared memory",
                         cat("shm_open(", m.name_, ") failed: ", std::strerror(errno)));
    m.owner_ = true;
    const int rc = ::ftruncate(fd, static_cast<off_t>(m.bytes_));
    const int err = errno;
    if (rc != 0) {
      ::close(fd);
      throw config_error("shared memory", cat("ftruncate(", m.name_, ", ", m.bytes_,
                                              ") failed: ", std::strerror(err)));
    }
    m.map(fd);
    auto* h = m.header();
    h->consumers = static_cast<std::uint32_t>(consumers);
    h->version = kProtocolVersion;
    std::atomic_ref<std::uint32_t>(h->magic).store(kMagic, std::memory_order_release);
    return m;
  }

  //! A consumer's side: opens the producer's segment `name`, made for `consumers` consumers.
  //! @throws config_error("shared memory") when it cannot be opened or is not such a segment.
  static ShmMailbox open(const std::string& name, int consumers) {
    if (name.rfind("/weightsync-", 0) != 0 || name.find('/', 1) != std::string::npos)
      throw config_error("shared memory", cat("'", name, "' is not a weightsync segment name"));
    ShmMailbox m;
    m.consumers_ = consumers;
    m.bytes_ = size_for(consumers);
    m.name_ = name;
    const int fd = ::shm_open(name.c_str(), O_RDWR, 0);
    if (fd < 0)
      throw config_error("shared memory",
                         cat("shm_open(", name, ") failed: ", std::strerror(errno),
                             " (is the producer on another host or in another IPC namespace?)"));
    struct stat st {};
    if (::fstat(fd, &st) != 0 || static_cast<std::size_t>(st.st_size) != m.bytes_) {
      ::close(fd);
      throw config_error("shared memory", cat(name, " has ", st.st_size, " bytes, ", m.bytes_,
                                              " expected for ", consumers, " consumers"));
    }
    m.map(fd);
    const auto* h = m.header();
    if (std::atomic_ref<std::uint32_t>(m.header()->magic).load(std::memory_order_acquire) !=
            kMagic ||
        h->version != kProtocolVersion || h->consumers != static_cast<std::uint32_t>(consumers))
      throw config_error("shared memory",
                         cat(name, " is not a weightsync mailbox of protocol ", kProtocolVersion,
                             " for ", consumers, " consumers"));
    return m;
  }

  explicit operator bool() const noexcept { return base_ != nullptr; }
  const std::string& name() const noexcept { return name_; }
  int consumers() const noexcept { return consumers_; }

  //! Removes the name (the mappings stay). The producer calls it once every consumer has opened
  //! the segment; also done by the destructor.
  void unlink() noexcept {
    if (owner_ && !name_.empty()) ::shm_unlink(name_.c_str());
    owner_ = false;
  }

  // --- producer -> consumers --------------------------------------------------------------------

  //! Posts round `round`'s message: `blob` itself when it fits (kInlineBytes), else only its size
  //! (the caller sends it on the socket; see Message::inline_).
  void post(std::uint64_t round, const std::string& blob) {
    auto* box = plan_box();
    const bool fits = blob.size() <= kInlineBytes;
    box->bytes = blob.size();
    box->inline_ = fits ? 1 : 0;
    if (fits && !blob.empty()) std::memcpy(box->data, blob.data(), blob.size());
    publish(box->seq, box->sleepers, round);
  }

  struct Message {
    std::string blob;      //!< the message, when inline_
    std::uint64_t bytes;   //!< its size
    bool inline_;          //!< false: the producer sends it on the socket
  };
  //! Waits (see wait()) for round `round`'s message.
  template <class Watch>
  Message receive(std::uint64_t round, std::chrono::milliseconds timeout, Watch&& watch,
                  const char* what) {
    auto* box = plan_box();
    wait(box->seq, box->sleepers, round, timeout, watch, what);
    Message m{{}, box->bytes, box->inline_ != 0};
    if (m.inline_) {
      if (m.bytes > kInlineBytes)
        throw protocol_error(0, cat(what, ": ", m.bytes, " bytes announced in shared memory"));
      m.blob.assign(box->data, static_cast<std::size_t>(m.bytes));
    }
    return m;
  }

  // --- consumers -> producer --------------------------------------------------------------------

  //! Consumer `index` (0-based) posts its outcome of round `round`: its frame and its text.
  void post_outcome(int index, std::uint64_t round, const Frame& frame, const std::string& text) {
    auto* box = outcome_box(index);
    box->frame = frame;
    box->text_bytes = std::min(text.size(), kOutcomeText);
    std::memcpy(box->text, text.data(), static_cast<std::size_t>(box->text_bytes));
    publish(box->seq, box->sleepers, round);
  }
  //! Waits (see wait()) for consumer `index`'s outcome of round `round`; `text` gets its text.
  template <class Watch>
  Frame receive_outcome(int index, std::uint64_t round, std::string& text,
                        std::chrono::milliseconds timeout, Watch&& watch, const char* what) {
    auto* box = outcome_box(index);
    wait(box->seq, box->sleepers, round, timeout, watch, what);
    const Frame f = box->frame;
    text.assign(box->text, static_cast<std::size_t>(std::min<std::uint64_t>(box->text_bytes,
                                                                             kOutcomeText)));
    return f;
  }

 private:
  static constexpr std::uint32_t kMagic = 0x4d535357u;  // "WSSM"
  static constexpr std::size_t kLine = 64;

  struct Header {
    std::uint32_t magic;
    std::uint32_t version;
    std::uint32_t consumers;
  };
  struct alignas(kLine) PlanBox {
    std::uint32_t seq;       // the low 32 bits of the round posted last (a futex word)
    std::uint32_t sleepers;  // waiters asleep on seq's futex (a post wakes only when some are)
    std::uint64_t bytes;
    std::uint32_t inline_;
    std::uint32_t pad;
    char data[kInlineBytes];
  };
  struct alignas(kLine) OutcomeBox {
    std::uint32_t seq;
    std::uint32_t sleepers;
    std::uint64_t text_bytes;
    Frame frame;
    char text[kOutcomeText];
  };
  static constexpr std::size_t kHeaderBytes = kLine;
  static std::size_t size_for(int consumers) {
    return kHeaderBytes + sizeof(PlanBox) + sizeof(OutcomeBox) * static_cast<std::size_t>(consumers);
  }
  Header* header() const { return static_cast<Header*>(base_); }
  PlanBox* plan_box() const {
    return reinterpret_cast<PlanBox*>(static_cast<char*>(base_) + kHeaderBytes);
  }
  OutcomeBox* outcome_box(int index) const {
    if (index < 0 || index >= consumers_)
      throw config_error("consumer", cat("index ", index, " outside 0..", consumers_ - 1));
    return reinterpret_cast<OutcomeBox*>(static_cast<char*>(base_) + kHeaderBytes +
                                         sizeof(PlanBox)) +
           index;
  }

  void map(int fd) {
    void* p = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    const int err = errno;
    ::close(fd);
    if (p == MAP_FAILED)
      throw config_error("shared memory", cat("mmap(", name_, ") failed: ", std::strerror(err)));
    base_ = p;
  }
  void reset() noexcept {
    unlink();
    if (base_) ::munmap(base_, bytes_);
    base_ = nullptr;
  }

  static long futex(std::uint32_t* word, int op, std::uint32_t val, const timespec* t) {
    return ::syscall(SYS_futex, word, op, val, t, nullptr, 0);
  }
  //! Stores the round (the payload written before it is seen with it) and wakes the waiters that
  //! sleep (a spinning one sees the store; the syscall costs a microsecond or more). The store and
  //! the load of `sleepers` are sequentially consistent, as are wait()'s increment and its load
  //! of `seq`: a waiter that is about to sleep has either been counted or sees the new round.
  static void publish(std::uint32_t& seq, std::uint32_t& sleepers, std::uint64_t round) {
    std::atomic_ref<std::uint32_t>(seq).store(static_cast<std::uint32_t>(round),
                                              std::memory_order_seq_cst);
    if (std::atomic_ref<std::uint32_t>(sleepers).load(std::memory_order_seq_cst) != 0)
      futex(&seq, FUTEX_WAKE, 0x7fffffff, nullptr);
  }
  //! Waits until `seq` holds round `round`: spins (yielding) for Tuning::Wait::mailbox_spin_for,
  //! then sleeps on the futex (counted in `sleepers`) in steps of at most 2 ms, calling `watch()`
  //! (which throws when a peer is gone) between steps; throws timeout_error once `timeout` has
  //! passed.
  template <class Watch>
  static void wait(std::uint32_t& seq, std::uint32_t& sleepers, std::uint64_t round,
                   std::chrono::milliseconds timeout, Watch&& watch, const char* what) {
    std::atomic_ref<std::uint32_t> word(seq);
    const auto want = static_cast<std::uint32_t>(round);
    if (word.load(std::memory_order_acquire) == want) return;
    using SteadyClock = std::chrono::steady_clock;
    const auto start = SteadyClock::now();
    const auto deadline = start + timeout;
    while (SteadyClock::now() - start < Tuning::Wait::mailbox_spin_for) {
      if (word.load(std::memory_order_acquire) == want) return;
      std::this_thread::yield();
    }
    while (true) {
      const std::uint32_t seen = word.load(std::memory_order_acquire);
      if (seen == want) return;
      watch();
      const auto now = SteadyClock::now();
      if (now >= deadline)
        throw timeout_error(what, -1, cat("no message within ", timeout.count(),
                                          " ms (shared-memory mailbox, round ", round, ")"));
      const auto step = std::min<SteadyClock::duration>(deadline - now, Tuning::Wait::check_every);
      const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(step).count();
      const timespec t{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
      std::atomic_ref<std::uint32_t> asleep(sleepers);
      asleep.fetch_add(1, std::memory_order_seq_cst);
      if (word.load(std::memory_order_seq_cst) != want)
        futex(&seq, FUTEX_WAIT, seen, &t);  // returns at once if the word changed meanwhile
      asleep.fetch_sub(1, std::memory_order_seq_cst);
    }
  }

  void* base_ = nullptr;
  std::size_t bytes_ = 0;
  int consumers_ = 0;
  std::string name_;
  bool owner_ = false;
};

}  // namespace weightsync::detail
