#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 90 (2026-11-27, two H200s of one host): the four GPU tests that need two distinct devices,
# on the final tree (run 89 skipped them on one GPU). The command, as run:
#   export NCCL_NVLS_ENABLE=0
#   WS_CPU_TESTS=0 WS_BENCH=none WS_BUILD_TARGETS="weightsync_gpu_tests" \
#     WS_CTEST_ARGS="-R (p2p|two.GPUs) --timeout 120" \
#     timeout 200 bash scripts/gpu-check.sh OUT_DIR/check
set -u
out=${1:?usage: run.sh OUT_DIR}
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
WS_CPU_TESTS=0 WS_BENCH=none WS_BUILD_TARGETS="weightsync_gpu_tests" \
  WS_CTEST_ARGS="-R (p2p|two.GPUs) --timeout 120" \
  timeout 200 bash scripts/gpu-check.sh "$out/check"
