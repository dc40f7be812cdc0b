#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 127, second call (2026-11-28, one GPU, ranks sharing it): the slowest seven GPU tests
# (full-size dense8b and moe30b, 100 back-to-back syncs, the five Python interop tests) on the
# same tree as run.sh.
#   bash benchmarks/results/2026-11-28/run127/slow.sh OUT_DIR
set -u
out=${1:?usage: slow.sh OUT_DIR}
mkdir -p "$out"; out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
slow="interop|full-size|back-to-back"
WS_CPU_TESTS=0 WS_BENCH=none WS_SKIP_TESTS=0 WS_CTEST_ARGS="-R $slow" \
  bash scripts/gpu-check.sh "$out/gpu-slow" > "$out/gpu-check-slow.txt" 2>&1
echo "gpu-check rc=$? ($((SECONDS - start)) s)" >> "$out/gpu-check-slow.txt"
grep -E "NOT RUN|Test +#" "$out/gpu-check-slow.txt" | cut -c1-160
tail -n 4 "$out/gpu-check-slow.txt"
