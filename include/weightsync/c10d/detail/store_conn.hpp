// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! One TcpStoreServer connection's socket side: its queued replies and when they last moved, its
//! deadlines, and the choices the server makes among connections under pressure: whom to evict
//! when full (newest_unproven) and whose memory to take back when over budget (longest_stalled).

#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <deque>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "weightsync/c10d/detail/store_commands.hpp"
#include "weightsync/c10d/detail/store_engine.hpp"
#include "weightsync/detail/format.hpp"
#include "weightsync/detail/socket.hpp"

namespace weightsync::detail::c10d {

struct StoreConn {
  Fd fd;
  std::deque<std::string> out;  //!< replies to send, front first (no copy, no erase of a prefix)
  std::size_t out_off = 0;      //!< bytes of out.front() already sent
  std::size_t out_bytes = 0;    //!< unsent bytes in `out`
  std::string peer;
  Deadline partial_since{};
  bool partial = false;
  bool read_closed = false;  //!< the peer half-closed: flush the replies, then close
  std::size_t in_bytes = 0;  //!< what the engine holds of its incomplete request
  Clock::time_point opened = Clock::now();
  Clock::time_point last_active = opened;
  Clock::time_point moved = opened;  //!< its replies last moved (or were queued behind none)
};

using StoreConns = std::map<int, StoreConn>;

//! Queues each reply on its connection (replies to connections gone are dropped); `out_total`
//! counts the queued bytes of every connection.
inline void deliver(StoreConns& conns, std::vector<Reply>& replies, std::size_t& out_total) {
  for (auto& r : replies) {
    auto it = conns.find(r.conn);
    if (it == conns.end() || r.bytes.empty()) continue;
    StoreConn& c = it->second;
    if (c.out_bytes == 0) c.moved = Clock::now();
    c.out_bytes += r.bytes.size();
    out_total += r.bytes.size();
    c.out.push_back(std::move(r.bytes));
  }
  replies.clear();
}

//! Writes what is queued, without blocking; returns "" or the reason to drop the connection
//! (a send that failed, more than `max_pending` bytes left unread).
inline std::string flush_replies(StoreConn& c, std::size_t& out_total, std::size_t max_pending) {
  while (!c.out.empty()) {
    const std::string& b = c.out.front();
    const ssize_t k = ::send(c.fd.get(), b.data() + c.out_off, b.size() - c.out_off, MSG_NOSIGNAL);
    if (k > 0) {
      const auto n = static_cast<std::size_t>(k);
      c.out_off += n;
      c.out_bytes -= n;
      out_total -= n;
      c.moved = Clock::now();
      if (c.out_off == b.size()) {
        c.out.pop_front();
        c.out_off = 0;
      }
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    return cat("send failed: ", errno_string(errno));
  }
  if (c.out_bytes > max_pending)
    return cat(c.out_bytes, " bytes of replies unread (the peer stopped reading)");
  return {};
}

//! Whom a full server evicts: the newest connection that has run no request but VALIDATE and
//! PING (StoreEngine::worked) and is at least `min_age` old; -1 when there is none.
inline int newest_unproven(const StoreConns& conns, const StoreEngine& engine,
                           std::chrono::milliseconds min_age, Clock::time_point now) {
  int best = -1;
  Clock::time_point newest{};
  for (const auto& [id, c] : conns)
    if (!engine.worked(id) && now - c.opened >= min_age && (best < 0 || c.opened >= newest)) {
      best = id;
      newest = c.opened;
    }
  return best;
}

//! Whose memory a server over budget takes back: the connection (not `except`) with replies
//! queued that have not moved for the longest time; -1 when there is none.
inline int longest_stalled(const StoreConns& conns, int except) {
  int victim = -1;
  Clock::time_point oldest{};
  for (const auto& [id, c] : conns)
    if (id != except && c.out_bytes > 0 && (victim < 0 || c.moved < oldest)) {
      victim = id;
      oldest = c.moved;
    }
  return victim;
}

}  // namespace weightsync::detail::c10d
