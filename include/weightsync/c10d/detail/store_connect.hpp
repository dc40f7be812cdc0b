// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! How TcpStoreClient opens a torch >= 2.1 connection: connect, then torch 2.4's opening (VALIDATE
//! and PING in one write), retrying connections the store resets or closes before it answers,
//! within a validation window; the errors say which dialect to try when no answer comes.

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <thread>

#include "weightsync/c10d/wire.hpp"
#include "weightsync/detail/format.hpp"
#include "weightsync/detail/socket.hpp"
#include "weightsync/tuning.hpp"
#include "weightsync/error.hpp"

namespace weightsync::detail::c10d {

//! VALIDATE + PING (torch >= 2.4's opening) on `fd`, bounded by `deadline`; `where` names the
//! store in messages. @throws protocol_error when PING's nonce comes back wrong (no TCPStore);
//! timeout_error / peer_error as send_all and recv_all throw them.
inline void validate_and_ping(int fd, Deadline deadline, const std::string& where) {
  Out q;
  const auto nonce = static_cast<std::uint32_t>(::getpid());
  q.u8(0).u32(kValidationMagic).u8(13).u32(nonce);
  send_all(fd, q.bytes().data(), q.bytes().size(), deadline, "store PING", 0);
  std::uint32_t back = 0;
  recv_all(fd, &back, 4, deadline, "store PING", 0);
  if (back != nonce)
    throw protocol_error(0, cat("the TCPStore at ", where, " answered PING ", nonce, " with ", back,
                                ": not a torch TCPStore server"));
}

//! Connects to host:port (retrying a refused connection until `deadline`) and validates the
//! connection with validate_and_ping. The validation window, `window_ms` long, opens with the
//! first accepted connection and ends by `deadline`; a connection the store resets or closes
//! before answering is retried inside it. @throws timeout_error("store connect") when nobody
//! accepts; timeout_error("store validate") when the store never answers; protocol_error when it
//! closed every connection for the whole window, or answers PING wrongly.
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
    try {
      validate_and_ping(fd.get(), *window, where);
      return fd;
    } catch (const timeout_error&) {  // the window is over
      if (reset.empty())
        throw timeout_error("store validate", 0,
                            cat("the store at ", where,
                                " did not answer torch 2.x's validation (VALIDATE + PING) within ",
                                window_ms.count(), " ms", hint));
    } catch (const peer_error& e) {  // reset or closed before answering: retry in the window
      reset = e.what();
    }
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
