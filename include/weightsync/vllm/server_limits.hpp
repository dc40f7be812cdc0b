// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! ServerLimits: what a ControlServer (<weightsync/vllm/http_server.hpp>) holds against its
//! clients. No cpp-httplib needed to name them (a command line can fill them in).

#include <chrono>
#include <cstddef>

namespace weightsync::http {

//! What a ControlServer holds against its clients. Each is a trade-off between a slow but honest
//! client and how much one attacker can hold; the defaults suit a control plane on a trusted
//! network with a handful of trainers.
struct ServerLimits {
  //! Worker threads: requests served at once (a transfer's /update_weights holds one each).
  std::size_t threads = 8;
  //! Complete requests waiting for a worker; one more gets 503 (Retry-After: 1) at once.
  std::size_t max_queued = 64;
  //! Connections read at once (each until its request is complete; idle keep-alive ones too).
  //! One more evicts the one that has waited longest for its request (a slowloris client).
  //! Keep it below the process's file descriptor limit.
  std::size_t max_connections = 512;
  //! The request line and every header must arrive within this, from the first byte (a
  //! slowloris client is dropped with 408); the first byte of a connection's first request too.
  std::chrono::milliseconds header_timeout{10000};
  //! A whole request, headers and body, must arrive within this.
  std::chrono::milliseconds request_timeout{60000};
  //! Each wait for more bytes of a request, and each wait to send bytes of a reply.
  std::chrono::milliseconds read_timeout{5000};
  std::chrono::milliseconds write_timeout{5000};
  //! An idle keep-alive connection is closed after this; at most this many requests per
  //! connection.
  std::chrono::milliseconds keep_alive_timeout{5000};
  std::size_t keep_alive_max_count = 100;
  //! The request line and headers together, and the number of headers; more gets 431.
  std::size_t max_header_bytes = std::size_t{64} << 10;
  std::size_t max_header_count = 100;
};

}  // namespace weightsync::http
