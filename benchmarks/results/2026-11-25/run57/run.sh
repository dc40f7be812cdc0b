#!/usr/bin/env bash
# Run 57 (H200): the last code commit: the handshake and the acknowledgement share one all-gather
# helper (allgather_blocks). Every NCCL, ipc and interop GPU test, and the CPU suite.
set -u
out=$1
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
WS_CTEST_ARGS="-R nccl|interop|ipc" WS_BENCH=none \
  timeout 580 bash scripts/gpu-check.sh "$out/check" > "$out/gpu-check.txt" 2>&1
echo "gpu-check rc=$?" >> "$out/gpu-check.txt"
grep -E "tests passed|tests failed|\*\*\*Failed" "$out/check/ctest-cpu.txt" | head -20 > "$out/cpu-summary.txt"
grep -B5 -A40 "\*\*\*Failed\|FAILED:" "$out/check/ctest-gpu.txt" 2>/dev/null | head -200 > "$out/failures.txt"
cp "$out/check/summary.txt" "$out/summary.txt" 2>/dev/null
rm -rf "$out/check"
tail -5 "$out/gpu-check.txt"
