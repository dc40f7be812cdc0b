#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 124 (2026-11-28, one GPU): #25 item 5 on ipc, taken apart. ipc_probe (new) measures the host
# cost of each CUDA call of a colocated 4 KiB sync and the floor of a two-process hand-off, without
# MPS and under one MPS daemon; beside it, the bench's ipc tiny and tiny504 rows (with the
# library's phase times) on this tree.
#   bash benchmarks/results/2026-11-28/run124/run.sh OUT_DIR
# Predicted (under MPS): each call 1-5 us; a hand-off's floor about the raw copy plus 2-4 us; the
# bench's tiny about 20 us against a 7-8 us raw copy (as in run 119).
set -u
out=${1:?usage: run.sh OUT_DIR}
mkdir -p "$out"; out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
WS_CPU_TESTS=0 WS_SKIP_TESTS=1 WS_BENCH=none WS_BUILD_TARGETS="ipc_probe weightsync_bench" \
  bash scripts/gpu-check.sh "$out/gpu" > "$out/build.txt" 2>&1
echo "build rc=$? ($((SECONDS - start)) s)" >> "$out/build.txt"
tail -2 "$out/build.txt"
p=build/gpu/benchmarks/ipc_probe
b=build/gpu/benchmarks/weightsync_bench
rows() {
  timeout 120 $b --backend ipc --layout tiny,tiny504 --mode zerocopy --iters 100 --warmup 10 2>&1 |
    grep -vE "^\[|^#  Rank"
}
{
  echo "== mps-off"; timeout 120 $p --iters 300 --warmup 30; rows
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/ws-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/ws-mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d
  for pass in 1 2; do
    echo "== mps-on pass $pass"; timeout 120 $p --iters 300 --warmup 30; rows
  done
  echo quit | nvidia-cuda-mps-control
} > "$out/probe.txt" 2>&1
echo "done ($((SECONDS - start)) s)" >> "$out/probe.txt"
grep -vE "^#  |^# (weightsync-bench|ranks|ipc:)" "$out/probe.txt" | cut -c1-150
