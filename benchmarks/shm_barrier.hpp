// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

// The bench's barrier for ranks on one host (ipc): a counter in a POSIX shared-memory page that
// every rank increments and then spins on, so that all ranks leave within about a microsecond of
// each other. A TCP barrier releases them one loopback latency apart (15-40 us under MPS), which
// lands in the timed sync of whichever rank left first.

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>

namespace ws_bench {

class ShmBarrier {
 public:
  // Rank 0 creates the page `name` (replacing a stale one), `opened` runs on every rank once the
  // page exists (a collective of the caller's: rank 0 created it before entering), then every
  // rank maps it. Every wait is bounded by `timeout`.
  ShmBarrier(std::string name, int np, int rank, std::chrono::milliseconds timeout,
             const std::function<void()>& opened)
      : name_(std::move(name)), np_(static_cast<std::uint64_t>(np)), rank_(rank), timeout_(timeout) {
    if (rank_ == 0) {
      ::shm_unlink(name_.c_str());  // (a segment left by a killed run)
      const int fd = ::shm_open(name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
      if (fd < 0) fail("shm_open");
      const bool sized = ::ftruncate(fd, kBytes) == 0;
      map(fd, sized);
    }
    opened();
    if (rank_ != 0) {
      const int fd = ::shm_open(name_.c_str(), O_RDWR, 0600);
      if (fd < 0) fail("shm_open");
      map(fd, true);
    }
  }
  ShmBarrier(const ShmBarrier&) = delete;
  ShmBarrier& operator=(const ShmBarrier&) = delete;
  ~ShmBarrier() {
    if (page_ != nullptr) ::munmap(page_, kBytes);
    if (rank_ == 0) ::shm_unlink(name_.c_str());
  }

  // Every rank arrives, then all leave together. @throws std::runtime_error after the timeout.
  void wait() {
    const std::uint64_t target = ++generation_ * np_;
    auto* c = counter();
    c->fetch_add(1, std::memory_order_acq_rel);
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    for (std::uint64_t spins = 0; c->load(std::memory_order_acquire) < target; ++spins)
      if (spins % 4096 == 4095 && std::chrono::steady_clock::now() > deadline)
        throw std::runtime_error("bench barrier: not every rank arrived within the timeout");
  }

  // A 64-bit word of the page other than the barrier's counter, on a cache line of its own:
  // index 0 .. kSlots - 1 (the bench's raw-ipc row keeps its flags there).
  static constexpr std::size_t kSlots = 4096 / 64 - 1;
  std::atomic<std::uint64_t>& slot(std::size_t i) {
    if (i >= kSlots) throw std::out_of_range("bench barrier: slot " + std::to_string(i));
    return *reinterpret_cast<std::atomic<std::uint64_t>*>(static_cast<char*>(page_) + 64 * (i + 1));
  }

 private:
  static constexpr std::size_t kBytes = 4096;
  static_assert(std::atomic<std::uint64_t>::is_always_lock_free);

  std::atomic<std::uint64_t>* counter() { return static_cast<std::atomic<std::uint64_t>*>(page_); }
  void map(int fd, bool sized) {
    void* p = sized ? ::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
    const int e = errno;
    ::close(fd);
    errno = e;
    if (p == MAP_FAILED) fail("mmap");
    page_ = p;
  }
  [[noreturn]] void fail(const char* what) const {
    throw std::runtime_error("bench barrier " + name_ + ": " + what + ": " + std::strerror(errno));
  }

  std::string name_;
  std::uint64_t np_;
  int rank_;
  std::chrono::milliseconds timeout_;
  void* page_ = nullptr;
  std::uint64_t generation_ = 0;
};

}  // namespace ws_bench
