#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 128 (2026-11-28, one GPU, ranks sharing it over NCCL's socket transport): the landing
# tree's NCCL rows. Under one MPS daemon: --np 2 tiny and tiny504 (three passes), then --np 2 and
# --np 4 with lora8b and small1b added (one pass each); every received byte checked.
#   bash benchmarks/results/2026-11-28/run128/run.sh OUT_DIR
# Predicted: 0 wrong bytes in every row; tiny's extra over the raw broadcast about one raw latency
# (0.9-1.2, runs 119 and 122), tiny504's under one (0.94, run 122).
set -u
out=${1:?usage: run.sh OUT_DIR}
mkdir -p "$out"; out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
WS_CPU_TESTS=0 WS_SKIP_TESTS=1 WS_BENCH=none WS_BUILD_TARGETS="weightsync_bench" \
  bash scripts/gpu-check.sh "$out/gpu" > "$out/build.txt" 2>&1
echo "build rc=$? ($((SECONDS - start)) s)" >> "$out/build.txt"
tail -1 "$out/build.txt"
b=build/gpu/benchmarks/weightsync_bench
export CUDA_MPS_PIPE_DIRECTORY=/tmp/ws-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/ws-mps-log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d
{
  for pass in 1 2 3; do
    echo "== np2 tiny pass $pass"
    timeout 100 $b --np 2 --layout tiny,tiny504 --mode zerocopy --iters 100 --warmup 10 --barrier shm \
      --json "$out/bench.jsonl" 2>&1 | grep -E "^# (mps|ranks)|layout:|raw-|zerocopy|Out of"
  done
  for np in 2 4; do
    echo "== np$np models"
    timeout 150 $b --np $np --layout tiny,tiny504,lora8b,small1b --mode zerocopy,packed --iters 10 \
      --warmup 2 --barrier shm --json "$out/bench.jsonl" 2>&1 | grep -E "^# (mps|ranks)|layout:|raw-|zerocopy|packed|Out of"
  done
} > "$out/rows.txt" 2>&1
echo quit | nvidia-cuda-mps-control
echo "done ($((SECONDS - start)) s)" >> "$out/rows.txt"
grep -E "^== |raw-|zerocopy|packed|Out of|done" "$out/rows.txt" | cut -c1-150
