#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 83 (2026-11-27, one GPU): the whole GPU suite (scripts/gpu-check.sh) on the final tree, with
# a fresh configure and build: every multi-rank test in shared-GPU mode, the interop tests, the
# bench smoke tests, and the sharded delta rounds under both references.
#   bash benchmarks/results/2026-11-27/run83/run.sh OUT_DIR
set -u
out=${1:?usage: run.sh OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
WS_CPU_TESTS=0 WS_BENCH=none bash scripts/gpu-check.sh "$out/gpu" > "$out/gpu-check.txt" 2>&1
echo "gpu-check rc=$? ($((SECONDS - start)) s)" >> "$out/gpu-check.txt"
