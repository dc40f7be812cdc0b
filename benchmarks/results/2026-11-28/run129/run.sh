#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 129 (2026-11-28, two GPUs of one host): the three GPU tests that need two devices (p2p round
# trips, p2p sharded, "ipc refuses peers on two GPUs"), on the landing tree.
#   bash benchmarks/results/2026-11-28/run129/run.sh OUT_DIR
set -u
out=${1:?usage: run.sh OUT_DIR}
mkdir -p "$out"; out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
WS_CPU_TESTS=0 WS_BENCH=none WS_CTEST_ARGS="-R p2p|two.GPUs" WS_BUILD_TARGETS="weightsync_gpu_tests" \
  bash scripts/gpu-check.sh "$out/gpu" > "$out/gpu-check.txt" 2>&1
echo "gpu-check rc=$? ($((SECONDS - start)) s)" >> "$out/gpu-check.txt"
head -4 "$out/gpu/env.txt"
grep -E "build ok|Test +#" "$out/gpu-check.txt" | cut -c1-160
tail -n 4 "$out/gpu-check.txt"
