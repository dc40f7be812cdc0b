#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 136 (2026-11-28, one GPU, ranks sharing it): the tree to land (the ipc consumer's relaunch,
# WorkspaceState::flush_copies_kept for both eager batches). Two calls:
#   bash benchmarks/results/2026-11-28/run136/run.sh OUT_DIR fast   # build; rows; the suite but the slowest seven
#   bash benchmarks/results/2026-11-28/run136/run.sh OUT_DIR slow   # the slowest seven
# fast: --paired rows under MPS: ipc tiny, tiny504 (three passes of 100), NCCL --np 2 tiny, tiny504
# (two passes of 100), --np 2 and --np 4 tiny, tiny504, lora8b, small1b, zerocopy and packed (10
# iterations); then scripts/gpu-check.sh with every GPU test but the slowest seven.
# Predicted: every row 0 wrong bytes; ipc tiny504's extra under one raw-ipc in every pass (run 135:
# 0.21-0.45); NCCL rows as in runs 131-134; 62 passed, 0 failed, 3 skipped (the two-device tests),
# then 7 passed.
set -u
out=${1:?usage: run.sh OUT_DIR fast|slow}
part=${2:?usage: run.sh OUT_DIR fast|slow}
mkdir -p "$out"; out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
slow="interop|full-size|back-to-back"  # (no spaces: WS_CTEST_ARGS is split on them)
if [ "$part" = slow ]; then
  WS_CPU_TESTS=0 WS_BENCH=none WS_CTEST_ARGS="-R $slow" bash scripts/gpu-check.sh "$out/gpu-slow" > "$out/gpu-check-slow.txt" 2>&1
  echo "gpu-check rc=$? ($((SECONDS - start)) s)" >> "$out/gpu-check-slow.txt"
  tail -9 "$out/gpu-check-slow.txt"
  exit 0
fi
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
    [ $pass = 3 ] && break
    echo "== nccl np2 pass $pass"
    timeout 100 $b --np 2 --layout tiny,tiny504 --mode zerocopy --iters 100 --warmup 10 \
      --barrier shm --paired --json "$out/bench.jsonl" 2>&1 | grep -vE "^\[|^#  Rank"
  done
  for np in 2 4; do
    echo "== nccl np$np all"
    timeout 150 $b --np $np --layout tiny,tiny504,lora8b,small1b --mode zerocopy,packed --iters 10 \
      --warmup 3 --barrier shm --paired --json "$out/bench.jsonl" 2>&1 | grep -vE "^\[|^#  Rank"
  done
} > "$out/rows.txt" 2>&1
echo quit | nvidia-cuda-mps-control; sleep 1
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
echo "rows done ($((SECONDS - start)) s)" >> "$out/rows.txt"
grep -E "^== |raw-|zerocopy|packed|paired with|Out of|rows done" "$out/rows.txt" | cut -c1-200
WS_CPU_TESTS=0 WS_BENCH=none WS_CTEST_ARGS="-E $slow" bash scripts/gpu-check.sh "$out/gpu" > "$out/gpu-check.txt" 2>&1
echo "gpu-check rc=$? ($((SECONDS - start)) s)" >> "$out/gpu-check.txt"
tail -6 "$out/gpu-check.txt"
