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

#if WEIGHTSYNC_TEST_CATCH2_MAJOR >= 3
namespace ws_clara = Catch::Clara;
#else
namespace ws_clara = Catch::clara;
#endif

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
  auto& r = ws_test::role();
  using ws_clara::Opt;
  auto cli = session.cli() | Opt(r.rank, "rank")["--ws-rank"]("peer role: this process's rank") |
             Opt(r.world, "n")["--ws-world"]("peer role: world size") |
             Opt(r.port, "port")["--ws-port"]("peer role: rendezvous port") |
             Opt(r.arg, "arg")["--ws-arg"]("peer role: test-specific argument");
  session.cli(cli);
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
