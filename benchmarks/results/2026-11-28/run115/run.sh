#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 115 (2026-11-28, one GPU): the GPU suite on this tree (descriptor tables for the batched
# copy kernel, the phase trace, the digest once, the bench's exact baseline and one-launch
# checks), in two calls on one warm machine:
#   bash benchmarks/results/2026-11-28/run115/run.sh OUT_DIR tests   the GPU suite but the slowest
#   bash benchmarks/results/2026-11-28/run115/run.sh OUT_DIR slow    the slowest seven
set -u
out=${1:?usage: run.sh OUT_DIR tests|slow}
what=${2:?usage: run.sh OUT_DIR tests|slow}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
slow="interop|full-size|back-to-back"  # (no spaces: WS_CTEST_ARGS is split on them)
sel="-R $slow"; [ "$what" = tests ] && sel="-E $slow"
WS_CPU_TESTS=0 WS_BENCH=none WS_CTEST_ARGS="$sel" bash scripts/gpu-check.sh "$out/gpu" > "$out/gpu-check-$what.txt" 2>&1
echo "gpu-check rc=$? ($((SECONDS - start)) s)" >> "$out/gpu-check-$what.txt"
tail -14 "$out/gpu-check-$what.txt"
