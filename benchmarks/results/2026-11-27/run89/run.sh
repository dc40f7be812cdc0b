#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 89 (2026-11-27, one GPU): the landed tree (ipc checksums: unchanged sources are not asked of
# the driver again; the verdict parser; fp8 launch errors name the tensor), in two calls.
#   bash benchmarks/results/2026-11-27/run89/run.sh OUT_DIR rows    build; bench rows (~3 min)
#   bash benchmarks/results/2026-11-27/run89/run.sh OUT_DIR suite   the whole GPU suite (~7 min)
# rows: ipc dense8b zerocopy with checksums off and on, 10 iterations. Predicted: the producer's
# "place" phase with checksums on falls from ~200 us (run 67: 204-215) to under 10 us, and the
# checksum row's time by about as much (~1.5 %); the cost stays ~+50 % (one GPU).
set -u
out=${1:?usage: run.sh OUT_DIR rows|suite}
what=${2:?usage: run.sh OUT_DIR rows|suite}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
b=build/gpu/benchmarks/weightsync_bench
if [ "$what" = rows ]; then
  WS_CPU_TESTS=0 WS_SKIP_TESTS=1 WS_BENCH=none bash scripts/gpu-check.sh "$out/gpu-build" > "$out/build.txt" 2>&1
  echo "build rc=$? ($((SECONDS - start)) s)" >> "$out/build.txt"
  {
    timeout 120 $b --backend ipc --layout dense8b --mode zerocopy --checksum off,on --iters 10 \
      --warmup 2 --json "$out/bench.jsonl" 2>&1 | grep -vE "^\["; echo "rc=${PIPESTATUS[0]} ($((SECONDS - start)) s)"
  } > "$out/rows.txt" 2>&1
else
  WS_CPU_TESTS=0 WS_BENCH=none bash scripts/gpu-check.sh "$out/gpu" > "$out/gpu-check.txt" 2>&1
  echo "gpu-check rc=$? ($((SECONDS - start)) s)" >> "$out/gpu-check.txt"
fi
