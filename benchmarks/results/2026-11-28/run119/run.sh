#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 119 (2026-11-28, one GPU): this tree's whole GPU suite with ranks sharing the GPU, and #32's
# rows with and without MPS, in two calls on one warm machine:
#   bash benchmarks/results/2026-11-28/run119/run.sh OUT_DIR tests
#     builds B (this tree) and A's bench (db01029, #32's baseline; bench-old/, carried), runs the
#     GPU suite but the slowest seven, then one traced pass of NCCL tiny and tiny504 (shared GPU,
#     MPS) that also prints the copy tables' counts, and NCCL --np 2 and --np 4 tiny, tiny504
#     under MPS (B).
#   bash benchmarks/results/2026-11-28/run119/run.sh OUT_DIR slow
#     the slowest seven (full-size, 100 back-to-back, the five interop tests), then ipc zerocopy
#     (30 iterations): A lora8b, small1b, dense8b; B tiny, tiny504, lora8b, small1b, dense8b;
#     without MPS, then with it.
# Predicted (#32, under MPS): lora8b <= 120 us, small1b >= 95 % and dense8b >= 97 % of a copy;
# without MPS B no slower than A (db01029: lora8b ~450 us, small1b ~60 %).
set -u
out=${1:?usage: run.sh OUT_DIR tests|slow}
what=${2:?usage: run.sh OUT_DIR tests|slow}
mkdir -p "$out"; out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
slow="interop|full-size|back-to-back"  # (no spaces: WS_CTEST_ARGS is split on them)
mps_on() {
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/ws-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/ws-mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d
}
mps_off() { echo quit | nvidia-cuda-mps-control; sleep 1; unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY; }
b=build/gpu/benchmarks/weightsync_bench
if [ "$what" = tests ]; then
  (cmake -S bench-old -B build/old -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
     -DWEIGHTSYNC_WITH_CUDA=ON -DWEIGHTSYNC_WITH_NCCL=ON -DWEIGHTSYNC_BUILD_TESTS=OFF \
     -DWEIGHTSYNC_BUILD_BENCHMARKS=ON -DWEIGHTSYNC_BUILD_EXAMPLES=OFF > "$out/build-a.txt" 2>&1 &&
   cmake --build build/old -j 4 --target weightsync_bench >> "$out/build-a.txt" 2>&1
   echo "build A rc=$? ($((SECONDS - start)) s)" >> "$out/build-a.txt") &
  WS_CPU_TESTS=0 WS_BENCH=none WS_CTEST_ARGS="-E $slow" bash scripts/gpu-check.sh "$out/gpu" > "$out/gpu-check-tests.txt" 2>&1
  echo "gpu-check rc=$? ($((SECONDS - start)) s)" >> "$out/gpu-check-tests.txt"
  wait; tail -1 "$out/build-a.txt"
  mps_on
  WEIGHTSYNC_TRACE=phases timeout 100 $b --np 2 --layout tiny,tiny504 --mode zerocopy --iters 30 \
    --warmup 5 --barrier shm 2>&1 | grep -E "layout:|raw-nccl|zerocopy|trace" | grep -v "^\[" |
    awk '/trace/{n[$4 $5]++; if (n[$4 $5] % 10 == 0) print; next} {print}' > "$out/trace.txt"
  {
    for np in 2 4; do
      echo "== b nccl np$np mps-on"
      timeout 100 $b --np $np --layout tiny,tiny504 --mode zerocopy --iters 100 --warmup 10 --barrier shm \
        --json "$out/bench.jsonl" 2>&1 | grep -E "^# (mps|ranks)|layout:|raw-|zerocopy"
    done
  } > "$out/nccl-rows.txt" 2>&1
  mps_off
  grep -E "BUILD|build ok|Test +#.*(Failed|\*\*\*)" "$out/gpu-check-tests.txt" | head
  tail -n 6 "$out/gpu-check-tests.txt"
  cut -c1-220 "$out/trace.txt"
  grep -E "^== |raw-|zerocopy" "$out/nccl-rows.txt" | cut -c1-110
  exit 0
fi
WS_CPU_TESTS=0 WS_BENCH=none WS_SKIP_TESTS=0 WS_CTEST_ARGS="-R $slow" bash scripts/gpu-check.sh "$out/gpu-slow" > "$out/gpu-check-slow.txt" 2>&1
echo "gpu-check rc=$? ($((SECONDS - start)) s)" >> "$out/gpu-check-slow.txt"
grep -E "NOT RUN|Test +#" "$out/gpu-check-slow.txt" | head -20
tail -n 4 "$out/gpu-check-slow.txt"
ipc() {  # $1: label, $2: layouts, then the bench
  local label=$1 layouts=$2; shift 2
  echo "== $label"
  timeout 120 "$@" --backend ipc --layout "$layouts" --mode zerocopy --iters 30 --warmup 3 \
    --json "$out/bench.jsonl" 2>&1 | grep -vE "^\[|^#  Rank"
}
{
  for mps in off on; do
    [ $mps = on ] && mps_on
    ipc "a ipc mps-$mps" lora8b,small1b,dense8b build/old/benchmarks/weightsync_bench
    ipc "b ipc mps-$mps" tiny,tiny504,lora8b,small1b,dense8b $b
  done
  mps_off
} > "$out/rows.txt" 2>&1
echo "done ($((SECONDS - start)) s)" >> "$out/rows.txt"
grep -E "^== |^# mps|raw-|zerocopy|done" "$out/rows.txt" | awk '{print $1, $2, $3, $4, $6, $7, $10, $11}' | cut -c1-150
