// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! HostCommunicator: a Communicator over TCP for machines without a GPU. Ranks form a ring
//! (rank r sends to r+1); a broadcast from any root flows down the chain root, root+1, ...,
//! root-1, each rank forwarding pieces as they arrive, so the root sends one copy whatever the
//! number of receivers. Every broadcast carries a small header (sequence number, root, size): a
//! desynchronised peer is a protocol_error at once instead of a hang. Every send and receive has a
//! progress deadline; a peer that dies makes its neighbours fail with peer_error, which cascades
//! down the ring as they close their own connections.

#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "weightsync/concepts.hpp"
#include "weightsync/detail/format.hpp"
#include "weightsync/detail/socket.hpp"
#include "weightsync/detail/wire.hpp"
#include "weightsync/error.hpp"
#include "weightsync/host/device_policy.hpp"
#include "weightsync/host/rendezvous.hpp"
#include "weightsync/tuning.hpp"

namespace weightsync {

class HostCommunicator {
 public:
  using stream_type = HostStream;
  using device_policy = HostPolicy;

  HostCommunicator() = default;
  HostCommunicator(HostCommunicator&&) noexcept = default;
  HostCommunicator& operator=(HostCommunicator&&) noexcept = default;
  ~HostCommunicator() = default;

  //! Rendezvous, then link the ring. `op_timeout` bounds every later wait for progress.
  //! @throws timeout_error, protocol_error, peer_error, config_error (see rendezvous()).
  static HostCommunicator connect(const RendezvousOptions& o,
                                  std::chrono::milliseconds op_timeout = std::chrono::seconds(60)) {
    o.validate();
    const auto deadline = detail::Deadline::after(o.timeout);
    HostCommunicator c;
    c.rank_ = o.rank;
    c.size_ = o.world_size;
    c.timeout_ = op_timeout;
    if (o.world_size == 1) return c;
    const bool v6 = o.address.find(':') != std::string::npos;
    detail::Fd listener = detail::listen_tcp(v6 ? "::" : "0.0.0.0", 0);
    const int data_port = detail::local_port(listener.get());
    auto rv = rendezvous(o, std::to_string(data_port));
    c.control_ = std::move(rv.control);
    c.session_ = rv.session;

    const int succ = (c.rank_ + 1) % c.size_;
    const int pred = (c.rank_ + c.size_ - 1) % c.size_;
    int succ_port = 0;
    try {
      succ_port = std::stoi(rv.blobs[static_cast<std::size_t>(succ)]);
    } catch (...) {
      throw protocol_error(succ, "rank " + std::to_string(succ) + " sent an unusable data port");
    }
    c.succ_ = detail::connect_tcp(rv.addresses[static_cast<std::size_t>(succ)], succ_port, deadline,
                                  "link", succ);
    detail::Writer w;
    w.u64(c.session_);
    w.i32(c.rank_);
    const auto link = detail::Writer::message(detail::MsgType::link, w.bytes());
    detail::send_all(c.succ_.get(), link.data(), link.size(), deadline, "link", succ);
    // Accept our predecessor; anything else that connects to the data port is dropped.
    while (!c.pred_) {
      detail::Fd fd = detail::accept_tcp(listener.get(), deadline);
      if (!fd)
        throw timeout_error("link", pred,
                            detail::cat("rank ", pred, " did not connect to rank ", c.rank_,
                                        "'s data port in time"));
      try {
        char buf[detail::kMsgHeaderBytes + 12];
        detail::recv_all(
            fd.get(), buf, sizeof buf,
            detail::Deadline{std::min(deadline.at, detail::Deadline::after(o.hello_timeout).at)},
            "link", pred);
        const auto h = detail::parse_header(buf);
        detail::Reader r(std::string_view(buf + detail::kMsgHeaderBytes, 12), pred, "link");
        const auto session = r.u64();
        const int from = r.i32();
        if (h.magic != detail::kWireMagic ||
            h.type != static_cast<std::uint16_t>(detail::MsgType::link) || session != c.session_ ||
            from != pred) {
          log(LogLevel::warning,
              detail::cat("link: rank ", c.rank_, " dropped a connection that is not rank ", pred));
          continue;
        }
        c.pred_ = std::move(fd);
      } catch (const error& e) {
        log(LogLevel::warning,
            detail::cat("link: rank ", c.rank_, " dropped a connection: ", e.what()));
      }
    }
    return c;
  }

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  std::chrono::milliseconds timeout() const noexcept { return timeout_; }
  void set_timeout(std::chrono::milliseconds t) noexcept { timeout_ = t; }
  bool aborted() const noexcept { return aborted_; }
  //! The framed wire's state between transfers (WireStateCommunicator).
  WireState& wire_state() noexcept { return wire_; }

