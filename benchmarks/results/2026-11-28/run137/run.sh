#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 137 (2026-11-28, one GPU, ranks sharing it): the tree to land, after a review of run 136's
# tree. Changed since (ipc only): Puller::same_as_last names the batch it means (a number) and
# enqueue_again runs only that one; a throw in the relaunch forgets the memo; the new test expects
# no relaunch without the batched copy kernel. The NCCL pipeline is as in run 136.
#   bash benchmarks/results/2026-11-28/run137/run.sh OUT_DIR
# --paired ipc rows under MPS (tiny, tiny504, three passes of 100) and one NCCL --np 2 pass; then
# scripts/gpu-check.sh with every GPU test but the slowest seven (those run NCCL and Python code
# this change does not touch; run 136 passed them).
# Predicted: 0 wrong bytes; ipc tiny504 as in runs 135-136 (extra 0.2-0.8 raw); 63 passed, 0
# failed, 3 skipped (the two-device tests).
set -u
out=${1:?usage: run.sh OUT_DIR}
mkdir -p "$out"; out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
slow="interop|full-size|back-to-back"  # (no spaces: WS_CTEST_ARGS is split on them)
WS_CPU_TESTS=0 WS_SKIP_TESTS=1 WS_BENCH=none bash scripts/gpu-check.sh "$out/gpu" > "$out/build.txt" 2>&1
echo "build rc=$? ($((SECONDS - start)) s)" >> "$out/build.txt"
tail -1 "$out/build.txt"
b=build/gpu/benchmarks/weightsync_bench
export CUDA_MPS_PIPE_DIRECTORY=/tmp/ws-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/ws-mps-log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d
{
  for pass in 1 2 3; do
    echo "== ipc pass $pass"
    timeout 100 $b --backend ipc --layout tiny,tiny504 --mode zerocopy --iters 100 --warmup 10 \
      --paired --json "$out/bench.jsonl" 2>&1 | grep -vE "^\[|^#  Rank"
  done
  echo "== nccl np2"
  timeout 100 $b --np 2 --layout tiny,tiny504 --mode zerocopy --iters 100 --warmup 10 \
    --barrier shm --paired --json "$out/bench.jsonl" 2>&1 | grep -vE "^\[|^#  Rank"
} > "$out/rows.txt" 2>&1
echo quit | nvidia-cuda-mps-control; sleep 1
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
echo "rows done ($((SECONDS - start)) s)" >> "$out/rows.txt"
grep -E "^== | raw-ipc | raw-nccl |zerocopy|paired with|consumer us|rows done" "$out/rows.txt" | cut -c1-200
WS_CPU_TESTS=0 WS_BENCH=none WS_CTEST_ARGS="-E $slow" bash scripts/gpu-check.sh "$out/gpu" > "$out/gpu-check.txt" 2>&1
echo "gpu-check rc=$? ($((SECONDS - start)) s)" >> "$out/gpu-check.txt"
grep -E "repeated syncs relaunch|pulls repeated" "$out/gpu-check.txt" | head -4
tail -6 "$out/gpu-check.txt"
