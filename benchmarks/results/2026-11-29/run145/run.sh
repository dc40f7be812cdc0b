#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 145 (2026-11-29, one GPU, ranks sharing it): 7017807, the landing commit. Since run 143
# (629ccdb): the one rule for merging a copy into the last (detail::continues) is called by
# Workspace::add_copy, the host's eager pack and the ipc pulls' add_piece (a refactor: the same
# merges), and CI's build layout (tests/CMakeLists.txt; GPU builds keep every CPU suite).
#   bash benchmarks/results/2026-11-29/run145/run.sh OUT_DIR [fast|slow]
# fast: the build, then scripts/gpu-check.sh with all but the slowest seven; slow: those seven.
# Predicted: fast 63 passed, 0 failed, 3 skipped (the two-device tests); slow 7/0/0.
set -u
out=${1:?usage: run.sh OUT_DIR [fast|slow]}
part=${2:-fast}
mkdir -p "$out"; out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
slow="interop|full-size|back-to-back"  # (no spaces: WS_CTEST_ARGS is split on them)
if [ "$part" = slow ]; then
  WS_CPU_TESTS=0 WS_BENCH=none WS_CTEST_ARGS="-R $slow" bash scripts/gpu-check.sh "$out/gpu-slow" > "$out/gpu-check-slow.txt" 2>&1
  echo "gpu-check slow rc=$? ($((SECONDS - start)) s)" >> "$out/gpu-check-slow.txt"
  tail -12 "$out/gpu-check-slow.txt"
  exit 0
fi
WS_CPU_TESTS=0 WS_BENCH=none WS_CTEST_ARGS="-E $slow" bash scripts/gpu-check.sh "$out/gpu" > "$out/gpu-check.txt" 2>&1
echo "gpu-check rc=$? ($((SECONDS - start)) s)" >> "$out/gpu-check.txt"
tail -6 "$out/gpu-check.txt"
grep -B2 -A12 "FAILED" build/gpu/Testing/Temporary/LastTest.log | head -60
