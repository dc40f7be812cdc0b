#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 94 (2026-11-27, one GPU): the landed tree, in two calls on one warm machine.
#   bash benchmarks/results/2026-11-27/run94/run.sh OUT_DIR first    build; bench rows; the GPU
#                                                                    suite but the seven slowest
#   bash benchmarks/results/2026-11-27/run94/run.sh OUT_DIR second   the seven slowest (interop,
#                                                                    full-size, 100 syncs)
# rows (under MPS, three passes): nccl --np 2 tiny, tiny504 zerocopy, 100 iterations, with the
# shm barrier (the default for ranks the bench starts) and with the nccl barrier; ipc tiny,
# lora8b, small1b, dense8b zerocopy, 30 iterations. Predicted: as run 92 and 93 (nccl tiny
# 58-72 us, extra at most one raw latency with the shm barrier; ipc small1b 93-96 %).
set -u
out=${1:?usage: run.sh OUT_DIR first|second}
what=${2:?usage: run.sh OUT_DIR first|second}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
b=build/gpu/benchmarks/weightsync_bench
slow="interop|full-size|back-to-back"  # (no spaces: WS_CTEST_ARGS is split on them)
if [ "$what" = first ]; then
  WS_CPU_TESTS=0 WS_SKIP_TESTS=1 WS_BENCH=none bash scripts/gpu-check.sh "$out/gpu-build" > "$out/build.txt" 2>&1
  echo "build rc=$? ($((SECONDS - start)) s)" >> "$out/build.txt"
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/ws-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/ws-mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d
  {
    for pass in 1 2 3; do
      for bar in shm nccl; do
        echo "== pass $pass nccl barrier $bar"
        timeout 60 $b --np 2 --layout tiny,tiny504 --mode zerocopy --iters 100 --warmup 10 \
          --barrier $bar --json "$out/bench.jsonl" 2>&1 | grep -E "raw-nccl|zerocopy|barrier|mps"
        echo "rc=${PIPESTATUS[0]} ($((SECONDS - start)) s)"
      done
      echo "== pass $pass ipc"
      timeout 70 $b --backend ipc --layout tiny,lora8b,small1b,dense8b --mode zerocopy --iters 30 \
        --warmup 3 --json "$out/bench.jsonl" 2>&1 | grep -vE "^\[|^#  Rank"
      echo "rc=${PIPESTATUS[0]} ($((SECONDS - start)) s)"
    done
  } > "$out/rows.txt" 2>&1
  echo quit | nvidia-cuda-mps-control; sleep 1
  WS_CPU_TESTS=0 WS_BENCH=none WS_CTEST_ARGS="-E $slow" bash scripts/gpu-check.sh "$out/gpu" > "$out/gpu-check.txt" 2>&1
  echo "gpu-check rc=$? ($((SECONDS - start)) s)" >> "$out/gpu-check.txt"
  grep -E "==|raw|zerocopy" "$out/rows.txt"; tail -12 "$out/gpu-check.txt"
else
  WS_CPU_TESTS=0 WS_BENCH=none WS_CTEST_ARGS="-R $slow" bash scripts/gpu-check.sh "$out/gpu" > "$out/gpu-check.txt" 2>&1
  echo "gpu-check rc=$? ($((SECONDS - start)) s)" >> "$out/gpu-check.txt"
  tail -14 "$out/gpu-check.txt"
fi
