#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 72 (2026-11-27, one H200: the ipc delta rows hold two processes' dense8b state, ~98 GB).
#   bash benchmarks/results/2026-11-27/run72/run.sh OUT_DIR bench   # build, lab, benchmarks
#   bash benchmarks/results/2026-11-27/run72/run.sh OUT_DIR tests   # the GPU suite (gpu-check.sh)
# bench: fp8_lab.cu (the library's block kernel compiled for sm_90 against run 70's variant B, to
# find why run 71's library figures were 8-13 % under the lab's); fp8_quantize_bench (the view's
# fields now read once per block; predicted within 5 % of the lab); delta_codec_bench (encode's
# short lists copied four buckets at a time, loads before stores; predicted encode at 1 %
# 424 -> 200-300 us, 1.50-1.53 TB/s in all); the ipc delta rows (run 71: +2.0 / +4.2 %).
set -u
out=${1:?usage: run.sh OUT_DIR bench|tests}
what=${2:-bench}
mkdir -p "$out"
out=$(cd "$out" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
if [ "$what" = tests ]; then
  WS_CPU_TESTS=0 WS_BENCH=none WS_CTEST_ARGS="-LE interop" bash scripts/gpu-check.sh "$out/gpu" > "$out/gpu-check.txt" 2>&1
  echo "gpu-check rc=$? ($((SECONDS - start)) s)" >> "$out/gpu-check.txt"
  exit 0
fi
{
  date -u +"%Y-%m-%dT%H:%M:%SZ"
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader
  nvcc -O3 -arch=sm_90 -std=c++17 "$here/fp8_lab.cu" -o /tmp/fp8_lab &
  cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DWEIGHTSYNC_WITH_CUDA=ON -DWEIGHTSYNC_WITH_NCCL=ON -DWEIGHTSYNC_BUILD_TESTS=ON \
    -DWEIGHTSYNC_BUILD_BENCHMARKS=ON -DWEIGHTSYNC_BUILD_EXAMPLES=ON -DWEIGHTSYNC_WERROR=ON > /dev/null
  cmake --build build/gpu -j 14 --target weightsync_bench delta_codec_bench fp8_quantize_bench 2>&1 | grep -E "error|FAILED" | head
  echo "build rc=${PIPESTATUS[0]}"
  wait
  echo "($((SECONDS - start)) s)"
} > "$out/build.txt" 2>&1
# the rest of the build (tests, examples) in the background while the GPU runs
cmake --build build/gpu -j 6 > "$out/build-rest.txt" 2>&1 &
b=build/gpu/benchmarks
{
  timeout 60 /tmp/fp8_lab
  timeout 60 $b/fp8_quantize_bench --reps 20 --trials 7 --json "$out/bench.jsonl" | grep -E "block128 |check|#"
  echo "fp8 ($((SECONDS - start)) s)"
} > "$out/fp8.txt" 2>&1
{
  timeout 40 $b/delta_codec_bench --layout dense8b --reps 5 --warmup 1 --densities 0.001,0.01,0.03 --json "$out/bench.jsonl"
  echo "codec rc=$? ($((SECONDS - start)) s)"
} > "$out/codec.txt" 2>&1
{
  timeout 70 $b/weightsync_bench --backend ipc --layout dense8b --mode zerocopy \
    --iters 7 --warmup 2 --delta 0.001,0.01 --json "$out/bench.jsonl" 2>&1 | grep -vE "^\[|^#  Rank"
  echo "ipc delta rc=${PIPESTATUS[0]} ($((SECONDS - start)) s)"
} > "$out/ipc.txt" 2>&1
wait
echo "build rest rc=$? ($((SECONDS - start)) s)" >> "$out/build.txt"
