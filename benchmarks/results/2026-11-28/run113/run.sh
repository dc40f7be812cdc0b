#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 113 (2026-11-28, one GPU): run 112's probe put an eager tiny504 sync's GPU work, with no
# protocol around it, at ~78 us (slowest rank), while the library's sync takes 155-195 us; its
# trace shows ncclGroupEnd of the handshake taking 30-40 us on both ranks in tiny504 against
# ~13 us for one tensor of the same bytes. Here the trace (with exchange-begin: the group's start)
# for 1, 64 and 504 tensors of the same 32256 bytes, under MPS.
#   bash benchmarks/results/2026-11-28/run113/run.sh OUT_DIR
# Predicted: the group's time grows with the tensor count if something the sync does per tensor
# (on either rank) slows NCCL's enqueue.
set -u
out=${1:?usage: run.sh OUT_DIR}
mkdir -p "$out"; out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
cfg="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DWEIGHTSYNC_WITH_CUDA=ON -DWEIGHTSYNC_WITH_NCCL=ON -DWEIGHTSYNC_BUILD_EXAMPLES=OFF -DWEIGHTSYNC_BUILD_BENCHMARKS=ON"
{
  cmake -S . -B build/gpu $cfg -DWEIGHTSYNC_BUILD_TESTS=OFF &&
    cmake --build build/gpu -j 16 --target weightsync_bench
  echo "build rc=$? ($((SECONDS - start)) s)"
} > "$out/build.txt" 2>&1
tail -1 "$out/build.txt"
b=build/gpu/benchmarks
export CUDA_MPS_PIPE_DIRECTORY=/tmp/ws-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/ws-mps-log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d
{
  for layout in synthetic:1x32256 synthetic:64x504 tiny504; do
    echo "== $layout"
    WEIGHTSYNC_TRACE=phases timeout 100 $b/weightsync_bench --np 2 --layout $layout --mode zerocopy \
      --iters 30 --warmup 5 --barrier shm 2>&1 | grep -E "raw-nccl|zerocopy|trace" | tail -7
  done
} > "$out/rows.txt" 2>&1
echo quit | nvidia-cuda-mps-control; sleep 1
cut -c1-360 "$out/rows.txt"
echo "done ($((SECONDS - start)) s)"
