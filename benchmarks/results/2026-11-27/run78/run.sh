#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 78 (2026-11-27, one GPU): the low-byte reference on the GPU (ws_delta_count_lowbyte,
# ws_delta_lowbyte_seed) and sharded delta rounds: the delta GPU tests, then delta_codec_bench on
# dense8b with the full and the low-byte reference in one call. Predicted: the low-byte measure
# reads 3 bytes per element (src 2 + ref 1) against the full reference's 4 (src 2 + ref 2) and
# writes ~1/2 the bytes; its hashing (a 64-bit mix per element, twice where the low byte changed)
# is ALU work, so it lands between 0.8x and 1.2x the full reference's encode time.
#   bash benchmarks/results/2026-11-27/run78/run.sh OUT_DIR
set -u
out=${1:?usage: run.sh OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
WS_BUILD_TARGETS="weightsync_gpu_tests weightsync_nccl_tests delta_codec_bench" WS_CTEST_ARGS="-R delta" \
  WS_CPU_TESTS=0 WS_BENCH=none bash scripts/gpu-check.sh "$out/check" > "$out/gpu-check.txt" 2>&1
echo "gpu-check rc=$? ($((SECONDS - start)) s)" >> "$out/gpu-check.txt"
for ref in full low-byte; do
  timeout 200 build/gpu/benchmarks/delta_codec_bench --layout dense8b --densities 0.001,0.01,0.1 \
    --reps 5 --warmup 1 --reference $ref --json "$out/codec-$ref.jsonl" > "$out/codec-$ref.txt" 2>&1
  echo "rc=$? ($((SECONDS - start)) s)" >> "$out/codec-$ref.txt"
done
