#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 102 (2026-11-27, one GPU): the landed tree, in two calls on one warm machine.
#   bash benchmarks/results/2026-11-27/run102/run.sh OUT_DIR first    builds; the rows below; the
#                                                                     GPU suite but the slowest
#   bash benchmarks/results/2026-11-27/run102/run.sh OUT_DIR second   the slowest seven
# A = 0bf4d4f (bench-old/, carried), B = this tree. Under MPS, three passes of: A; B (sealed
# metadata, the default); B --metadata span; ipc tiny, lora8b, small1b, dense8b zerocopy, 30
# iterations; then nccl --np 2 tiny and tiny504 zerocopy (B, shm barrier, 100 iterations), two
# passes. Then one pass of A and B without MPS.
# Predicted (against run 101's B): the consumer's "plan" phase ~1 us less (a reused plan is no
# longer copied), small1b at or over 95 % of the copy in most B passes; lora8b at most 120 us;
# dense8b at least 97 %; without MPS no row slower than A.
set -u
out=${1:?usage: run.sh OUT_DIR first|second}
what=${2:?usage: run.sh OUT_DIR first|second}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
slow="interop|full-size|back-to-back"  # (no spaces: WS_CTEST_ARGS is split on them)
if [ "$what" = second ]; then
  WS_CPU_TESTS=0 WS_BENCH=none WS_CTEST_ARGS="-R $slow" bash scripts/gpu-check.sh "$out/gpu" > "$out/gpu-check-second.txt" 2>&1
  echo "gpu-check rc=$? ($((SECONDS - start)) s)" >> "$out/gpu-check-second.txt"
  tail -12 "$out/gpu-check-second.txt"
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
rows() {  # $1: label, then the bench and its extra arguments
  local label=$1; shift
  echo "== $label"
  timeout 90 "$@" --backend ipc --layout tiny,lora8b,small1b,dense8b --mode zerocopy \
    --iters 30 --warmup 3 --json "$out/bench.jsonl" 2>&1 | grep -vE "^\[|^#  Rank"
}
export CUDA_MPS_PIPE_DIRECTORY=/tmp/ws-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/ws-mps-log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d
{
  for pass in 1 2 3; do
    rows "pass $pass a mps" /tmp/bench-a
    rows "pass $pass b-sealed mps" /tmp/bench-b
    rows "pass $pass b-span mps" /tmp/bench-b --metadata span
  done
  for pass in 1 2; do
    echo "== pass $pass b-nccl mps"
    timeout 90 /tmp/bench-b --np 2 --layout tiny,tiny504 --mode zerocopy --iters 100 --warmup 10 \
      --barrier shm --json "$out/bench.jsonl" 2>&1 | grep -E "layout:|raw-nccl|zerocopy|host us"
  done
} > "$out/rows.txt" 2>&1
echo quit | nvidia-cuda-mps-control; sleep 1
{
  rows "pass 1 a no-mps" /tmp/bench-a
  rows "pass 1 b-sealed no-mps" /tmp/bench-b
} >> "$out/rows.txt" 2>&1
WS_CPU_TESTS=0 WS_BENCH=none WS_CTEST_ARGS="-E $slow" bash scripts/gpu-check.sh "$out/gpu" > "$out/gpu-check.txt" 2>&1
echo "gpu-check rc=$? ($((SECONDS - start)) s)" >> "$out/gpu-check.txt"
cat "$out/build.txt"
grep -E "^== |raw-|zerocopy" "$out/rows.txt" | grep -v "^\[" |
  awk '/^==/{p=$3" "$4" "$5; next} {print p, $1, $2, $6, $7, $11}'
tail -5 "$out/gpu-check.txt"