  //! Copies `bytes` bytes at `buf` on `root` to `buf` on every rank. Synchronous.
  //! @throws peer_error when a neighbour is gone, timeout_error when no progress is made within
  //!   timeout(), protocol_error when the peers disagree on the operation (size, root, order).
  void broadcast(void* buf, std::size_t bytes, int root, HostStream = {}) {
    if (aborted_) throw state_error("host communicator was aborted: " + abort_reason_);
    if (root < 0 || root >= size_)
      throw config_error("root", detail::cat("must be in 0..", size_ - 1, ", got ", root));
    if (group_depth_ > 0) {
      pending_.push_back({buf, bytes, root});
      return;
    }
    const std::uint64_t seq = seq_++;
    if (size_ == 1) return;
    try {
      run_broadcast(static_cast<char*>(buf), bytes, root, seq);
    } catch (...) {
      // A failed collective leaves the ring in an unknown state: fail fast on every rank.
      abort("broadcast failed");
      throw;
    }
  }

  //! Begins a group: the broadcasts issued until the matching group_end() run there, together.
  //! A group whose broadcasts come one from every rank (an allgather, as the pipeline's handshake
  //! issues; the sizes may differ from rank to rank) runs as a ring allgather: size() - 1 steps in
  //! which every rank sends and receives at once, one latency a step instead of one a broadcast.
  //! Any other group runs its broadcasts in the order issued. Buffers must stay valid until
  //! group_end().
  void group_start() { ++group_depth_; }

  //! Ends a group (see group_start()); runs what it holds. @throws as broadcast().
  void group_end() {
    if (group_depth_ == 0) throw state_error("group_end without group_start");
    if (--group_depth_ > 0) return;
    auto ops = std::move(pending_);
    pending_.clear();
    if (ops.empty()) return;
    if (aborted_) throw state_error("host communicator was aborted: " + abort_reason_);
    const std::uint64_t seq = seq_;
    seq_ += ops.size();
    if (size_ == 1) return;
    try {
      if (is_allgather(ops)) {
        run_allgather(ops, seq);
      } else {
        for (std::size_t i = 0; i < ops.size(); ++i)
          run_broadcast(static_cast<char*>(ops[i].buf), ops[i].bytes, ops[i].root, seq + i);
      }
    } catch (...) {
      abort("grouped broadcast failed");
      throw;
    }
  }

  //! Throws if a peer is known to be gone or aborted. Non-blocking.
  void check() {
    if (aborted_) throw state_error("host communicator was aborted: " + abort_reason_);
    control_.check();
  }
  //! The first peer that left cleanly, -1 when none (ControlChannel::departed_peer).
  int departed_peer() noexcept { return control_.departed_peer(); }

  //! Closes every connection so that each neighbour fails at once; later calls throw state_error.
  void abort(const std::string& reason) noexcept {
    if (aborted_) return;
    aborted_ = true;
    abort_reason_ = reason;
    control_.abort(reason);
    succ_.shutdown();
    pred_.shutdown();
    succ_.reset();
    pred_.reset();
  }

 private:
  static constexpr std::size_t kPiece = Tuning::Host::piece_bytes;
  static constexpr std::size_t kHeaderBytes = 24;

  struct PendingBroadcast {
    void* buf;
    std::size_t bytes;
    int root;
  };

  //! One broadcast from every rank.
  bool is_allgather(const std::vector<PendingBroadcast>& ops) const {
    if (ops.size() != static_cast<std::size_t>(size_)) return false;
    std::vector<char> seen(ops.size(), 0);
    for (const auto& op : ops) {
      if (seen[static_cast<std::size_t>(op.root)]) return false;
      seen[static_cast<std::size_t>(op.root)] = 1;
    }
    return true;
  }

