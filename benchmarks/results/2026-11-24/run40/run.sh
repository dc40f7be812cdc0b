#!/usr/bin/env bash
# Run 40 (H200): the delta kernels a warp per bucket (issue-29-perf merged): the delta GPU tests,
# the codec on dense8b, and dense8b delta vs full over the shared-GPU NCCL path.
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
timeout 100 build/gpu/benchmarks/delta_codec_bench --layout dense8b --reps 5 --warmup 1 \
  --json "$out/codec.jsonl" > "$out/codec.txt" 2>&1
echo "codec rc=$?" >> "$out/codec.txt"
timeout 150 build/gpu/benchmarks/weightsync_bench --np 2 --backend nccl --layout dense8b \
  --mode packed --iters 3 --warmup 1 --delta 0.001,0.01,0.1 --json "$out/bench.jsonl" \
  > "$out/bench.txt" 2> "$out/bench-progress.txt"
echo "bench rc=$?" >> "$out/bench.txt"
# the host backend's delta rows (host memory, TCP on 127.0.0.1)
timeout 120 build/gpu/benchmarks/weightsync_bench --np 2 --backend host --layout small1b \
  --mode packed --iters 3 --warmup 1 --delta 0.001,0.01,0.1 --json "$out/host.jsonl" \
  > "$out/host.txt" 2> "$out/host-progress.txt"
echo "host rc=$?" >> "$out/host.txt"
