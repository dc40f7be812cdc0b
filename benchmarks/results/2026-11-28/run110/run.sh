#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 110 (2026-11-28, one GPU): descriptor tables for the batched copy kernel, the metadata
# digest computed once per sync, and the bench's exact-bytes baseline.
#   bash benchmarks/results/2026-11-28/run110/run.sh OUT_DIR
# A = 315c21a (bench-old/, carried), B = this tree. Under MPS: the new CUDA tests; then NCCL ranks
# sharing the GPU (shm barrier, 100 iterations), tiny, tiny504 and one tensor of tiny504's bytes,
# --np 2 three passes alternating A and B, --np 4 one pass each; then ipc tiny, tiny504, lora8b,
# small1b, two passes each.
# Run 109 (WEIGHTSYNC_TRACE=phases) showed, for tiny504 (504 x 64 B) against one tensor of the same
# bytes: the launch of the batched copy kernel (its 30 KiB parameter block) costs ~18 us of host
# time on the producer before the exchange and ~20 us on the consumer after it; the metadata list
# is compared twice per sync (~5 us each). The exchange's transit was also 40-70 us longer.
# Predicted: tiny504 --np 2 from ~205 us to 150-170 us (host: -45 us on the critical path; more if
# the transit gap came from the parameter block on the GPU); tiny and one tensor unchanged; ipc
# tiny504 and lora8b 10-20 us faster (their copy batches of 504 pieces reuse one table).
set -u
out=${1:?usage: run.sh OUT_DIR}
mkdir -p "$out"; out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
cfg="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DWEIGHTSYNC_WITH_CUDA=ON -DWEIGHTSYNC_WITH_NCCL=ON -DWEIGHTSYNC_BUILD_EXAMPLES=OFF -DWEIGHTSYNC_BUILD_BENCHMARKS=ON"
{
  (cmake -S bench-old -B build/old $cfg -DWEIGHTSYNC_BUILD_TESTS=OFF > /tmp/cfg-a.txt 2>&1 &&
    cmake --build build/old -j 6 --target weightsync_bench > /tmp/build-a.txt 2>&1; echo "build A rc=$? ($((SECONDS - start)) s)") &
  cmake -S . -B build/gpu $cfg -DWEIGHTSYNC_BUILD_TESTS=ON -DWEIGHTSYNC_BUILD_GPU_TESTS=ON > /tmp/cfg-b.txt 2>&1 &&
    cmake --build build/gpu -j 12 --target weightsync_bench weightsync_gpu_tests > /tmp/build-b.txt 2>&1
  echo "build B rc=$? ($((SECONDS - start)) s)"; grep -E "error|FAILED" /tmp/build-b.txt | head
  wait
} > "$out/build.txt" 2>&1
cat "$out/build.txt"
cp build/old/benchmarks/weightsync_bench /tmp/bench-a; cp build/gpu/benchmarks/weightsync_bench /tmp/bench-b
build/gpu/tests/gpu/weightsync_gpu_tests "cuda policy*" > "$out/cuda-tests.txt" 2>&1; echo "cuda tests rc=$?"; tail -3 "$out/cuda-tests.txt"
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
  for pass in 1 2 3; do
    rows "pass $pass a np2 mps" 2 /tmp/bench-a
    rows "pass $pass b np2 mps" 2 /tmp/bench-b
  done
  rows "pass 1 a np4 mps" 4 /tmp/bench-a
  rows "pass 1 b np4 mps" 4 /tmp/bench-b
  for pass in 1 2; do
    ipc "pass $pass a ipc mps" /tmp/bench-a
    ipc "pass $pass b ipc mps" /tmp/bench-b
  done
} > "$out/rows.txt" 2>&1
echo quit | nvidia-cuda-mps-control; sleep 1
grep -E "^== |raw-|zerocopy|packed" "$out/rows.txt" | grep -v "^\[" |
  awk '/^==/{p=$3" "$4" "$5; next} {print p, $1, $2, $6, $7, $11}'
echo "rows done ($((SECONDS - start)) s)"
