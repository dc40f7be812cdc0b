// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// The wire Reader: a sequence of reads chosen by the input's first bytes over the rest never reads
// out of bounds; a truncated or oversized field is a protocol_error. Also the 12-byte header.
#include <weightsync/detail/wire.hpp>

#include "fuzz_support.hpp"

namespace ws = weightsync;

WS_FUZZ_ENTRY {
  if (size < 1) return 0;
  const std::size_t nops = data[0] % 16;
  if (size < 1 + nops) return 0;
  const auto payload = ws_fuzz::bytes(data + 1 + nops, size - 1 - nops);
  if (payload.size() >= ws::detail::kMsgHeaderBytes) {
    const auto h = ws::detail::parse_header(payload.data());
    const auto again = ws::detail::Writer::message(static_cast<ws::detail::MsgType>(h.type),
                                                   std::string(h.length % 64, 'x'));
    ws_fuzz::require(again.size() == ws::detail::kMsgHeaderBytes + h.length % 64, "header size");
  }
  ws::detail::Reader r(payload, 3, "fuzz");
  try {
    for (std::size_t i = 0; i < nops; ++i) {
      const std::size_t before = r.remaining();
      switch (data[1 + i] % 7) {
        case 0: (void)r.u8(); break;
        case 1: (void)r.u16(); break;
        case 2: (void)r.u32(); break;
        case 3: (void)r.u64(); break;
        case 4: (void)r.i32(); break;
        case 5: {
          const auto s = r.str(data[1 + i]);
          ws_fuzz::require(s.size() <= data[1 + i], "string over its limit");
          break;
        }
        default: r.expect_done(); break;
      }
      ws_fuzz::require(r.remaining() <= before, "reader went backwards");
    }
  } catch (const ws::protocol_error&) {
  }
  return 0;
}
