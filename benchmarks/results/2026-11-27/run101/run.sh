#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 101 (2026-11-27, one GPU): the review's mend (the ipc verdict's limit as a constant) on a
# GPU: every ipc test and the bench smoke tests.
#   bash benchmarks/results/2026-11-27/run101/run.sh OUT_DIR
set -u
out=${1:?usage: run.sh OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
WS_CPU_TESTS=0 WS_BENCH=none WS_BUILD_TARGETS="weightsync_gpu_tests weightsync_bench shadow_bench" \
  WS_CTEST_ARGS="-R gpu.ipc|gpu.p2p|bench.smoke" bash scripts/gpu-check.sh "$out/gpu" > "$out/gpu-check.txt" 2>&1
echo "gpu-check rc=$? ($((SECONDS - start)) s)" >> "$out/gpu-check.txt"
tail -8 "$out/gpu-check.txt"
