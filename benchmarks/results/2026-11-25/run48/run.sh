#!/usr/bin/env bash
# Run 48 (H200): the ipc per-sync messages through the shared-memory mailbox, and the eager
# consumer unpacking on the communication stream: the ipc and NCCL GPU tests.
set -u
out=$1
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
WS_CTEST_ARGS="-R ipc|nccl" WS_CPU_TESTS=0 WS_BENCH=none \
  WS_BUILD_TARGETS="weightsync_gpu_tests weightsync_nccl_tests weightsync_bench" \
  timeout 570 bash scripts/gpu-check.sh "$out/check" > "$out/gpu-check.txt" 2>&1
echo "gpu-check rc=$?" >> "$out/gpu-check.txt"
grep -B5 -A40 "FAILED\|\*\*\*Failed" "$out/check/ctest-gpu.txt" 2>/dev/null | head -200 > "$out/failures.txt"
grep -E "ws-test\] rank .*control|control over TCP" "$out/check/ctest-gpu.txt" | head -20 >> "$out/gpu-check.txt"
cp "$out/check/summary.txt" "$out/summary.txt" 2>/dev/null
rm -rf "$out/check"
git rev-parse --short HEAD > "$out/commit.txt" 2>/dev/null
