#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 69 (2026-11-27, one GPU), the landed commit: the GPU tests of what changed after run 61
# (the benchmarks' smoke tests; the update info's conversion, used by the engines, the sharded,
# delta and fp8 paths, checksums and shadow mode), multi-rank ones sharing the GPU.
#   bash benchmarks/results/2026-11-27/run69/run.sh OUT_DIR
set -u
out=${1:?usage: run.sh OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
tmp=$(mktemp -d)
WS_CPU_TESTS=0 WS_BENCH=none \
  WS_BUILD_TARGETS="weightsync_gpu_tests weightsync_nccl_tests weightsync_bench shadow_bench" \
  WS_CTEST_ARGS="-R (engines|sharded|delta|fp8|shadow|bench.smoke|checksum|unique-id|round.trips) -E torch --timeout 120" \
  timeout 270 bash scripts/gpu-check.sh "$tmp/check" > "$out/gpu-check.txt" 2>&1
echo "gpu-check rc=$? ($((SECONDS - start)) s)" >> "$out/gpu-check.txt"
cp "$tmp/check/env.txt" "$tmp/check/ctest-gpu.txt" "$tmp/check/summary.txt" "$out/" 2> /dev/null
rm -rf "$tmp"
echo "=== run 69 ($((SECONDS - start)) s) ==="
grep -E "build ok|BUILD|gpu-check rc" "$out/gpu-check.txt"
cat "$out/summary.txt" 2> /dev/null | tail -40
