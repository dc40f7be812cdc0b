#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Branch issue-26-layout (2026-11-27, one GPU): the layout of #26 (ipc/, c10d/, vllm/ folders,
# forwarding headers at the old paths), engines over neutral InitRequest / UpdateRequest with
# vLLM's structs and JSON converted by vllm/, one Tuning type. Nothing was meant to change on a
# GPU: this is the functional check that the GPU paths still work as they did on the part-1 tree.
#   bash benchmarks/results/2026-11-27/issue-26-layout/run.sh OUT_DIR
# Builds only the three GPU test executables (gpu, nccl, interop) into build/gpu like
# scripts/gpu-check.sh, runs ctest -L gpu (multi-rank tests share the GPU over NCCL's socket
# transport), no benchmark. Logs: at most 6 files in OUT_DIR. The last lines are the summary.
set -u
out=$1
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
WS_BENCH=none WS_CPU_TESTS=0 \
  WS_BUILD_TARGETS="weightsync_gpu_tests weightsync_nccl_tests weightsync_interop_tests" \
  timeout 460 bash scripts/gpu-check.sh "$out/check" > "$out/gpu-check.txt" 2>&1
echo "gpu-check rc=$?" >> "$out/gpu-check.txt"
grep -B5 -A40 "\*\*\*Failed\|FAILED:" "$out/check/ctest-gpu.txt" 2>/dev/null | head -300 > "$out/failures.txt"
cp "$out/check/summary.txt" "$out/check/env.txt" "$out/" 2>/dev/null
grep "build ok\|BUILD FAILED" "$out/gpu-check.txt" > "$out/build-time.txt"
rm -rf "$out/check"
tail -8 "$out/gpu-check.txt"
