// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Catch2 main for the CPU test executables (v2 and v3), with the role options the
// multi-process tests use when they re-run this binary as a peer.
// GCC 12 under -fsanitize=address misfires -Wmaybe-uninitialized inside Catch2's <regex> use.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "support/catch_main.hpp"

int main(int argc, char** argv) {
  return ws_test::run_catch(argc, argv);
}
