#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 112 (2026-11-28, one GPU): run 111's trace put tiny504's extra time (against one tensor of
# its bytes) mostly in the exchange: from the producer's enqueue to the consumer's completion
# 74-126 us, against ~54 us for one tensor. exchange_probe now adds an eager sync's GPU work with
# no protocol around it: the producer's pack of 504 pieces before the handshake and the
# consumer's copy out after it, with the blocks in pinned host memory and on the device, and with
# one copy of 32256 bytes on each side. Under MPS twice, then once without. Then the bench's trace
# of tiny504 with WEIGHTSYNC_EXCHANGE=device.
#   bash benchmarks/results/2026-11-28/run112/run.sh OUT_DIR
# Predicted: if the pack kernel's writes into pinned host memory are what delays the transit,
# pack+hs-host+copy is 40-60 us over hs-host, pack+hs-dev+copy and pack1+hs-host+copy1 are not.
set -u
out=${1:?usage: run.sh OUT_DIR}
mkdir -p "$out"; out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
cfg="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DWEIGHTSYNC_WITH_CUDA=ON -DWEIGHTSYNC_WITH_NCCL=ON -DWEIGHTSYNC_BUILD_EXAMPLES=OFF -DWEIGHTSYNC_BUILD_BENCHMARKS=ON"
{
  cmake -S . -B build/gpu $cfg -DWEIGHTSYNC_BUILD_TESTS=OFF &&
    cmake --build build/gpu -j 16 --target weightsync_bench exchange_probe
  echo "build rc=$? ($((SECONDS - start)) s)"
} > "$out/build.txt" 2>&1
tail -1 "$out/build.txt"
b=build/gpu/benchmarks
probe() {
  echo "== probe $1"
  for r in 0 1; do
    NCCL_HOSTID=wsp$r NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 timeout 120 \
      $b/exchange_probe --rank $r --np 2 --port $2 --iters 200 --warmup 20 &
  done
  wait
}
export CUDA_MPS_PIPE_DIRECTORY=/tmp/ws-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/ws-mps-log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
{
  nvidia-cuda-mps-control -d
  probe "mps 1" 29501
  probe "mps 2" 29511
  echo "== tiny504 exchange=device (mps)"
  WEIGHTSYNC_EXCHANGE=device WEIGHTSYNC_TRACE=phases timeout 100 $b/weightsync_bench --np 2 --layout tiny504 --mode zerocopy \
    --iters 30 --warmup 5 --barrier shm 2>&1 | grep -E "raw-nccl|zerocopy|trace" | tail -7
  echo quit | nvidia-cuda-mps-control; sleep 1
  probe "no mps" 29521
} > "$out/rows.txt" 2>&1
cut -c1-330 "$out/rows.txt"
echo "done ($((SECONDS - start)) s)"
