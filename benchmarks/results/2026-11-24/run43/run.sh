#!/usr/bin/env bash
# Run 43 (H200): the reference update fused into the delta encode: the delta GPU tests, the codec
# on dense8b, dense8b delta vs full over the shared-GPU NCCL path.
set -u
out=$1
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
export WS_BUILD_TARGETS="weightsync_gpu_tests weightsync_nccl_tests weightsync_bench delta_codec_bench"
export WS_CTEST_ARGS="-R delta"
export WS_CPU_TESTS=0
export WS_BENCH=none
timeout 300 bash scripts/gpu-check.sh "$out" > "$out/gpu-check.txt" 2>&1
echo "gpu-check rc=$?" >> "$out/gpu-check.txt"
tail -12 "$out/gpu-check.txt" > "$out/gpu-check-tail.txt"
rm -f "$out/gpu-check.txt" "$out/configure.txt" "$out/ctest-gpu.xml"
timeout 100 build/gpu/benchmarks/delta_codec_bench --layout dense8b --reps 5 --warmup 1 \
  --json "$out/codec.jsonl" > "$out/codec.txt" 2>&1
echo "codec rc=$?" >> "$out/codec.txt"
timeout 150 build/gpu/benchmarks/weightsync_bench --np 2 --backend nccl --layout dense8b \
  --mode packed --iters 3 --warmup 1 --delta 0.001,0.01 --json "$out/bench.jsonl" \
  > "$out/bench.txt" 2>&1
echo "bench rc=$?" >> "$out/bench.txt"
