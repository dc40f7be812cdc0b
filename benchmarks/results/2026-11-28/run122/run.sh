#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 122 (2026-11-28): repeated eager syncs relaunch their pack and copy out (RepeatedBatch).
# A = 9440b1a (bench-old/, carried), B = this tree.
#   bash benchmarks/results/2026-11-28/run122/run.sh OUT_DIR one
#     one GPU, ranks sharing it: builds B and A's bench, runs the GPU suite but the slowest
#     seven, then under MPS NCCL --np 2 tiny and tiny504, A B A B, and one traced pass of B.
#   bash benchmarks/results/2026-11-28/run122/run.sh OUT_DIR nvlink
#     two GPUs: builds both benches, then NCCL over NVLink tiny and tiny504, A B A B, B with the
#     exchange on the device (WEIGHTSYNC_EXCHANGE=device), exchange_probe (the wire shapes' GPU
#     work with no protocol), and one traced pass of B.
# Predicted: B's tiny504 20-26 us faster than A's on both (NVLink 88.8 -> 60-68 us; shared GPU
# under MPS 127.6 -> 100-110 us); tiny unchanged (one tensor: no table, no relaunch).
set -u
out=${1:?usage: run.sh OUT_DIR one|nvlink}
what=${2:?usage: run.sh OUT_DIR one|nvlink}
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
a=build/old/benchmarks/weightsync_bench
b=build/gpu/benchmarks/weightsync_bench
build_a() {
  cmake -S bench-old -B build/old -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DWEIGHTSYNC_WITH_CUDA=ON -DWEIGHTSYNC_WITH_NCCL=ON -DWEIGHTSYNC_BUILD_TESTS=OFF \
    -DWEIGHTSYNC_BUILD_BENCHMARKS=ON -DWEIGHTSYNC_BUILD_EXAMPLES=OFF > "$out/build-a.txt" 2>&1 &&
    cmake --build build/old -j 6 --target weightsync_bench >> "$out/build-a.txt" 2>&1
  echo "build A rc=$? ($((SECONDS - start)) s)" >> "$out/build-a.txt"
}
rows() {  # $1: label, $2: bench, then extra flags
  local label=$1 bench=$2; shift 2
  echo "== $label"
  timeout 100 $bench --np 2 --layout tiny,tiny504 --mode zerocopy --iters 100 --warmup 10 \
    --barrier shm --json "$out/bench.jsonl" "$@" 2>&1 | grep -E "^# (mps|ranks)|layout:|raw-|zerocopy"
}
trace() {
  WEIGHTSYNC_TRACE=phases timeout 100 $b --np 2 --layout tiny,tiny504 --mode zerocopy --iters 30 \
    --warmup 5 --barrier shm 2>&1 | grep -E "layout:|raw-nccl|zerocopy|trace" | grep -v "^\[" |
    awk '/trace/{n[$4 $5 $6]++; if (n[$4 $5 $6] % 10 == 0) print; next} {print}' > "$out/trace.txt"
}
if [ "$what" = one ]; then
  build_a &
  WS_CPU_TESTS=0 WS_BENCH=none WS_CTEST_ARGS="-E $slow" bash scripts/gpu-check.sh "$out/gpu" > "$out/gpu-check.txt" 2>&1
  echo "gpu-check rc=$? ($((SECONDS - start)) s)" >> "$out/gpu-check.txt"
  wait; tail -1 "$out/build-a.txt"
  mps_on
  { rows "a mps" $a; rows "b mps" $b; rows "a mps" $a; rows "b mps" $b; } > "$out/rows.txt" 2>&1
  trace
  mps_off
  grep -E "Test +#.*(Failed|\*\*\*)" "$out/gpu-check.txt" | head
  tail -n 8 "$out/gpu-check.txt"
else
  build_a &
  WS_CPU_TESTS=0 WS_BENCH=none WS_SKIP_TESTS=1 WS_BUILD_TARGETS="weightsync_bench exchange_probe" bash scripts/gpu-check.sh "$out/gpu" > "$out/gpu-check.txt" 2>&1
  echo "build B rc=$? ($((SECONDS - start)) s)" >> "$out/gpu-check.txt"
  wait; tail -1 "$out/build-a.txt"; tail -1 "$out/gpu-check.txt"
  {
    rows "a nvlink" $a; rows "b nvlink" $b; rows "a nvlink" $a; rows "b nvlink" $b
    WEIGHTSYNC_EXCHANGE=device rows "b nvlink exchange=device" $b
    WEIGHTSYNC_EXCHANGE=device rows "a nvlink exchange=device" $a
    echo "== exchange_probe nvlink (one rank per GPU)"
    for r in 0 1; do
      timeout 120 build/gpu/benchmarks/exchange_probe --rank $r --np 2 --port 29611 --iters 200 --warmup 20 &
    done
    wait
  } > "$out/rows.txt" 2>&1
  trace
fi
echo "done ($((SECONDS - start)) s)" >> "$out/rows.txt"
grep -vE "^\[|^# " "$out/rows.txt" | cut -c1-140
cut -c1-240 "$out/trace.txt"
