#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 120 (2026-11-28, two GPUs of one host): on the landed code (a launch uses a descriptor table
# only once a reserve made it), every ipc, p2p and cuda policy test, the three that need two
# devices among them (run 118 ran them on the tree before that change).
#   bash benchmarks/results/2026-11-28/run120/run.sh OUT_DIR
set -u
out=${1:?usage: run.sh OUT_DIR}
mkdir -p "$out"; out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
WS_CPU_TESTS=0 WS_BENCH=none WS_BUILD_TARGETS="weightsync_gpu_tests" \
  WS_CTEST_ARGS="-R gpu.ipc|gpu.p2p|gpu.cuda" bash scripts/gpu-check.sh "$out/gpu" > "$out/gpu-check.txt" 2>&1
echo "gpu-check rc=$? ($((SECONDS - start)) s)" >> "$out/gpu-check.txt"
grep -E "build ok|BUILD" "$out/gpu-check.txt"
grep -E "^  (passed|FAILED|skipped)" "$out/gpu-check.txt" | grep -E "p2p|two GPUs|cuda|FAILED|skipped"
tail -n 2 "$out/gpu-check.txt"