  //! Ring allgather: in step s every rank sends the block of rank (rank - s) to its successor and
  //! receives the block of rank (rank - s - 1) from its predecessor, both at once. Each step's
  //! header carries the group's sequence number, the step and the block's size, so ranks that
  //! disagree fail.
  void run_allgather(const std::vector<PendingBroadcast>& ops, std::uint64_t seq) {
    std::vector<char*> block(ops.size());
    std::vector<std::size_t> size(ops.size());
    for (const auto& op : ops) {
      block[static_cast<std::size_t>(op.root)] = static_cast<char*>(op.buf);
      size[static_cast<std::size_t>(op.root)] = op.bytes;
    }
    const int succ = (rank_ + 1) % size_;
    const int pred = (rank_ + size_ - 1) % size_;
    for (int step = 0; step < size_ - 1; ++step) {
      const int out = (rank_ - step + size_) % size_;
      const int in = (rank_ - step - 1 + 2 * size_) % size_;
      detail::Writer w;
      w.u32(detail::kWireMagic);
      w.i32(-1 - step);  // never a root: a broadcast header on the other side fails the check
      w.u64(seq);
      w.u64(size[static_cast<std::size_t>(out)]);
      char out_hdr[kHeaderBytes], in_hdr[kHeaderBytes];
      std::memcpy(out_hdr, w.bytes().data(), kHeaderBytes);
      const auto deadline = detail::Deadline::after(timeout_);
      const std::size_t want = size[static_cast<std::size_t>(in)];
      // The block follows its header at once; the predecessor's block is read once its header
      // says that it is the block expected.
      detail::send_recv_framed(
          succ_.get(), out_hdr, kHeaderBytes, block[static_cast<std::size_t>(out)],
          size[static_cast<std::size_t>(out)], pred_.get(), in_hdr, kHeaderBytes,
          [&](const void*) {
            detail::Reader r(std::string_view(in_hdr, kHeaderBytes), pred, "allgather header");
            const auto magic = r.u32();
            const int their_step = -1 - r.i32();
            const auto their_seq = r.u64();
            const auto their_bytes = r.u64();
            if (magic != detail::kWireMagic || their_step != step || their_seq != seq ||
                their_bytes != want)
              throw protocol_error(
                  pred, detail::cat("grouped broadcasts #", seq, " on rank ", rank_,
                                    " run as an allgather (rank ", in, "'s block of ", want,
                                    " bytes at step ", step, "); rank ", pred,
                                    " sent something else (the ranks disagree on the operation)"));
            return std::pair<void*, std::size_t>{block[static_cast<std::size_t>(in)], want};
          },
          deadline, "allgather", succ, pred);
    }
  }

  void run_broadcast(char* buf, std::size_t bytes, int root, std::uint64_t seq) {
    const int pos = (rank_ - root + size_) % size_;
    const bool forward = pos < size_ - 1;
    const int succ = (rank_ + 1) % size_;
    const int pred = (rank_ + size_ - 1) % size_;
    auto progress = [&] { return detail::Deadline::after(timeout_); };
    char hdr[kHeaderBytes];
    if (pos == 0) {
      detail::Writer w;
      w.u32(detail::kWireMagic);
      w.i32(root);
      w.u64(seq);
      w.u64(bytes);
      std::memcpy(hdr, w.bytes().data(), kHeaderBytes);
      // The header with the first piece (one call: the successor wakes once for both).
      const std::size_t first = std::min(kPiece, bytes);
      detail::send_all2(succ_.get(), hdr, kHeaderBytes, buf, first, progress(), "broadcast", succ);
      for (std::size_t off = first; off < bytes; off += kPiece)
        detail::send_all(succ_.get(), buf + off, std::min(kPiece, bytes - off), progress(),
                         "broadcast", succ);
      return;
    }
    detail::recv_all(pred_.get(), hdr, kHeaderBytes, progress(), "broadcast", pred);
    detail::Reader r(std::string_view(hdr, kHeaderBytes), pred, "broadcast header");
    const auto magic = r.u32();
    const int their_root = r.i32();
    const auto their_seq = r.u64();
    const auto their_bytes = r.u64();
    if (magic != detail::kWireMagic || their_root != root || their_seq != seq ||
        their_bytes != bytes)
      throw protocol_error(
          pred,
          detail::cat("broadcast #", seq, " on rank ", rank_, " expects root ", root, " and ",
                      bytes, " bytes; the ring carries root ", their_root, ", ", their_bytes,
                      " bytes, operation #", their_seq, " (the ranks disagree on the operation)"));
    if (forward) detail::send_all(succ_.get(), hdr, kHeaderBytes, progress(), "broadcast", succ);
    for (std::size_t off = 0; off < bytes; off += kPiece) {
      const std::size_t n = std::min(kPiece, bytes - off);
      detail::recv_all(pred_.get(), buf + off, n, progress(), "broadcast", pred);
      if (forward) detail::send_all(succ_.get(), buf + off, n, progress(), "broadcast", succ);
    }
  }

  int rank_ = 0;
  int size_ = 1;
  std::chrono::milliseconds timeout_{60000};
  std::uint64_t session_ = 0;
  std::uint64_t seq_ = 0;
  int group_depth_ = 0;
  std::vector<PendingBroadcast> pending_;
  detail::Fd succ_;
  detail::Fd pred_;
  ControlChannel control_;
  bool aborted_ = false;
  std::string abort_reason_;
  WireState wire_;
};

static_assert(Communicator<HostCommunicator>);
static_assert(GroupedCommunicator<HostCommunicator>);
static_assert(MonitoredCommunicator<HostCommunicator>);
static_assert(WireStateCommunicator<HostCommunicator>);

}  // namespace weightsync
