// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// The rendezvous hello (what rank 0 reads from any connection) and welcome (what a peer reads
// from rank 0): any payload decodes within its limits or throws protocol_error; a decoded hello
// re-encodes to the same bytes.
#include <weightsync/host/rendezvous.hpp>

#include "fuzz_support.hpp"

namespace ws = weightsync;

WS_FUZZ_ENTRY {
  if (size < 1) return 0;
  const auto in = ws_fuzz::bytes(data + 1, size - 1);
  const std::size_t max_blob = data[0] * 4u;
  try {
    const auto h = ws::detail::parse_hello(in, max_blob);
    ws_fuzz::require(h.blob.size() <= max_blob && h.token.size() <= 4096, "hello over its limits");
    ws::RendezvousOptions o;
    o.rank = h.rank;
    o.world_size = h.world_size;
    o.token = h.token;
    ws_fuzz::require(ws::detail::hello_payload(o, h.blob) == in, "hello did not re-encode");
  } catch (const ws::protocol_error&) {
  }
  try {
    const int world = 1 + data[0] % 8;
    const auto w = ws::detail::parse_welcome(in, world, max_blob);
    ws_fuzz::require(w.blobs.size() == static_cast<std::size_t>(world) &&
                         w.addresses.size() == static_cast<std::size_t>(world),
                     "welcome with the wrong number of ranks");
  } catch (const ws::protocol_error&) {
  }
  return 0;
}
