// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! How TcpStoreClient opens a torch >= 2.1 connection: connect, then torch 2.4's opening (VALIDATE
//! and PING in one write), retrying connections the store resets or closes before it answers,
//! within a validation window; the errors say which dialect to try when no answer comes. A store
//! that refuses the connection (TcpStoreServer when full: kRefusedPrefix and a reason) fails the
//! connect at once, with the store's reason.

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "weightsync/c10d/wire.hpp"
#include "weightsync/detail/format.hpp"
#include "weightsync/detail/socket.hpp"
#include "weightsync/error.hpp"
#include "weightsync/tuning.hpp"

namespace weightsync::detail::c10d {

//! The store's reason when what waits on `fd` is a refusal (kRefusedPrefix, a reason, a newline:
//! TcpStoreServer when full), read off the socket; "" when it is anything else (a reply; nothing is
//! consumed then), or when nothing came before `deadline`. Printable ASCII only, at most 300 bytes.
inline std::string store_refusal(int fd, Deadline deadline) {
  char buf[512];
  std::size_t n = 0;
  while (true) {
    const ssize_t k = ::recv(fd, buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT);
    n = k > 0 ? static_cast<std::size_t>(k) : 0;
    const std::size_t m = std::min(n, kRefusedPrefix.size());
    if (std::string_view(buf, m) != kRefusedPrefix.substr(0, m)) return {};  // a reply
    if (n >= kRefusedPrefix.size()) break;
    if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return {};
    if (deadline.expired()) return {};
    if (n > 0) {  // part of it: the rest is on its way (one segment, as a rule)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    pollfd p{fd, POLLIN, 0};
    ::poll(&p, 1, deadline.poll_ms());
  }
  const ssize_t k = ::recv(fd, buf, n, MSG_DONTWAIT);  // what was peeked: consumed now
  std::string why;
  for (std::size_t i = kRefusedPrefix.size(); k > 0 && i < n && why.size() < 300; ++i) {
    if (buf[i] == '\n') break;
    why += (buf[i] >= 0x20 && buf[i] < 0x7f) ? buf[i] : '?';
  }
  return why.empty() ? std::string("no reason given") : why;
}

//! VALIDATE + PING (torch >= 2.4's opening) on `fd`, bounded by `deadline`; `where` names the
//! store in messages. Returns "" or, when the store refused the connection, its reason.
//! @throws protocol_error when PING's nonce comes back wrong (no TCPStore); timeout_error /
//! peer_error as send_all and recv_all throw them.
inline std::string validate_and_ping(int fd, Deadline deadline, const std::string& where) {
  Out q;
  const auto nonce = static_cast<std::uint32_t>(::getpid());
  q.u8(0).u32(kValidationMagic).u8(13).u32(nonce);
  send_all(fd, q.bytes().data(), q.bytes().size(), deadline, "store PING", 0);
  if (auto why = store_refusal(fd, deadline); !why.empty()) return why;
  std::uint32_t back = 0;
  recv_all(fd, &back, 4, deadline, "store PING", 0);
  if (back != nonce)
    throw protocol_error(0, cat("the TCPStore at ", where, " answered PING ", nonce, " with ", back,
                                ": not a torch TCPStore server"));
  return {};
}

//! The error of a connection the store refused: `why` is its reason.
inline peer_error store_refused(const std::string& where, const std::string& why) {
  return peer_error(
      0, cat("store connect: the TCPStore at ", where, " refused this connection: ", why));
}

//! Connects to host:port (retrying a refused connection until `deadline`) and validates the
//! connection with validate_and_ping. The validation window, `window_ms` long, opens with the
//! first accepted connection and ends by `deadline`; a connection the store resets or closes
//! before answering is retried inside it; one it refuses (full) is not. @throws
//! timeout_error("store connect") when nobody accepts; timeout_error("store validate") when the
//! store never answers; protocol_error when it closed every connection for the whole window, or
//! answers PING wrongly; peer_error (store_refused) when it refused the connection.
inline Fd connect_validated(const std::string& host, int port, Deadline deadline,
                            std::chrono::milliseconds window_ms) {
  const std::string where = cat(host, ":", port);
  const std::string hint =
      "; is it a store of torch < 2.1? Connect with TcpStoreWire::torch2_0 (torch 2.0) or "
      "TcpStoreWire::torch1_13 (torch 1.13)";
  std::optional<Deadline> window;
  std::string reset;  // why the last attempt was closed, if one was
  auto backoff = Tuning::Connect::store_first_backoff;
  while (true) {
    Fd fd = connect_tcp(host, port, deadline, "store connect", 0);
    if (!window) window = Deadline{std::min(deadline.at, Deadline::after(window_ms).at)};
    std::string refused;
    try {
      refused = validate_and_ping(fd.get(), *window, where);
      if (refused.empty()) return fd;
    } catch (const timeout_error&) {  // the window is over
      if (reset.empty())
        throw timeout_error("store validate", 0,
                            cat("the store at ", where,
                                " did not answer torch 2.x's validation (VALIDATE + PING) within ",
                                window_ms.count(), " ms", hint));
    } catch (const peer_error& e) {  // reset or closed before answering: retry in the window
      reset = e.what();
      refused = store_refusal(fd.get(), Deadline{Clock::now()});  // unless it said why
    }
    if (!refused.empty()) throw store_refused(where, refused);
    fd.reset();  // closed before waiting to retry
    if (window->expired())
      throw protocol_error(0, cat("the store at ", where,
                                  " closed every connection before answering torch 2.x's "
                                  "validation (VALIDATE + PING) for ",
                                  window_ms.count(), " ms (last: ", reset, ")", hint));
    std::this_thread::sleep_for(std::min<std::chrono::milliseconds>(
        backoff, std::chrono::milliseconds(std::max(1, window->poll_ms()))));
    backoff = std::min(backoff * 2, Tuning::Connect::store_max_backoff);
  }
}

}  // namespace weightsync::detail::c10d
