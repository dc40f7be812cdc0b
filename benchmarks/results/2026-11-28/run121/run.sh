#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 121 (2026-11-28, one GPU): after the review's mend (the batched copy launch loses its unused
# `device` argument, CopyTableSlot one accessor), the cuda, ipc and NCCL tests but the slowest,
# ranks sharing the GPU.
#   bash benchmarks/results/2026-11-28/run121/run.sh OUT_DIR
set -u
out=${1:?usage: run.sh OUT_DIR}
mkdir -p "$out"; out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
WS_CPU_TESTS=0 WS_BENCH=none WS_BUILD_TARGETS="weightsync_gpu_tests weightsync_nccl_tests" \
  WS_CTEST_ARGS="-R gpu.cuda|gpu.ipc|gpu.nccl|gpu.p2p -E full-size|back-to-back" \
  bash scripts/gpu-check.sh "$out/gpu" > "$out/gpu-check.txt" 2>&1
echo "gpu-check rc=$? ($((SECONDS - start)) s)" >> "$out/gpu-check.txt"
grep -E "build ok|BUILD" "$out/gpu-check.txt"
grep -E "^  (FAILED|skipped)" "$out/gpu-check.txt"
tail -n 2 "$out/gpu-check.txt"
