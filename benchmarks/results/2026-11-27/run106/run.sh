#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 106 (2026-11-27, one GPU): wide handshake blocks for the roots alone (protocol 8), in three calls on one warm
# machine.
#   bash benchmarks/results/2026-11-27/run106/run.sh OUT_DIR rows    builds A and B; the rows below
#   bash benchmarks/results/2026-11-27/run106/run.sh OUT_DIR tests   the GPU suite but the slowest
#   bash benchmarks/results/2026-11-27/run106/run.sh OUT_DIR slow    the slowest seven
# A = 34067ff (bench-old/, carried), B = this tree. Under MPS, NCCL ranks sharing the GPU (shm
# barrier, 100 iterations), tiny and tiny504 zerocopy and packed: --np 2, three passes alternating
# A and B; --np 4, one pass of each.
# Run 105 made every rank's block wide: the all-gather of 2 x 33 KiB took about as long as the
# handshake and the data it replaced (tiny504 247-315 us against A's 277-315). Now only the
# root's block is wide: one broadcast of 33 KiB grouped with one of 4.3 KiB.
# Predicted: tiny504 at about a raw 32 KiB broadcast (~85-90 us) plus 30-60 us (the pack and
# unpack of 504 tensors, the consumer's small block): 120-150 us, within one raw latency of raw;
# tiny unchanged.
set -u
out=${1:?usage: run.sh OUT_DIR rows|tests|slow}
what=${2:?usage: run.sh OUT_DIR rows|tests|slow}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
slow="interop|full-size|back-to-back"  # (no spaces: WS_CTEST_ARGS is split on them)
if [ "$what" = slow ] || [ "$what" = tests ]; then
  sel="-R $slow"; [ "$what" = tests ] && sel="-E $slow"
  WS_CPU_TESTS=0 WS_BENCH=none WS_CTEST_ARGS="$sel" bash scripts/gpu-check.sh "$out/gpu" > "$out/gpu-check-$what.txt" 2>&1
  echo "gpu-check rc=$? ($((SECONDS - start)) s)" >> "$out/gpu-check-$what.txt"
  tail -14 "$out/gpu-check-$what.txt"
  exit 0
fi
{
  cmake -S bench-old -B build/old -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DWEIGHTSYNC_WITH_CUDA=ON -DWEIGHTSYNC_WITH_NCCL=ON -DWEIGHTSYNC_BUILD_TESTS=OFF \
    -DWEIGHTSYNC_BUILD_BENCHMARKS=ON -DWEIGHTSYNC_BUILD_EXAMPLES=OFF > /tmp/cfg-a.txt 2>&1 &&
    cmake --build build/old -j 4 --target weightsync_bench > /tmp/build-a.txt 2>&1 &
  pa=$!
  WS_CPU_TESTS=0 WS_SKIP_TESTS=1 WS_BENCH=none bash scripts/gpu-check.sh "$out/gpu-build" > /tmp/build-b.txt 2>&1
  echo "build B rc=$? ($((SECONDS - start)) s)"; tail -2 /tmp/build-b.txt
  wait $pa; echo "build A rc=$? ($((SECONDS - start)) s)"; tail -2 /tmp/build-a.txt
} > "$out/build.txt" 2>&1
cp build/old/benchmarks/weightsync_bench /tmp/bench-a; cp build/gpu/benchmarks/weightsync_bench /tmp/bench-b
rows() {  # $1: label, $2: ranks, then the bench
  local label=$1 np=$2; shift 2
  echo "== $label"
  timeout 100 "$@" --np "$np" --layout tiny,tiny504 --mode zerocopy,packed --iters 100 --warmup 10 \
    --barrier shm --json "$out/bench.jsonl" 2>&1 | grep -E "layout:|raw-nccl|zerocopy|packed|host us"
}
export CUDA_MPS_PIPE_DIRECTORY=/tmp/ws-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/ws-mps-log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d
{
  for pass in 1 2 3; do
    rows "pass $pass a np2 mps" 2 /tmp/bench-a
    rows "pass $pass b np2 mps" 2 /tmp/bench-b
  done
  rows "pass 1 a np4 mps" 4 /tmp/bench-a
  rows "pass 1 b np4 mps" 4 /tmp/bench-b
} > "$out/rows.txt" 2>&1
echo quit | nvidia-cuda-mps-control; sleep 1
cat "$out/build.txt"
grep -E "^== |raw-|zerocopy|packed" "$out/rows.txt" | grep -v "^\[" |
  awk '/^==/{p=$3" "$4" "$5; next} {print p, $1, $2, $6, $7, $11}'
echo "rows done ($((SECONDS - start)) s)"
