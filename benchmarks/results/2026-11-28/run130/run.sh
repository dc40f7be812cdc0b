#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 130 (2026-11-28, one GPU): the bench after its exact-bytes baselines share their poison and
# check (no change to what they time): ipc and NCCL (ranks sharing the GPU) tiny and tiny504 rows
# under MPS, every byte checked.
#   bash benchmarks/results/2026-11-28/run130/run.sh OUT_DIR
set -u
out=${1:?usage: run.sh OUT_DIR}
mkdir -p "$out"; out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
WS_CPU_TESTS=0 WS_SKIP_TESTS=1 WS_BENCH=none WS_BUILD_TARGETS="weightsync_bench" \
  bash scripts/gpu-check.sh "$out/gpu" > "$out/build.txt" 2>&1
echo "build rc=$? ($((SECONDS - start)) s)" >> "$out/build.txt"
tail -1 "$out/build.txt"
b=build/gpu/benchmarks/weightsync_bench
export CUDA_MPS_PIPE_DIRECTORY=/tmp/ws-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/ws-mps-log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d
{
  echo "== ipc"
  timeout 100 $b --backend ipc --layout tiny,tiny504 --mode zerocopy --iters 100 --warmup 10 2>&1
  echo "== nccl np2"
  timeout 100 $b --np 2 --layout tiny,tiny504 --mode zerocopy --iters 100 --warmup 10 --barrier shm 2>&1
} > "$out/rows.txt" 2>&1
echo quit | nvidia-cuda-mps-control
echo "done ($((SECONDS - start)) s)" >> "$out/rows.txt"
grep -E "^== |raw-|zerocopy|Out of|done" "$out/rows.txt" | cut -c1-120
