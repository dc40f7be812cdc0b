#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 67 (2026-11-27, one H200: two processes' dense8b delta state does not fit an H100): ipc
# dense8b without MPS, then under one MPS daemon: zerocopy with checksums off and on (#31's ipc
# row on an H200), and the delta rows in the automatic mode (#29: within 5 % of the full sync?),
# now with each side's phases and the host time before the transfer.
# Predicted: checksums +50-60 % both ways (the producer's digest reads 16.4 GB more of the same
# HBM); automatic delta rows: the ~190 us prepare plus the announcement and the receiver's setup
# (~100 us) before the same pull, ~+4 % under MPS; without MPS more (run 65: +9-10.6 %).
#   bash benchmarks/results/2026-11-27/run67/run.sh OUT_DIR
set -u
out=${1:?usage: run.sh OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
{
  date -u +"%Y-%m-%dT%H:%M:%SZ"
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader
  cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DWEIGHTSYNC_WITH_CUDA=ON -DWEIGHTSYNC_WITH_NCCL=ON -DWEIGHTSYNC_BUILD_TESTS=OFF \
    -DWEIGHTSYNC_BUILD_BENCHMARKS=ON -DWEIGHTSYNC_BUILD_EXAMPLES=OFF -DWEIGHTSYNC_WERROR=ON > /dev/null &&
    cmake --build build/gpu -j "$(nproc)" --target weightsync_bench
  echo "build rc=$? ($((SECONDS - start)) s)"
} > "$out/build.txt" 2>&1
b=build/gpu/benchmarks/weightsync_bench
rows() {  # $1 = label
  echo "== $1 checksums"
  timeout 50 $b --backend ipc --layout dense8b --mode zerocopy --checksum off,on --iters 10 \
    --warmup 3 --json "$out/bench.jsonl" 2>&1 | grep -vE "^\[|^#  Rank"; echo "rc=${PIPESTATUS[0]}"
  echo "== $1 delta"
  timeout 60 $b --backend ipc --layout dense8b --mode zerocopy --iters 10 --warmup 2 \
    --delta 0.001,0.01 --json "$out/bench.jsonl" 2>&1 | grep -vE "^\[|^#  Rank"; echo "rc=${PIPESTATUS[0]}"
}
rows "no-MPS" > "$out/no-mps.txt" 2>&1
export CUDA_MPS_PIPE_DIRECTORY=/tmp/ws-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/ws-mps-log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
{
  nvidia-cuda-mps-control -d || echo "MPS daemon did not start"
  rows "MPS"
  echo quit | nvidia-cuda-mps-control
} > "$out/mps.txt" 2>&1
echo "=== run 67 ($((SECONDS - start)) s) ==="
grep -E "rc=|H200|H100" "$out/build.txt" | head -3
cat "$out/no-mps.txt" "$out/mps.txt" | grep -E "^==|^ +[0-9]+ |#   (producer|consumer|delta)|rc=|mps:" | cut -c1-260
