#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 86 (2026-11-27, one GPU): the landed tree, in two calls on one warm machine.
#   bash benchmarks/results/2026-11-27/run86/run.sh OUT_DIR rows    build; bench rows (~3 min)
#   bash benchmarks/results/2026-11-27/run86/run.sh OUT_DIR suite   the whole GPU suite (~7 min)
# rows: nccl shared GPU (socket transport) --np 2 and --np 4, every byte checked; --np 2 small1b
# zerocopy with checksums off and on (#31: their cost on this transport; predicted < 5 %: the
# digests read HBM at TB/s while the socket moves ~4 GB/s).
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
    timeout 120 $b --np 2 --layout small1b --mode zerocopy --checksum off,on --iters 3 --warmup 1 \
      --json "$out/bench.jsonl" 2>&1 | grep -vE "^\["; echo "rc=${PIPESTATUS[0]} ($((SECONDS - start)) s)"
    timeout 120 $b --np 2 --layout tiny,lora8b,small1b --mode packed,zerocopy --iters 3 --warmup 1 \
      --json "$out/bench.jsonl" 2>&1 | grep -vE "^\["; echo "rc=${PIPESTATUS[0]} ($((SECONDS - start)) s)"
    timeout 120 $b --np 4 --layout tiny,lora8b --mode packed,zerocopy --iters 3 --warmup 1 \
      --json "$out/bench.jsonl" 2>&1 | grep -vE "^\["; echo "rc=${PIPESTATUS[0]} ($((SECONDS - start)) s)"
  } > "$out/rows.txt" 2>&1
else
  WS_CPU_TESTS=0 WS_BENCH=none bash scripts/gpu-check.sh "$out/gpu" > "$out/gpu-check.txt" 2>&1
  echo "gpu-check rc=$? ($((SECONDS - start)) s)" >> "$out/gpu-check.txt"
fi
