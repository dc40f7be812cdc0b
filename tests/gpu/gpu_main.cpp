// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Catch2 main for GPU test executables. Listing tests never touches CUDA (catch_discover_tests
// lists them at build time on machines without a GPU). Without a device every test reports
// "SKIPPED: no CUDA device (...)" and the process exits with 4, Catch2 v3's all-skipped code.
#define CATCH_CONFIG_RUNNER
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "support/catch.hpp"
#include "support/role.hpp"
#include "support/role_cli.hpp"

int main(int argc, char** argv) {
  bool listing = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--list", 0) == 0 || a == "-l" || a == "-h" || a == "--help" || a == "-?")
      listing = true;
  }
  // Keep NVLink multicast off for NCCL in every process (also the peers this binary starts).
  ::setenv("NCCL_NVLS_ENABLE", "0", 0);
  Catch::Session session;
  ws_test::add_role_options(session);
  const auto& r = ws_test::role();
  if (const int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;
  if (!listing && !r.is_peer()) {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
      std::printf("SKIPPED: no CUDA device (%s)\n",
                  e != cudaSuccess ? cudaGetErrorName(e) : "cudaGetDeviceCount returned 0");
      return 4;
    }
  }
  const int rc = session.run();
  if (rc == 0 && ws_test::skipped_count() > 0) return 4;
  return rc;
}
