#!/usr/bin/env bash
# Run 44 (H200): the engine and delta GPU tests on the final tree (the worker's shadow-mode base
# rule changed after run 41), and the CPU suite under Catch2 v3.
set -u
out=$1
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
export WS_BUILD_TARGETS="weightsync_unit_tests weightsync_gpu_tests weightsync_nccl_tests"
export WS_CTEST_ARGS="-R delta|engine|interop"
export WS_BENCH=none
timeout 560 bash scripts/gpu-check.sh "$out" > "$out/gpu-check.txt" 2>&1
echo "gpu-check rc=$?" >> "$out/gpu-check.txt"
tail -30 "$out/gpu-check.txt" > "$out/gpu-check-tail.txt"
rm -f "$out/gpu-check.txt" "$out/configure.txt" "$out/ctest-gpu.xml"
