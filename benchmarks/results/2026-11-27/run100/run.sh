#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 100 (2026-11-27, two GPUs of one host): the final tree's ipc and p2p tests, the four that
# need two devices among them (the ipc transport changed after run 95: sampled pull timing).
#   bash benchmarks/results/2026-11-27/run100/run.sh OUT_DIR
set -u
out=${1:?usage: run.sh OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
WS_CPU_TESTS=0 WS_BENCH=none WS_BUILD_TARGETS="weightsync_gpu_tests" \
  WS_CTEST_ARGS="-R gpu.ipc|gpu.p2p" bash scripts/gpu-check.sh "$out/gpu" > "$out/gpu-check.txt" 2>&1
echo "gpu-check rc=$? ($((SECONDS - start)) s)" >> "$out/gpu-check.txt"
tail -22 "$out/gpu-check.txt"
