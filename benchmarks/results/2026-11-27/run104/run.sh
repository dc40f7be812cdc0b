#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 104 (2026-11-27, one GPU): the final tree after review, in one call.
#   bash benchmarks/results/2026-11-27/run104/run.sh OUT_DIR
# Builds; every ipc and p2p GPU test; then two passes of the ipc rows under MPS (tiny, lora8b,
# small1b, dense8b zerocopy, 30 iterations) to see that the consumer still uses its copies of the
# last plan (its "prepare" and "enqueue" phases as in run 103).
set -u
out=${1:?usage: run.sh OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
WS_CPU_TESTS=0 WS_BENCH=none WS_CTEST_ARGS="-R ipc|p2p" bash scripts/gpu-check.sh "$out/gpu" > "$out/gpu-check.txt" 2>&1
echo "gpu-check rc=$? ($((SECONDS - start)) s)" >> "$out/gpu-check.txt"
export CUDA_MPS_PIPE_DIRECTORY=/tmp/ws-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/ws-mps-log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d
for pass in 1 2; do
  echo "== pass $pass mps"
  timeout 90 build/gpu/benchmarks/weightsync_bench --backend ipc --layout tiny,lora8b,small1b,dense8b \
    --mode zerocopy --iters 30 --warmup 3 --json "$out/bench.jsonl" 2>&1 | grep -vE "^\[|^#  Rank"
done > "$out/rows.txt" 2>&1
echo quit | nvidia-cuda-mps-control; sleep 1
grep -E "^== |raw-|zerocopy|producer us|consumer us" "$out/rows.txt" | sed 's/(median of 30)//; s/; control shm//'
tail -5 "$out/gpu-check.txt"
