#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 126 (2026-11-28, one GPU): run 125 again with the consumer waiting for the producer's source
# event on its host (bounded) instead of in its stream: run 125 showed a stream waiting for a dead
# exporter's event still waiting after 20 s. No ipc_probe this time.
#   bash benchmarks/results/2026-11-28/run126/run.sh OUT_DIR
# Builds B (this tree) and A's bench (a525e85, bench-old/, carried); runs every ipc GPU test and the
# eager / descriptor-table NCCL tests (the review's reorder in schedule.hpp); then ipc tiny and tiny504 zerocopy, A and B alternated, under MPS (two passes each)
# and without it (one pass each).
# Predicted: tests pass; under MPS B's tiny 1-3 us under A's (run 125, with the stream wait: 0.4-3.1 us).
# The tree: branch ipc-source-event, b17c4f3 (not landed on main: no gain beyond the spread).
set -u
out=${1:?usage: run.sh OUT_DIR}
mkdir -p "$out"; out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
(cmake -S bench-old -B build/old -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
   -DWEIGHTSYNC_WITH_CUDA=ON -DWEIGHTSYNC_WITH_NCCL=ON -DWEIGHTSYNC_BUILD_TESTS=OFF \
   -DWEIGHTSYNC_BUILD_BENCHMARKS=ON -DWEIGHTSYNC_BUILD_EXAMPLES=OFF > "$out/build-a.txt" 2>&1 &&
 cmake --build build/old -j 6 --target weightsync_bench >> "$out/build-a.txt" 2>&1
 echo "build A rc=$? ($((SECONDS - start)) s)" >> "$out/build-a.txt") &
WS_CPU_TESTS=0 WS_BENCH=none WS_CTEST_ARGS="-R ipc|eager|descriptor" \
  WS_BUILD_TARGETS="weightsync_gpu_tests weightsync_nccl_tests weightsync_bench" \
  bash scripts/gpu-check.sh "$out/gpu" > "$out/gpu-check.txt" 2>&1
echo "gpu-check rc=$? ($((SECONDS - start)) s)" >> "$out/gpu-check.txt"
wait; tail -1 "$out/build-a.txt"
grep -E "build ok|BUILD|Test +#" "$out/gpu-check.txt" | cut -c1-170
tail -n 5 "$out/gpu-check.txt"
a=build/old/benchmarks/weightsync_bench
b=build/gpu/benchmarks/weightsync_bench
rows() {  # $1: label, $2: bench
  echo "== $1"
  timeout 100 $2 --backend ipc --layout tiny,tiny504 --mode zerocopy --iters 100 --warmup 10 2>&1 |
    grep -vE "^\[|^#  Rank"
}
{
  rows "a mps-off" $a; rows "b mps-off" $b
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/ws-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/ws-mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d
  for pass in 1 2; do rows "a mps-on $pass" $a; rows "b mps-on $pass" $b; done
  echo quit | nvidia-cuda-mps-control
} > "$out/rows.txt" 2>&1
echo "done ($((SECONDS - start)) s)" >> "$out/rows.txt"
