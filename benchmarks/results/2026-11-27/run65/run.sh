#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 65 (2026-11-27, one H200: two processes' dense8b delta state, ~98 GB, does not fit an H100),
# the landed tree: the delta codec on dense8b (run 64 measured it on an H100) and the ipc delta
# rows with the per-round announcement (run 64 ran out of memory on the H100).
# Predicted: encode at 1 % 1.5-1.6 TB/s (H100: 1.106 TB/s x the HBM ratio ~1.43), apply ~115 GB/s;
# ipc: the automatic mode sends whole, ~8.1-8.8 ms against zerocopy ~8.05 (run 63: +8.2 %).
#   bash benchmarks/results/2026-11-27/run65/run.sh OUT_DIR
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
    cmake --build build/gpu -j "$(nproc)" --target weightsync_bench delta_codec_bench
  echo "build rc=$? ($((SECONDS - start)) s)"
} > "$out/build.txt" 2>&1
b=build/gpu/benchmarks
{
  timeout 50 $b/delta_codec_bench --layout dense8b --reps 5 --warmup 1 --json "$out/bench.jsonl"
  echo "codec rc=$?"
  timeout 25 $b/delta_codec_bench --layout dense8b --reps 5 --warmup 1 --sparse-writes sectors \
    --densities 0.001,0.01,0.03 --json "$out/bench.jsonl"
  echo "codec sectors rc=$? ($((SECONDS - start)) s)"
} > "$out/codec.txt" 2>&1
{
  timeout 60 $b/weightsync_bench --backend ipc --layout dense8b --mode packed,zerocopy \
    --iters 5 --warmup 2 --delta 0.001,0.01 --json "$out/bench.jsonl" 2>&1 | grep -vE "^\[|^#  Rank"
  echo "ipc delta auto rc=${PIPESTATUS[0]} ($((SECONDS - start)) s)"
  timeout 50 $b/weightsync_bench --backend ipc --layout dense8b --mode zerocopy \
    --iters 3 --warmup 1 --delta 0.01 --delta-mode always --json "$out/bench.jsonl" 2>&1 | grep -vE "^\[|^#  Rank"
  echo "ipc delta always rc=${PIPESTATUS[0]} ($((SECONDS - start)) s)"
} > "$out/delta.txt" 2>&1
{
  echo "=== run 65 ($((SECONDS - start)) s) ==="
  grep -E "rc=|H200|H100" "$out/build.txt" | head -3
  echo "-- codec (density encode_total_us enc_GB/s apply_us app_GB/s #wrong)"
  grep -E "^# delta_codec_bench|^  +[0-9]" "$out/codec.txt" | awk '/^#/{print substr($0,1,150); next} {print $1, $8, $9, $10, $11, $12}'
  grep -E "rc=" "$out/codec.txt"
  grep -E "^ +[0-9]+ |delta [0-9.]+: payload|rc=" "$out/delta.txt" | cut -c1-300
} | tee "$out/summary.txt"
