// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! The peer-role options of the test mains (Catch2 v2 and v3): a multi-process test re-runs its own
//! binary with --ws-rank/--ws-world/--ws-port[/--ws-arg] for every peer (support/spawn.hpp).

#include "support/catch.hpp"
#include "support/role.hpp"

namespace ws_test {

#if WEIGHTSYNC_TEST_CATCH2_MAJOR >= 3
namespace clara = Catch::Clara;
#else
namespace clara = Catch::clara;
#endif

inline void add_role_options(Catch::Session& session) {
  auto& r = role();
  using clara::Opt;
  session.cli(session.cli() | Opt(r.rank, "rank")["--ws-rank"]("peer role: this process's rank") |
              Opt(r.world, "n")["--ws-world"]("peer role: world size") |
              Opt(r.port, "port")["--ws-port"]("peer role: rendezvous port") |
              Opt(r.arg, "arg")["--ws-arg"]("peer role: test-specific argument"));
}

}  // namespace ws_test
