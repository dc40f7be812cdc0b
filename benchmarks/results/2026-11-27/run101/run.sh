#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 101 (2026-11-27, one GPU): SealedMetadata, in two calls on one warm machine.
#   bash benchmarks/results/2026-11-27/run101/run.sh OUT_DIR rows    builds; the rows below
#   bash benchmarks/results/2026-11-27/run101/run.sh OUT_DIR tests   every ipc and p2p GPU test
# A = 0bf4d4f (bench-old/, carried), B = this tree. Under MPS, three passes of: A; B --metadata
# span; B --metadata sealed (the default); ipc tiny, lora8b, small1b, dense8b zerocopy, 30
# iterations. Then one pass of A and B (sealed) without MPS. Then every ipc GPU test.
# Predicted:
#   B span against A: "place" 1-2 us less on lora8b / small1b (the sources compared while they
#     are collected; one driver call per allocation instead of two); "check" unchanged.
#   B sealed against B span: "check" 6-11 us less on lora8b and small1b (no pass over 310-504
#     names and shapes), ~0 on tiny; small1b's time 7-12 us less: at least 95 % of the copy in
#     most passes; dense8b unchanged. Without MPS no row slower than A.
set -u
out=${1:?usage: run.sh OUT_DIR rows|tests}
what=${2:?usage: run.sh OUT_DIR rows|tests}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
if [ "$what" = tests ]; then
  WS_CPU_TESTS=0 WS_BENCH=none WS_CTEST_ARGS="-R ipc|p2p" bash scripts/gpu-check.sh "$out/gpu" > "$out/gpu-check.txt" 2>&1
  echo "gpu-check rc=$? ($((SECONDS - start)) s)" >> "$out/gpu-check.txt"
  tail -12 "$out/gpu-check.txt"
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
    rows "pass $pass b-span mps" /tmp/bench-b --metadata span
    rows "pass $pass b-sealed mps" /tmp/bench-b
  done
} > "$out/rows.txt" 2>&1
echo quit | nvidia-cuda-mps-control; sleep 1
{
  rows "pass 1 a no-mps" /tmp/bench-a
  rows "pass 1 b-sealed no-mps" /tmp/bench-b
} >> "$out/rows.txt" 2>&1
cat "$out/build.txt"
grep -E "^== |raw-|zerocopy|producer us|consumer us" "$out/rows.txt" | grep -v "^\[" |
  awk '/^==/{p=$3" "$4" "$5; next} /producer us/{print "   ", $0; next} /consumer us/{print "   ", $0; next} {print p, $1, $6, $7, $11}'
