#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 109 (2026-11-28, one GPU): run 108 found tiny504 (504 x 64 B) 115 us slower than one tensor
# of the same 32256 bytes with 2 NCCL ranks sharing the GPU under MPS, though the wire shapes
# alone (exchange_probe) differ by 7 us and the copy out by 11 us. WEIGHTSYNC_TRACE=phases shows
# where each rank's host time goes, sync by sync.
#   bash benchmarks/results/2026-11-28/run109/run.sh OUT_DIR
set -u
out=${1:?usage: run.sh OUT_DIR}
mkdir -p "$out"; out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
{
  cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DWEIGHTSYNC_WITH_CUDA=ON -DWEIGHTSYNC_WITH_NCCL=ON -DWEIGHTSYNC_BUILD_TESTS=ON \
    -DWEIGHTSYNC_BUILD_GPU_TESTS=ON -DWEIGHTSYNC_BUILD_BENCHMARKS=ON -DWEIGHTSYNC_BUILD_EXAMPLES=OFF &&
    cmake --build build/gpu -j 16 --target weightsync_bench exchange_probe
  echo "build rc=$? ($((SECONDS - start)) s)"
} > "$out/build.txt" 2>&1
tail -1 "$out/build.txt"
which nsys ncu 2>&1 | head -2
b=build/gpu/benchmarks
export CUDA_MPS_PIPE_DIRECTORY=/tmp/ws-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/ws-mps-log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d
for layout in tiny504 synthetic:1x32256; do
  echo "== $layout"
  WEIGHTSYNC_TRACE=phases timeout 100 $b/weightsync_bench --np 2 --layout $layout --mode zerocopy \
    --iters 30 --warmup 5 --barrier shm 2>&1 | grep -E "raw-nccl|zerocopy|trace" | tail -12
done > "$out/rows.txt" 2>&1
echo quit | nvidia-cuda-mps-control; sleep 1
cut -c1-400 "$out/rows.txt"
echo "done ($((SECONDS - start)) s)"
