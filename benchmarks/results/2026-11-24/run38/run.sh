#!/usr/bin/env bash
# Run 38 (H200, 2026-11-24): build, the CPU tests (Catch2 v3), the delta GPU tests, the codec
# benchmark on dense8b. Logs under $1.
set -u
out=$1
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
export WS_BUILD_TARGETS="weightsync_unit_tests weightsync_gpu_tests weightsync_nccl_tests weightsync_bench delta_codec_bench"
export WS_CTEST_ARGS="-R delta"
export WS_BENCH=none
timeout 480 bash scripts/gpu-check.sh "$out" > "$out/gpu-check.txt" 2>&1
echo "gpu-check rc=$?" >> "$out/gpu-check.txt"
timeout 100 build/gpu/benchmarks/delta_codec_bench --layout dense8b --reps 5 --warmup 1 \
  --json "$out/codec.jsonl" > "$out/codec.txt" 2>&1
echo "codec rc=$?" >> "$out/codec.txt"
