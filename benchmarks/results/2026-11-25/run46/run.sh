#!/usr/bin/env bash
# Run 46 (H200): the whole GPU suite and the CPU suite (Catch2 v3) after the eager handshake
# (protocol 3): every NCCL, ipc and interop test goes through the new handshake.
set -u
out=$1
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
export WS_BENCH=none
timeout 580 bash scripts/gpu-check.sh "$out" > "$out/gpu-check.txt" 2>&1
echo "gpu-check rc=$?" >> "$out/gpu-check.txt"
tail -50 "$out/gpu-check.txt" > "$out/gpu-check-tail.txt"
grep -B5 -A40 "FAILED\|Failed" "$out/ctest-gpu.txt" 2>/dev/null | head -300 > "$out/failures.txt"
rm -f "$out/gpu-check.txt" "$out/configure.txt" "$out/ctest-gpu.xml" "$out/build.txt" "$out/ctest-gpu.txt"
