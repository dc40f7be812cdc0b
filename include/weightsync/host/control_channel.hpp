// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! ControlChannel: the connections a rank keeps to the peers it met at rendezvous. They tell a rank
//! at once when a peer process is gone, and carry abort notices and clean goodbyes.

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "weightsync/detail/format.hpp"
#include "weightsync/detail/socket.hpp"
#include "weightsync/detail/wire.hpp"
#include "weightsync/error.hpp"

namespace weightsync {

//! Open connections to the peers met at rendezvous (rank 0: one per rank; others: one to rank 0).
//! check() reports a peer that is gone or aborted; abort() tells them we are.
class ControlChannel {
 public:
  ControlChannel() = default;
  ControlChannel(int rank, std::vector<detail::Fd> peers) : rank_(rank), peers_(std::move(peers)) {
    departed_.assign(peers_.size(), false);
  }
  ControlChannel(ControlChannel&&) noexcept = default;
  ControlChannel& operator=(ControlChannel&&) noexcept = default;
  ~ControlChannel() { close(); }

  bool empty() const noexcept {
    for (const auto& p : peers_)
      if (p) return false;
    return true;
  }

  //! The first peer that left cleanly (sent its goodbye), -1 when none: reads a goodbye waiting
  //! on a connection, and leaves anything else (a close, an abort notice) to check(). A group with
  //! a departed peer can run no more transfers. Non-blocking; never throws.
  int departed_peer() noexcept {
    for (std::size_t r = 0; r < peers_.size(); ++r) {
      if (!peers_[r] || departed_[r]) continue;
      pollfd pf{peers_[r].get(), POLLIN, 0};
      if (::poll(&pf, 1, 0) <= 0) continue;
      char hdr[detail::kMsgHeaderBytes];
      const ssize_t k = ::recv(peers_[r].get(), hdr, sizeof hdr, MSG_PEEK | MSG_DONTWAIT);
      if (k < static_cast<ssize_t>(sizeof hdr)) continue;
      const auto h = detail::parse_header(hdr);
      if (h.magic != detail::kWireMagic || h.length > 64 * 1024 ||
          h.type != static_cast<std::uint16_t>(detail::MsgType::goodbye))
        continue;
      try {
        std::string msg(detail::kMsgHeaderBytes + h.length, '\0');
        detail::recv_all(peers_[r].get(), msg.data(), msg.size(),
                         detail::Deadline::after(std::chrono::milliseconds(1000)), "control",
                         static_cast<int>(r));
        departed_[r] = true;
      } catch (...) {
      }
    }
    for (std::size_t r = 0; r < departed_.size(); ++r)
      if (departed_[r]) return static_cast<int>(r);
    return -1;
  }

  //! Non-blocking. @throws peer_error when a peer's connection closed without a goodbye,
  //! remote_error when a peer sent an abort notice.
  void check() {
    for (std::size_t r = 0; r < peers_.size(); ++r) {
      if (!peers_[r] || departed_[r]) continue;
      pollfd pf{peers_[r].get(), POLLIN, 0};
      if (::poll(&pf, 1, 0) <= 0) continue;
      const int peer = static_cast<int>(r);
      char hdr[detail::kMsgHeaderBytes];
      const ssize_t k = ::recv(peers_[r].get(), hdr, sizeof hdr, MSG_PEEK | MSG_DONTWAIT);
      if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        peers_[r].reset();
        throw peer_error(peer, detail::cat("rank ", peer,
                                           " is gone: its control connection closed (process "
                                           "exited or was killed)"));
      }
      if (k < static_cast<ssize_t>(sizeof hdr)) continue;  // header still arriving
      const auto h = detail::parse_header(hdr);
      if (h.magic != detail::kWireMagic || h.length > 64 * 1024) {
        peers_[r].reset();
        throw protocol_error(peer, detail::cat("garbage on the control connection of rank ", peer));
      }
      std::string msg(detail::kMsgHeaderBytes + h.length, '\0');
      detail::recv_all(peers_[r].get(), msg.data(), msg.size(),
                       detail::Deadline::after(std::chrono::milliseconds(1000)), "control", peer);
      detail::Reader rd(std::string_view(msg).substr(detail::kMsgHeaderBytes), peer, "control");
      if (h.type == static_cast<std::uint16_t>(detail::MsgType::goodbye)) {
        departed_[r] = true;
        continue;
      }
      if (h.type == static_cast<std::uint16_t>(detail::MsgType::abort)) {
        const std::string reason = rd.str(4096);
        peers_[r].reset();
        throw remote_error(peer, detail::cat("rank ", peer, " aborted: ", reason));
      }
      peers_[r].reset();
      throw protocol_error(peer, detail::cat("unexpected message type ", h.type,
                                             " on the control connection of rank ", peer));
    }
  }

  //! Best effort, never throws, never blocks for long: tells every peer we abort, then closes.
  void abort(const std::string& reason) noexcept { say_and_close(detail::MsgType::abort, reason); }

  //! Tells every peer we leave cleanly (so that they do not take our exit for a crash), then
  //! closes.
  void close() noexcept { say_and_close(detail::MsgType::goodbye, ""); }

 private:
  void say_and_close(detail::MsgType type, const std::string& reason) noexcept {
    try {
      detail::Writer w;
      if (type == detail::MsgType::abort) w.str(reason.substr(0, 1024));
      const auto msg = detail::Writer::message(type, w.bytes());
      for (auto& p : peers_) {
        if (!p) continue;
        try {
          detail::send_all(p.get(), msg.data(), msg.size(),
                           detail::Deadline::after(std::chrono::milliseconds(200)), "control", -1);
        } catch (...) {
        }
        p.reset();
      }
    } catch (...) {
    }
    peers_.clear();
  }

  [[maybe_unused]] int rank_ = 0;  // (for debugging; clang warns on unused private fields)
  std::vector<detail::Fd> peers_;
  std::vector<bool> departed_;
};

}  // namespace weightsync
