#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 68 (2026-11-27, one H200): where the automatic delta rows' host time before the transfer
# goes (run 67: 700-1035 us on the producer, of which prepare ~200-260 us), under MPS.
#   bash benchmarks/results/2026-11-27/run68/run.sh OUT_DIR
set -u
out=${1:?usage: run.sh OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
{
  cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DWEIGHTSYNC_WITH_CUDA=ON -DWEIGHTSYNC_WITH_NCCL=ON -DWEIGHTSYNC_BUILD_TESTS=OFF \
    -DWEIGHTSYNC_BUILD_BENCHMARKS=ON -DWEIGHTSYNC_BUILD_EXAMPLES=OFF -DWEIGHTSYNC_WERROR=ON > /dev/null &&
    cmake --build build/gpu -j "$(nproc)" --target weightsync_bench
  echo "build rc=$? ($((SECONDS - start)) s)"
} > "$out/build.txt" 2>&1
export CUDA_MPS_PIPE_DIRECTORY=/tmp/ws-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/ws-mps-log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
{
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader
  nvidia-cuda-mps-control -d || echo "MPS daemon did not start"
  timeout 60 build/gpu/benchmarks/weightsync_bench --backend ipc --layout dense8b --mode zerocopy \
    --iters 10 --warmup 2 --delta 0.001,0.01 --json "$out/bench.jsonl" 2>&1 | grep -vE "^\[|^#  Rank"
  echo "rc=${PIPESTATUS[0]}"
  echo quit | nvidia-cuda-mps-control
} > "$out/mps.txt" 2>&1
echo "=== run 68 ($((SECONDS - start)) s) ==="
grep -E "rc=" "$out/build.txt"
grep -E "H200|H100|^ +[0-9]+ |#   (producer|consumer|delta)|rc=|mps:" "$out/mps.txt" | cut -c1-300
