#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 108 (2026-11-28, one GPU): where tiny504's time goes with 2 NCCL ranks sharing the GPU, under
# MPS. exchange_probe times the wire shapes alone (one raw broadcast against the handshake's
# grouped broadcasts, in device and pinned host memory, and with the consumer's copy out behind
# it); the bench times tiny504 against one tensor and 8 tensors of the same 32256 bytes, with the
# exchange in pinned host memory (default) and on the device, and with copy engines for the copies.
#   bash benchmarks/results/2026-11-28/run108/run.sh OUT_DIR
# Predicted: the handshake's shape costs 0-20 us over one broadcast; the 504 tensors cost 40-60 us
# over one tensor of the same bytes (the pack and the copy out, 504 descriptors each).
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
tail -3 "$out/build.txt"
b=build/gpu/benchmarks
export CUDA_MPS_PIPE_DIRECTORY=/tmp/ws-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/ws-mps-log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d
probe() {
  local port=$1
  for r in 0 1; do
    NCCL_HOSTID=wsp$r NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 timeout 120 \
      $b/exchange_probe --rank $r --np 2 --port $port --iters 200 --warmup 20 &
  done
  wait
}
rows() {  # $1: label, then env assignments
  echo "== $1"; shift
  env "$@" timeout 100 $b/weightsync_bench --np 2 --layout tiny,tiny504,synthetic:1x32256,synthetic:8x4032 \
    --mode zerocopy --iters 100 --warmup 10 --barrier shm --json "$out/bench.jsonl" 2>&1 |
    grep -E "raw-nccl|zerocopy|host us"
}
{
  echo "== probe pass 1"; probe 29501
  rows "pass 1 default" X=1
  rows "pass 1 exchange=device" WEIGHTSYNC_EXCHANGE=device
  rows "pass 1 copy=ce" WEIGHTSYNC_COPY=ce
  echo "== probe pass 2"; probe 29511
  rows "pass 2 default" X=1
  rows "pass 2 exchange=device" WEIGHTSYNC_EXCHANGE=device
  rows "pass 2 copy=ce" WEIGHTSYNC_COPY=ce
} > "$out/rows.txt" 2>&1
echo quit | nvidia-cuda-mps-control; sleep 1
cat "$out/rows.txt" | grep -v "^\[" | cut -c1-150
echo "done ($((SECONDS - start)) s)"
