#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 71 (2026-11-27, one H200: two processes' dense8b delta state, ~98 GB, does not fit an H100).
# A/B in one call: bench-old/ (the tree before run 70's findings were applied, git archive of
# 0630143) against this tree:
# - fp8: the block-128 bf16 kernel persistent (2 CTAs/SM) with the next block prefetched;
#   predicted 2.27-2.49 TB/s (run 70's lab) against 1.76-1.95;
# - delta codec: measure at 4 CTAs/SM and no rank loop over vectors without a change (predicted
#   -2-3 % of measure at 1 %), encode a CTA per 256 buckets with each bucket's metadata read by
#   one thread (predicted 634-754 us -> 200-300 us);
# - ipc delta rows in the automatic mode: the wire of an unchanged round kept (DeltaSource and the
#   receiver's UpdateWireCache), the producer's wire not rebuilt in the timed part, the update
#   converted once; predicted extra over zerocopy +9-15 % -> +4-7 %.
# Then the fp8 and delta GPU tests of this tree.
#   bash benchmarks/results/2026-11-27/run71/run.sh OUT_DIR
set -u
out=${1:?usage: run.sh OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
conf() {
  cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DWEIGHTSYNC_WITH_CUDA=ON -DWEIGHTSYNC_WITH_NCCL=ON -DWEIGHTSYNC_BUILD_TESTS="$3" \
    -DWEIGHTSYNC_BUILD_BENCHMARKS=ON -DWEIGHTSYNC_BUILD_EXAMPLES=OFF -DWEIGHTSYNC_WERROR=OFF > /dev/null
}
{
  date -u +"%Y-%m-%dT%H:%M:%SZ"
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader
  conf . build/gpu ON && conf bench-old bench-old/build OFF
  cmake --build bench-old/build -j 6 --target weightsync_bench delta_codec_bench fp8_quantize_bench > "$out/build-old.txt" 2>&1 &
  cmake --build build/gpu -j 10 --target weightsync_bench delta_codec_bench fp8_quantize_bench weightsync_gpu_tests weightsync_nccl_tests 2>&1 | grep -E "error|FAILED" | head -20
  echo "build new rc=${PIPESTATUS[0]}"
  wait
  echo "build old rc=$? ($((SECONDS - start)) s)"
} > "$out/build.txt" 2>&1
nb=build/gpu/benchmarks ob=bench-old/build/benchmarks
{
  for v in old new; do
    b=$nb; [ $v = old ] && b=$ob
    echo "== $v"
    timeout 60 $b/fp8_quantize_bench --reps 20 --trials 7 | grep -E "block128 |check|#"
  done
  echo "fp8 ($((SECONDS - start)) s)"
} > "$out/fp8.txt" 2>&1
{
  for v in old new; do
    b=$nb; [ $v = old ] && b=$ob
    echo "== $v"
    timeout 40 $b/delta_codec_bench --layout dense8b --reps 5 --warmup 1 --densities 0.001,0.01,0.03 --json "$out/bench.jsonl"
    echo "codec $v rc=$? ($((SECONDS - start)) s)"
  done
} > "$out/codec.txt" 2>&1
{
  for v in old new; do
    b=$nb; [ $v = old ] && b=$ob
    echo "== $v"
    timeout 70 $b/weightsync_bench --backend ipc --layout dense8b --mode zerocopy \
      --iters 7 --warmup 2 --delta 0.001,0.01 --json "$out/bench.jsonl" 2>&1 | grep -vE "^\[|^#  Rank"
    echo "ipc delta $v rc=${PIPESTATUS[0]} ($((SECONDS - start)) s)"
  done
} > "$out/ipc.txt" 2>&1
{
  ctest --test-dir build/gpu -L gpu -R "fp8|delta|sparse" --output-on-failure --timeout 200 \
    --output-junit "$out/ctest-gpu.xml" 2>&1 | tail -40
  python3 scripts/ctest-summary.py "$out/ctest-gpu.xml" --list
  echo "tests ($((SECONDS - start)) s)"
} > "$out/tests.txt" 2>&1
