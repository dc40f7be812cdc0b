#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 95 (2026-11-27, two GPUs of one host): the landed tree over NVLink (NCCL's P2P transport
# reading and writing the handshake in pinned host memory), one call.
#   bash benchmarks/results/2026-11-27/run95/run.sh OUT_DIR
# Build; the NCCL tests (each rank on its own GPU) and the two-device tests; nccl --np 2 tiny and
# tiny504 zerocopy, 100 iterations, exchange in host memory and on the device
# (WEIGHTSYNC_EXCHANGE=device), alternated twice. Predicted: all pass; tiny over NVLink 5-15 us
# faster in host memory than on the device (run 87: 54.6-64.0 us on the device, raw 16-18 us).
set -u
out=${1:?usage: run.sh OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
b=build/gpu/benchmarks/weightsync_bench
WS_CPU_TESTS=0 WS_SKIP_TESTS=1 WS_BENCH=none bash scripts/gpu-check.sh "$out/gpu-build" > "$out/build.txt" 2>&1
echo "build rc=$? ($((SECONDS - start)) s)" >> "$out/build.txt"
{
  for pass in 1 2; do
    for ex in host device; do
      echo "== pass $pass exchange $ex"
      if [ $ex = device ]; then export WEIGHTSYNC_EXCHANGE=device; else unset WEIGHTSYNC_EXCHANGE; fi
      timeout 60 $b --np 2 --layout tiny,tiny504 --mode zerocopy --iters 100 --warmup 10 \
        --json "$out/bench.jsonl" 2>&1 | grep -E "raw-nccl|zerocopy|barrier|transport"
      echo "rc=${PIPESTATUS[0]} ($((SECONDS - start)) s)"
    done
  done
  unset WEIGHTSYNC_EXCHANGE
} > "$out/rows.txt" 2>&1
WS_CPU_TESTS=0 WS_BENCH=none WS_CTEST_ARGS="-R gpu.nccl|gpu.p2p|two.GPUs|p2p.engines|gpu.checksum" \
  bash scripts/gpu-check.sh "$out/gpu" > "$out/gpu-check.txt" 2>&1
echo "gpu-check rc=$? ($((SECONDS - start)) s)" >> "$out/gpu-check.txt"
tail -3 "$out/build.txt"; cat "$out/rows.txt"; tail -30 "$out/gpu-check.txt"
