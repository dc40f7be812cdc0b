#!/usr/bin/env bash
# Run 45 (H200): after the last refactor (one DeltaJob, ModelSource and count_diff reused): the
# delta GPU tests and a small smoke run of the --fp8 and --delta rows (they share the changed code).
set -u
out=$1
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
export WS_BUILD_TARGETS="weightsync_gpu_tests weightsync_nccl_tests weightsync_bench delta_codec_bench"
export WS_CTEST_ARGS="-R delta"
export WS_CPU_TESTS=0 WS_BENCH=none
timeout 300 bash scripts/gpu-check.sh "$out" > "$out/gpu-check.txt" 2>&1
echo "gpu-check rc=$?" >> "$out/gpu-check.txt"
tail -12 "$out/gpu-check.txt" > "$out/gpu-check-tail.txt"
rm -f "$out/gpu-check.txt" "$out/configure.txt" "$out/ctest-gpu.xml"
timeout 200 build/gpu/benchmarks/weightsync_bench --np 2 --backend nccl --layout small1b \
  --mode packed --iters 2 --warmup 1 --fp8 --delta 0.01 > "$out/bench.txt" 2>&1
echo "bench rc=$?" >> "$out/bench.txt"
timeout 60 build/gpu/benchmarks/delta_codec_bench --layout small1b --reps 3 > "$out/codec.txt" 2>&1
echo "codec rc=$?" >> "$out/codec.txt"
