#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 111 (2026-11-28, one GPU): run 110 found tiny504 no faster with descriptor tables. Here:
# the launch of 504 pieces by each path alone (exchange_probe, rank 0: host time of the launch
# call and launch to done), and WEIGHTSYNC_TRACE=phases on tiny504 and one tensor of its bytes.
#   bash benchmarks/results/2026-11-28/run111/run.sh OUT_DIR
# Predicted (from run 109's ~18-20 us per launch): copy504-value 15-20 us of host time,
# copy504-table 3-6 us, copy16-small 3-5 us.
set -u
out=${1:?usage: run.sh OUT_DIR}
mkdir -p "$out"; out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
cfg="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DWEIGHTSYNC_WITH_CUDA=ON -DWEIGHTSYNC_WITH_NCCL=ON -DWEIGHTSYNC_BUILD_EXAMPLES=OFF -DWEIGHTSYNC_BUILD_BENCHMARKS=ON"
{
  cmake -S . -B build/gpu $cfg -DWEIGHTSYNC_BUILD_TESTS=ON -DWEIGHTSYNC_BUILD_GPU_TESTS=ON &&
    cmake --build build/gpu -j 16 --target weightsync_bench exchange_probe weightsync_gpu_tests
  echo "build rc=$? ($((SECONDS - start)) s)"
} > "$out/build.txt" 2>&1
tail -1 "$out/build.txt"
build/gpu/tests/gpu/weightsync_gpu_tests "cuda policy*" > "$out/cuda-tests.txt" 2>&1; echo "cuda tests rc=$?"; tail -3 "$out/cuda-tests.txt"
b=build/gpu/benchmarks
export CUDA_MPS_PIPE_DIRECTORY=/tmp/ws-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/ws-mps-log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d
{
  for r in 0 1; do
    NCCL_HOSTID=wsp$r NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 timeout 120 \
      $b/exchange_probe --rank $r --np 2 --port 29501 --iters 200 --warmup 20 &
  done
  wait
  for layout in tiny504 synthetic:1x32256; do
    echo "== $layout"
    WEIGHTSYNC_TRACE=phases timeout 100 $b/weightsync_bench --np 2 --layout $layout --mode zerocopy \
      --iters 30 --warmup 5 --barrier shm 2>&1 | grep -E "raw-nccl|zerocopy|trace" | tail -9
  done
} > "$out/rows.txt" 2>&1
echo quit | nvidia-cuda-mps-control; sleep 1
cut -c1-330 "$out/rows.txt"
echo "done ($((SECONDS - start)) s)"
