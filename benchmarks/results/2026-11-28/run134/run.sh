#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 134 (2026-11-28, one GPU, ranks sharing it): the slowest seven GPU tests (full-size dense8b
# and moe30b, 100 back-to-back syncs, the five Python interop tests) on the tree to land; then
# --np 2 and --np 4 rows (tiny, tiny504, lora8b, small1b; zerocopy and packed; --paired) under MPS,
# every byte checked.
#   bash benchmarks/results/2026-11-28/run134/run.sh OUT_DIR
# Predicted: 7 passed; 0 wrong bytes in every row and every paired baseline.
set -u
out=${1:?usage: run.sh OUT_DIR}
mkdir -p "$out"; out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
slow="interop|full-size|back-to-back"  # (no spaces: WS_CTEST_ARGS is split on them)
WS_CPU_TESTS=0 WS_BENCH=none WS_CTEST_ARGS="-R $slow" bash scripts/gpu-check.sh "$out/gpu" > "$out/gpu-check.txt" 2>&1
echo "gpu-check rc=$? ($((SECONDS - start)) s)" >> "$out/gpu-check.txt"
tail -9 "$out/gpu-check.txt"
b=build/gpu/benchmarks/weightsync_bench
export CUDA_MPS_PIPE_DIRECTORY=/tmp/ws-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/ws-mps-log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d
{
  for np in 2 4; do
    echo "== nccl np$np"
    timeout 150 $b --np $np --layout tiny,tiny504,lora8b,small1b --mode zerocopy,packed --iters 10 \
      --warmup 3 --barrier shm --paired --json "$out/bench.jsonl" 2>&1 | grep -vE "^\[|^#  Rank"
  done
  echo "== ipc"
  timeout 100 $b --backend ipc --layout tiny,tiny504,lora8b --mode zerocopy --iters 100 --warmup 10 \
    --paired --json "$out/bench.jsonl" 2>&1 | grep -vE "^\[|^#  Rank"
} > "$out/rows.txt" 2>&1
echo quit | nvidia-cuda-mps-control; sleep 1
echo "rows done ($((SECONDS - start)) s)" >> "$out/rows.txt"
grep -E "^== |raw-|zerocopy|packed|paired with|Out of|rows done" "$out/rows.txt" | cut -c1-200
