#!/usr/bin/env bash
# Run 48 (H200): the ipc per-sync messages through the shared-memory mailbox. The ipc GPU tests,
# then the ipc rows without and with MPS, control through shared memory (default) and TCP.
set -u
out=$1
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
WS_CTEST_ARGS="-R ipc" WS_CPU_TESTS=0 WS_BENCH=none \
  WS_BUILD_TARGETS="weightsync_gpu_tests weightsync_nccl_tests weightsync_bench" \
  timeout 330 bash scripts/gpu-check.sh "$out/check" > "$out/gpu-check.txt" 2>&1
echo "gpu-check rc=$?" >> "$out/gpu-check.txt"
grep -B5 -A40 "FAILED\|Failed" "$out/check/ctest-gpu.txt" 2>/dev/null | head -200 > "$out/failures.txt"
grep -E "ws-test\] rank|control over TCP" "$out/check/ctest-gpu.txt" | head -20 >> "$out/gpu-check.txt"
rm -rf "$out/check"
B=build/gpu/benchmarks/weightsync_bench
for c in shm tcp; do
  timeout 120 bash scripts/mps-compare.sh $B --backend ipc --ipc-control $c \
    --layout tiny,tiny504,lora8b,small1b,dense8b --mode zerocopy --iters 20 \
    --json "$out/ipc-$c.jsonl" > "$out/ipc-$c.txt" 2>&1; echo "rc=$?" >> "$out/ipc-$c.txt"
done
git rev-parse --short HEAD > "$out/commit.txt" 2>/dev/null
