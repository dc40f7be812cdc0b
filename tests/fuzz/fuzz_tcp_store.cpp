// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// The c10d TCPStore server's protocol engine (what TcpStoreServer runs on every connection's
// bytes): byte 0 says how the rest, a client's stream, is cut and whether a second connection
// sends it too (see store_fuzz_one); the engine never throws or crashes, answers only open
// connections, keeps its byte count exact and within its bound, and answers the same however the
// stream is cut.
#include <weightsync/c10d/detail/store_engine.hpp>

#include <string>

#include "fuzz_support.hpp"

WS_FUZZ_ENTRY {
  std::string why;
  if (weightsync::detail::store_fuzz_one(data, size, &why) != 0) {
    std::fprintf(stderr, "%s\n", why.c_str());
    ws_fuzz::require(false, "TCPStore engine invariant");
  }
  return 0;
}
