#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 80 (2026-11-27, one GPU): ws_delta_count_lowbyte's warps take blocks without a CTA barrier
# per block, and a sparse bucket's list is built once from its bits. Predicted: run 79's 25.5 ms
# (0.1 %) and 31.5 ms (1 %) for the low-byte measure fall to 12-15 ms, closer to the ~6-10 ms the
# hashing's integer work needs; the full reference unchanged (~8.6 / 10.6 ms). Then the delta GPU
# tests.
#   bash benchmarks/results/2026-11-27/run80/run.sh OUT_DIR
set -u
out=${1:?usage: run.sh OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
{
  cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DWEIGHTSYNC_WITH_CUDA=ON -DWEIGHTSYNC_WITH_NCCL=ON -DWEIGHTSYNC_BUILD_TESTS=ON \
    -DWEIGHTSYNC_BUILD_BENCHMARKS=ON -DWEIGHTSYNC_BUILD_EXAMPLES=ON -DWEIGHTSYNC_WERROR=ON > /dev/null
  cmake --build build/gpu -j 16 --target delta_codec_bench 2>&1 | grep -E "error|FAILED" | head
  echo "build rc=${PIPESTATUS[0]} ($((SECONDS - start)) s)"
} > "$out/build.txt" 2>&1
cmake --build build/gpu -j 12 --target weightsync_gpu_tests weightsync_nccl_tests > "$out/build-tests.txt" 2>&1 &
bp=$!
for ref in full low-byte; do
  timeout 150 build/gpu/benchmarks/delta_codec_bench --layout dense8b --densities 0.001,0.01 \
    --change ulps --reps 3 --warmup 1 --reference $ref --json "$out/codec-$ref.jsonl" > "$out/codec-$ref.txt" 2>&1
  echo "rc=$? ($((SECONDS - start)) s)" >> "$out/codec-$ref.txt"
done
wait $bp
echo "build tests rc=$? ($((SECONDS - start)) s)" >> "$out/build.txt"
ctest --test-dir build/gpu -L gpu -R "delta" --output-on-failure --timeout 300 > "$out/ctest-delta.txt" 2>&1
echo "ctest rc=$? ($((SECONDS - start)) s)" >> "$out/ctest-delta.txt"
