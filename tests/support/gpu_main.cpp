// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Catch2 main for GPU test executables. Listing tests never touches CUDA (catch_discover_tests
// lists them at build time on machines without a GPU). Without a device every test reports
// "SKIPPED: no CUDA device (...)" and the process exits with 4, Catch2 v3's all-skipped code.
#include <cuda_runtime_api.h>

#include "support/catch_main.hpp"

int main(int argc, char** argv) {
  ws_test::MainOptions o;
  // Keep NVLink multicast off for NCCL in every process (also the peers this binary starts).
  o.env_defaults = {{"NCCL_NVLS_ENABLE", "0"}};
  o.unavailable = []() -> std::string {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaSuccess && n > 0) return "";
    return std::string("no CUDA device (") +
           (e != cudaSuccess ? cudaGetErrorName(e) : "cudaGetDeviceCount returned 0") + ")";
  };
  o.skips_exit_4 = true;
  return ws_test::run_catch(argc, argv, o);
}
