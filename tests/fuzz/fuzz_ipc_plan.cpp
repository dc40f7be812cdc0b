// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// The IPC plan decoder (host-only part of the ipc/p2p transports): any bytes decode or throw
// protocol_error, never allocate more than the message can describe, and a decoded plan re-encodes
// to the same bytes.
#include <weightsync/ipc/detail/plan.hpp>

#include "fuzz_support.hpp"

namespace ws = weightsync;

WS_FUZZ_ENTRY {
  const auto in = ws_fuzz::bytes(data, size);
  try {
    const auto p = ws::detail::IpcPlan::decode(in);
    ws_fuzz::require(p.encode() == in, "plan did not re-encode to its bytes");
  } catch (const ws::protocol_error&) {
  }
  return 0;
}
