// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// NcclInitInfo / NcclUpdateInfo from JSON: any bytes either parse into a valid info that survives
// a round trip, or throw config_error; nothing else (no other exception, no crash, no UB).
#include <weightsync/vllm.hpp>

#include "fuzz_support.hpp"

namespace ws = weightsync;

template <class Info>
static void check(const nlohmann::json& j) {
  Info info;
  try {
    info = j.get<Info>();
  } catch (const ws::config_error&) {
    return;
  }
  info.validate();
  const nlohmann::json again = info;
  ws_fuzz::require(again.get<Info>() == info, "to_json/from_json round trip changed the info");
}

WS_FUZZ_ENTRY {
  const auto j = nlohmann::json::parse(data, data + size, nullptr, false);
  if (j.is_discarded()) return 0;
  check<ws::NcclInitInfo>(j);
  check<ws::NcclUpdateInfo>(j);
  try {
    const auto u = j.get<ws::NcclUpdateInfo>();
    for (const auto& m : u.metas()) (void)m.nbytes();
  } catch (const ws::config_error&) {
  }
  return 0;
}
