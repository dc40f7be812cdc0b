#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 96 (2026-11-27, two GPUs of one host): the two sharded delta tests that failed in run 95
# (4 NCCL ranks on 2 GPUs without shared mode: NCCL's duplicate-GPU check), after the fix to the
# test support, and the other 4-rank NCCL tests.
#   bash benchmarks/results/2026-11-27/run96/run.sh OUT_DIR
set -u
out=${1:?usage: run.sh OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
WS_CPU_TESTS=0 WS_BENCH=none WS_BUILD_TARGETS="weightsync_nccl_tests" \
  WS_CTEST_ARGS="-R sharded.delta|four.processes" bash scripts/gpu-check.sh "$out/gpu" > "$out/gpu-check.txt" 2>&1
echo "gpu-check rc=$? ($((SECONDS - start)) s)" >> "$out/gpu-check.txt"
grep "ws-test\] mode" "$out/gpu/ctest-gpu.txt" | sort | uniq -c
tail -8 "$out/gpu-check.txt"
