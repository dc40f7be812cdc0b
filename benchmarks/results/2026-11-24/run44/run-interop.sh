#!/usr/bin/env bash
# Run 44, second call: the interop tests, whose binary the first call's target list left out
# (they failed there with "No such file": first/ctest-gpu.txt).
set -u
out=$1
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
export WS_BUILD_TARGETS="weightsync_interop_tests"
export WS_CTEST_ARGS="-R interop"
export WS_CPU_TESTS=0 WS_BENCH=none
timeout 560 bash scripts/gpu-check.sh "$out" > "$out/gpu-check.txt" 2>&1
echo "gpu-check rc=$?" >> "$out/gpu-check.txt"
tail -14 "$out/gpu-check.txt" > "$out/gpu-check-tail.txt"
rm -f "$out/gpu-check.txt" "$out/configure.txt" "$out/ctest-gpu.xml"
