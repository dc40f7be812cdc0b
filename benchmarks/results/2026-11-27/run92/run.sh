#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 92 (2026-11-27, one GPU): the handshake in pinned host memory (PinnedHostCommunicator) and
# the bench's shared-memory barrier for nccl ranks on one host, in two calls.
#   bash benchmarks/results/2026-11-27/run92/run.sh OUT_DIR rows    build; nccl tests; bench rows
#   bash benchmarks/results/2026-11-27/run92/run.sh OUT_DIR suite   the whole GPU suite (~8 min)
# rows: nccl --np 2 (shared GPU, MPS) tiny and tiny504 zerocopy, 100 iterations, exchange in host
# memory (default) or on the device (WEIGHTSYNC_EXCHANGE=device) x bench barrier shm or nccl,
# alternated, two passes. Predicted (from run 91's lab): with the shm barrier the raw row rises
# from ~22 us to 37-41 us; tiny 68-72 us on the device, 58-62 us in host memory (9-15 us less);
# extra over raw 20-25 us in host memory, at most one raw latency (target met) with shm.
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
  (cd build/gpu && timeout 200 ctest --output-on-failure -R "gpu\.nccl (round trips|eager|faults|engines|unique-id|1 trainer|sharded)" \
     > "$out/ctest-nccl.txt" 2>&1; echo "ctest rc=$? ($((SECONDS - start)) s)" >> "$out/ctest-nccl.txt")
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/ws-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/ws-mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d
  {
    for pass in 1 2; do
      for ex in host device; do
        for bar in shm nccl; do
          echo "== pass $pass exchange $ex barrier $bar"
          if [ $ex = device ]; then export WEIGHTSYNC_EXCHANGE=device; else unset WEIGHTSYNC_EXCHANGE; fi
          timeout 90 $b --np 2 --layout tiny,tiny504 --mode zerocopy --iters 100 --warmup 10 \
            --barrier $bar --json "$out/bench.jsonl" 2>&1 | grep -E "raw-nccl|zerocopy|barrier|transport|mps"
          echo "rc=${PIPESTATUS[0]} ($((SECONDS - start)) s)"
        done
      done
    done
    unset WEIGHTSYNC_EXCHANGE
  } > "$out/rows.txt" 2>&1
  echo quit | nvidia-cuda-mps-control; sleep 1
  cat "$out/build.txt" | tail -3; tail -15 "$out/ctest-nccl.txt"; cat "$out/rows.txt"
else
  WS_CPU_TESTS=0 WS_BENCH=none bash scripts/gpu-check.sh "$out/gpu" > "$out/gpu-check.txt" 2>&1
  echo "gpu-check rc=$? ($((SECONDS - start)) s)" >> "$out/gpu-check.txt"
  tail -30 "$out/gpu-check.txt"
fi
