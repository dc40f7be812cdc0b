#!/usr/bin/env bash
# Run 58 (2026-11-27, one GPU; written 2026-11-25, first run now): #26 part 1 merged: protocol 4 (a frame header plus one body per kind, every
# agreed setting compared at full width, one handshake for whole and sharded syncs), backends
# taking a neutral GroupInfo and registering from their own headers, the gather kernel ABI.
# Every GPU test (multi-rank ones share the GPU) and the CPU suite (Catch2 v3).
set -u
out=$1
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
WS_BENCH=none timeout 580 bash scripts/gpu-check.sh "$out/check" > "$out/gpu-check.txt" 2>&1
echo "gpu-check rc=$?" >> "$out/gpu-check.txt"
grep -E "tests passed|tests failed|\*\*\*Failed" "$out/check/ctest-cpu.txt" | head -20 > "$out/cpu-summary.txt"
grep -B5 -A40 "\*\*\*Failed\|FAILED:" "$out/check/ctest-gpu.txt" 2>/dev/null | head -300 > "$out/failures.txt"
cp "$out/check/summary.txt" "$out/check/env.txt" "$out/" 2>/dev/null
grep "build ok" "$out/gpu-check.txt" > "$out/build-time.txt"
rm -rf "$out/check"
tail -8 "$out/gpu-check.txt"
