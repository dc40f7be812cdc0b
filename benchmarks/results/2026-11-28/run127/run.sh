#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 127 (2026-11-28, one GPU, ranks sharing it): the tree to land. The bench's new raw-ipc row
# (the raw transfer over the ipc transport: a copy through the IPC mapping, both streams ordered
# through interprocess events, one shared-memory flag each way) beside raw-copy and the library's
# ipc rows, under MPS (three passes) and without it (one); then scripts/gpu-check.sh with every
# GPU test but the slowest seven.
#   bash benchmarks/results/2026-11-28/run127/run.sh OUT_DIR
# Predicted: raw-ipc 11-14 us for tiny under MPS (ipc_probe's hand-off with interprocess events,
# run 124: 12.6-12.8 us of host time); the library's tiny 21-25 us, an extra of 0.7-1.0 raw-ipc;
# tests all pass but the three that need two devices.
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
rows() {  # $1: label, $2: layouts
  echo "== $1"
  timeout 100 $b --backend ipc --layout "$2" --mode zerocopy --iters 100 --warmup 10 \
    --json "$out/bench.jsonl" 2>&1 | grep -vE "^\[|^#  Rank"
}
{
  rows "mps-off" tiny,tiny504
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/ws-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/ws-mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d
  for pass in 1 2 3; do rows "mps-on $pass" tiny,tiny504,lora8b; done
  echo quit | nvidia-cuda-mps-control; sleep 1
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
} > "$out/rows.txt" 2>&1
echo "rows done ($((SECONDS - start)) s)" >> "$out/rows.txt"
grep -E "^== |raw-|zerocopy|producer us|consumer us|rows done" "$out/rows.txt" | cut -c1-150
WS_CPU_TESTS=0 WS_BENCH=none WS_CTEST_ARGS="-E $slow" bash scripts/gpu-check.sh "$out/gpu" > "$out/gpu-check.txt" 2>&1
echo "gpu-check rc=$? ($((SECONDS - start)) s)" >> "$out/gpu-check.txt"
grep -E "Test +#.*(Failed|\*\*\*)" "$out/gpu-check.txt" | cut -c1-160
tail -n 6 "$out/gpu-check.txt"
