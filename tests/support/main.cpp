// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Catch2 main for the CPU test executables (v2 and v3), with the role options the
// multi-process tests use when they re-run this binary as a peer.
#define CATCH_CONFIG_RUNNER
#include "support/catch.hpp"
#include "support/role.hpp"

#if WEIGHTSYNC_TEST_CATCH2_MAJOR >= 3
namespace ws_clara = Catch::Clara;
#else
namespace ws_clara = Catch::clara;
#endif

int main(int argc, char** argv) {
  Catch::Session session;
  auto& r = ws_test::role();
  using ws_clara::Opt;
  auto cli = session.cli() | Opt(r.rank, "rank")["--ws-rank"]("peer role: this process's rank") |
             Opt(r.world, "n")["--ws-world"]("peer role: world size") |
             Opt(r.port, "port")["--ws-port"]("peer role: rendezvous port") |
             Opt(r.arg, "arg")["--ws-arg"]("peer role: test-specific argument");
  session.cli(cli);
  if (const int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;
  const int rc = session.run();
  return rc;
}
