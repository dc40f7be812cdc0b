#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 114 (2026-11-28, one GPU): run 113 found the consumer's NCCL enqueue and the exchange's
# transit growing with the tensor count (1, 64, 504 tensors of the same bytes), though the sync
# does nothing per tensor on the consumer before the exchange but compare the list (6 us). The
# bench, though, checks every sync with one kernel per tensor (504 launches) just before the next.
# DeviceModel::count_wrong now compares a model of up to 256 MiB with a reference copy in one
# launch. A = 315c21a (bench-old/, carried), B = this tree (tables, digest once, the exact-bytes
# baseline, the one-launch check). Under MPS: the trace of tiny504 (B); NCCL ranks sharing the GPU
# (shm barrier, 100 iterations) tiny, tiny504, one tensor of its bytes, --np 2 two passes
# alternating A and B, --np 4 one each; ipc tiny, tiny504, lora8b, small1b, one pass each.
#   bash benchmarks/results/2026-11-28/run114/run.sh OUT_DIR
# Predicted: if the 504 launches perturbed the next sync, B's tiny504 falls to 110-130 us (one
# tensor of its bytes is ~80-100 us, and the trace's per-tensor host work is ~30 us).
set -u
out=${1:?usage: run.sh OUT_DIR}
mkdir -p "$out"; out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
cfg="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DWEIGHTSYNC_WITH_CUDA=ON -DWEIGHTSYNC_WITH_NCCL=ON -DWEIGHTSYNC_BUILD_EXAMPLES=OFF -DWEIGHTSYNC_BUILD_BENCHMARKS=ON -DWEIGHTSYNC_BUILD_TESTS=OFF"
{
  (cmake -S bench-old -B build/old $cfg > /tmp/cfg-a.txt 2>&1 &&
    cmake --build build/old -j 8 --target weightsync_bench > /tmp/build-a.txt 2>&1; echo "build A rc=$? ($((SECONDS - start)) s)") &
  cmake -S . -B build/gpu $cfg > /tmp/cfg-b.txt 2>&1 &&
    cmake --build build/gpu -j 8 --target weightsync_bench > /tmp/build-b.txt 2>&1
  echo "build B rc=$? ($((SECONDS - start)) s)"
  wait
} > "$out/build.txt" 2>&1
cat "$out/build.txt"
cp build/old/benchmarks/weightsync_bench /tmp/bench-a; cp build/gpu/benchmarks/weightsync_bench /tmp/bench-b
export CUDA_MPS_PIPE_DIRECTORY=/tmp/ws-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/ws-mps-log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d
rows() {  # $1: label, $2: ranks, then the bench
  local label=$1 np=$2; shift 2
  echo "== $label"
  timeout 100 "$@" --np "$np" --layout tiny,tiny504,synthetic:1x32256 --mode zerocopy,packed --iters 100 --warmup 10 \
    --barrier shm --json "$out/bench.jsonl" 2>&1 | grep -E "layout:|raw-|zerocopy|packed|host us"
}
ipc() {
  echo "== $1"; shift
  timeout 150 "$@" --backend ipc --layout tiny,tiny504,lora8b,small1b --mode zerocopy --iters 100 --warmup 10 \
    --json "$out/bench.jsonl" 2>&1 | grep -E "layout:|raw-|zerocopy"
}
{
  echo "== trace tiny504 b"
  WEIGHTSYNC_TRACE=phases timeout 100 /tmp/bench-b --np 2 --layout tiny504 --mode zerocopy \
    --iters 30 --warmup 5 --barrier shm 2>&1 | grep -E "raw-nccl|zerocopy|trace" | tail -8
  for pass in 1 2; do
    rows "pass $pass a np2 mps" 2 /tmp/bench-a
    rows "pass $pass b np2 mps" 2 /tmp/bench-b
  done
  rows "pass 1 a np4 mps" 4 /tmp/bench-a
  rows "pass 1 b np4 mps" 4 /tmp/bench-b
  ipc "pass 1 a ipc mps" /tmp/bench-a
  ipc "pass 1 b ipc mps" /tmp/bench-b
} > "$out/rows.txt" 2>&1
echo quit | nvidia-cuda-mps-control; sleep 1
grep trace "$out/rows.txt" | cut -c1-330
grep -E "^== |raw-|zerocopy|packed" "$out/rows.txt" | grep -v "^\[" | grep -v trace |
  awk '/^==/{p=$3" "$4" "$5; next} {print p, $1, $2, $6, $7, $11}'
echo "rows done ($((SECONDS - start)) s)"
