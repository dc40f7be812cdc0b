#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 82 (2026-11-27, one GPU), two calls on one warm machine:
#   build: configure and build everything; delta_codec_bench on dense8b (--change ulps), full and
#     low-byte reference. ws_delta_count_lowbyte now hashes two blocks per warp per round, both
#     loaded first (3 CTAs per SM, no spill). Predicted: the low-byte measure 20.8 / 24.8 ms
#     (run 80) -> 14-17 / 18-21 ms; the full reference unchanged.
#   tests: the whole GPU suite (scripts/gpu-check.sh), with the sharded delta rounds under a
#     low-byte reference too.
#   bash benchmarks/results/2026-11-27/run82/run.sh OUT_DIR build|tests
set -u
out=${1:?usage: run.sh OUT_DIR build|tests}
what=${2:-build}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
if [ "$what" = tests ]; then
  WS_CPU_TESTS=0 WS_BENCH=none bash scripts/gpu-check.sh "$out/gpu" > "$out/gpu-check.txt" 2>&1
  echo "gpu-check rc=$? ($((SECONDS - start)) s)" >> "$out/gpu-check.txt"
  exit 0
fi
{
  date -u +"%Y-%m-%dT%H:%M:%SZ"
  cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DWEIGHTSYNC_WITH_CUDA=ON -DWEIGHTSYNC_WITH_NCCL=ON -DWEIGHTSYNC_BUILD_TESTS=ON \
    -DWEIGHTSYNC_BUILD_BENCHMARKS=ON -DWEIGHTSYNC_BUILD_EXAMPLES=ON -DWEIGHTSYNC_WERROR=ON > /dev/null
  cmake --build build/gpu -j 16 --target delta_codec_bench 2>&1 | grep -E "error|FAILED" | head
  echo "build rc=${PIPESTATUS[0]} ($((SECONDS - start)) s)"
} > "$out/build.txt" 2>&1
cmake --build build/gpu -j 12 > "$out/build-rest.txt" 2>&1 &
bp=$!
for ref in full low-byte; do
  timeout 150 build/gpu/benchmarks/delta_codec_bench --layout dense8b --densities 0.001,0.01 \
    --change ulps --reps 3 --warmup 1 --reference $ref --json "$out/codec-$ref.jsonl" > "$out/codec-$ref.txt" 2>&1
  echo "rc=$? ($((SECONDS - start)) s)" >> "$out/codec-$ref.txt"
done
wait $bp
echo "build rest rc=$? ($((SECONDS - start)) s)" >> "$out/build.txt"
