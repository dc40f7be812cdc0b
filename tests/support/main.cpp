// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Catch2 main for the CPU test executables (v2 and v3), with the role options the
// multi-process tests use when they re-run this binary as a peer.
#define CATCH_CONFIG_RUNNER
// GCC 12 under -fsanitize=address misfires -Wmaybe-uninitialized inside Catch2's <regex> use.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "support/catch.hpp"
#include "support/role_cli.hpp"

int main(int argc, char** argv) {
  Catch::Session session;
  ws_test::add_role_options(session);
  if (const int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;
  return session.run();
}
