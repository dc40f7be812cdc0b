#!/usr/bin/env bash
# Run 42 (H200): delta rows with DeltaMode::automatic told the link speed of the packed row: the
# shared-GPU NCCL path (dense8b), and the host backend (small1b, automatic and always).
set -u
out=$1
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
export WS_BUILD_TARGETS="weightsync_bench"
export WS_SKIP_TESTS=1 WS_CPU_TESTS=0 WS_BENCH=none
bash scripts/gpu-check.sh "$out" > "$out/gpu-check.txt" 2>&1
b=build/gpu/benchmarks/weightsync_bench
timeout 150 $b --np 2 --backend nccl --layout dense8b --mode packed --iters 3 --warmup 1 \
  --delta 0.001,0.01 --json "$out/bench.jsonl" > "$out/nccl.txt" 2>&1
echo "rc=$?" >> "$out/nccl.txt"
timeout 120 $b --np 2 --backend host --layout small1b --mode packed --iters 3 --warmup 1 \
  --delta 0.001,0.01 > "$out/host-auto.txt" 2>&1
echo "rc=$?" >> "$out/host-auto.txt"
timeout 120 $b --np 2 --backend host --layout small1b --mode packed --iters 3 --warmup 1 \
  --delta 0.001,0.01 --delta-mode always > "$out/host-always.txt" 2>&1
echo "rc=$?" >> "$out/host-always.txt"
