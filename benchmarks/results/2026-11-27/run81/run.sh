#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 81 (2026-11-27, one GPU): the bench's ipc barrier, TCP (before) against a shared-memory spin
# (--barrier shm, now the default), without and under MPS, in one run: ipc tiny, lora8b, small1b,
# dense8b zerocopy, 30 iterations. Predicted: the library's phases unchanged; each row loses about
# the one loopback latency the TCP release put between the producer's start and the consumer's
# (15-30 us under MPS): lora8b ~95-110 us (target <= 120), small1b ~89-92 % of a copy (target 95:
# still missed), dense8b >= 97 %.
#   bash benchmarks/results/2026-11-27/run81/run.sh OUT_DIR
set -u
out=${1:?usage: run.sh OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
{
  date -u +"%Y-%m-%dT%H:%M:%SZ"; git log --oneline -1 2> /dev/null
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader
  cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DWEIGHTSYNC_WITH_CUDA=ON -DWEIGHTSYNC_WITH_NCCL=ON -DWEIGHTSYNC_BUILD_TESTS=ON \
    -DWEIGHTSYNC_BUILD_BENCHMARKS=ON -DWEIGHTSYNC_BUILD_EXAMPLES=ON -DWEIGHTSYNC_WERROR=ON > /dev/null
  cmake --build build/gpu -j 16 --target weightsync_bench 2>&1 | grep -E "error|FAILED" | head
  echo "build rc=${PIPESTATUS[0]} ($((SECONDS - start)) s)"
} > "$out/build.txt" 2>&1
b=build/gpu/benchmarks/weightsync_bench
rows() {  # $1 = label
  for bar in tcp shm; do
    echo "== $1 barrier $bar"
    timeout 80 $b --backend ipc --layout tiny,lora8b,small1b,dense8b --mode zerocopy --iters 30 \
      --warmup 3 --barrier $bar --json "$out/bench.jsonl" 2>&1 | grep -vE "^\[|^#  Rank"
    echo "rc=${PIPESTATUS[0]} ($((SECONDS - start)) s)"
  done
}
{
  rows "no-MPS"
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/ws-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/ws-mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  if nvidia-cuda-mps-control -d; then
    rows "MPS"
    rows "MPS (again)"
    echo quit | nvidia-cuda-mps-control; sleep 2
  else
    echo "MPS daemon did not start"
  fi
} > "$out/ab.txt" 2>&1
