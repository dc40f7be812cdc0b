// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! The one Catch2 main (v2 and v3) behind every test executable: the CPU main (support/main.cpp)
//! and the GPU main (support/gpu_main.cpp) differ only in the MainOptions they pass. Include this
//! from a main file only: it compiles Catch2's runner into that translation unit.

#define CATCH_CONFIG_RUNNER
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "support/catch.hpp"
#include "support/role.hpp"
#include "support/role_cli.hpp"

namespace ws_test {

struct MainOptions {
  //! Set before anything runs unless already set (so the peers this binary starts see them too).
  std::vector<std::pair<std::string, std::string>> env_defaults;
  //! Why the tests cannot run on this machine, or "" when they can. Asked only when the binary
  //! runs tests as the parent (not when listing them, nor as a peer); a reason prints
  //! "SKIPPED: <reason>" and the process exits with 4, Catch2 v3's all-skipped code.
  std::function<std::string()> unavailable;
  //! Exit with 4 when the run passed and some test called WS_SKIP (Catch2 v2 has no SKIP).
  bool skips_exit_4 = false;
};

//! Whether the command line only lists or describes tests (catch_discover_tests runs the binary
//! that way at build time, on machines that may lack what the tests need).
inline bool only_listing(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--list", 0) == 0 || a == "-l" || a == "-h" || a == "--help" || a == "-?")
      return true;
  }
  return false;
}

inline int run_catch(int argc, char** argv, const MainOptions& o = {}) {
  const bool listing = only_listing(argc, argv);
  for (const auto& [name, value] : o.env_defaults) ::setenv(name.c_str(), value.c_str(), 0);
  Catch::Session session;
  add_role_options(session);
  if (const int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;
  if (o.unavailable && !listing && !role().is_peer()) {
    if (const std::string why = o.unavailable(); !why.empty()) {
      std::printf("SKIPPED: %s\n", why.c_str());
      return 4;
    }
  }
  const int rc = session.run();
  if (o.skips_exit_4 && rc == 0 && skipped_count() > 0) return 4;
  // Catch2 returns the number of failed assertions: exactly 4 would read as CTest's skip code
  // (SKIP_RETURN_CODE 4) and hide the failures. 4 is a skip only when a test skipped (v3's
  // all-skipped code); otherwise it is reported as a failure.
  if (rc == 4 && skipped_count() == 0) return 1;
  return rc;
}

}  // namespace ws_test
