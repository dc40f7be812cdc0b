#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 88 (2026-11-27, one GPU): is nccl tiny504 slower with 4 KiB handshake blocks? Run 85 put it
# at 284.6 / 257.1 us (B) against 224.0 / 193.9 (A), alternated, under MPS; tiny504 (32 KiB) is
# not eager in either. A = b614f9b (bench-old/), B = this tree, C = this tree with A's block size
# (bench-c/: kHandshakeBlockMax = 16 KiB, i.e. 8 KiB a rank with 2 ranks). Under one MPS daemon,
# A B C three times: --np 2 (one GPU, socket transport) tiny, tiny504 zerocopy, 200 iterations.
# Predicted: if the block size is the cause, C ~ A on tiny504 and C ~ A on tiny (slower than B);
# if it is noise, A, B and C overlap on tiny504.
#   bash benchmarks/results/2026-11-27/run88/run.sh OUT_DIR
set -u
out=${1:?usage: run.sh OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
build() {  # $1 = source dir, $2 = build dir
  cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DWEIGHTSYNC_WITH_CUDA=ON -DWEIGHTSYNC_WITH_NCCL=ON -DWEIGHTSYNC_BUILD_TESTS=OFF \
    -DWEIGHTSYNC_BUILD_BENCHMARKS=ON -DWEIGHTSYNC_BUILD_EXAMPLES=OFF > "/tmp/cfg-$3.txt" 2>&1 &&
    cmake --build "$2" -j 5 --target weightsync_bench > "/tmp/build-$3.txt" 2>&1
  echo "build $3 rc=$? ($((SECONDS - start)) s)"
}
{
  date -u +"%Y-%m-%dT%H:%M:%SZ"
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader
  build bench-old build/old a &
  build . build/gpu b &
  build bench-c build/c c &
  wait
} > "$out/build.txt" 2>&1
cp build/old/benchmarks/weightsync_bench /tmp/bench-a; cp build/gpu/benchmarks/weightsync_bench /tmp/bench-b
cp build/c/benchmarks/weightsync_bench /tmp/bench-c
export CUDA_MPS_PIPE_DIRECTORY=/tmp/ws-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/ws-mps-log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
{
  nvidia-cuda-mps-control -d || echo "MPS daemon did not start"
  for pass in 1 2 3; do
    for v in a b c; do
      echo "== pass $pass $v"
      timeout 60 /tmp/bench-$v --np 2 --layout tiny,tiny504 --mode zerocopy --iters 200 --warmup 10 \
        --json "$out/bench.jsonl" 2>&1 | grep -E "^ +[0-9]+ |host us"; echo "rc=${PIPESTATUS[0]}"
    done
  done
  echo quit | nvidia-cuda-mps-control; sleep 1
  echo "done ($((SECONDS - start)) s)"
} > "$out/abc.txt" 2>&1
