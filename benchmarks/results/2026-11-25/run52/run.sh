#!/usr/bin/env bash
# Run 52 (H200): the whole GPU suite and the CPU suite (Catch2 v3) on the final tree of the session:
# the all-gather handshake reverted; the ipc single-copy pull on the consumer's stream and the
# consumer's copies prepared while the plan is on its way, the shadow-serving example and its test.
set -u
out=$1
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
export WS_BENCH=none
timeout 580 bash scripts/gpu-check.sh "$out/check" > "$out/gpu-check.txt" 2>&1
echo "gpu-check rc=$?" >> "$out/gpu-check.txt"
tail -50 "$out/gpu-check.txt" > "$out/gpu-check-tail.txt"
grep -E "tests passed|tests failed|\*\*\*Failed|Failed" "$out/check/ctest-cpu.txt" | head -20 > "$out/cpu-summary.txt"
grep -B5 -A40 "\*\*\*Failed\|FAILED:" "$out/check/ctest-gpu.txt" 2>/dev/null | head -200 > "$out/failures.txt"
cp "$out/check/summary.txt" "$out/summary.txt" 2>/dev/null
rm -rf "$out/check" "$out/gpu-check.txt"
