#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 103 (2026-11-27, one GPU): the ipc consumer keeps each tensor's byte count, in one call.
#   bash benchmarks/results/2026-11-27/run103/run.sh OUT_DIR
# A = 7323fff (run 102's tree; bench-old/, carried), B = this tree. Under MPS, three passes of A
# and B (sealed metadata, the default): ipc tiny, lora8b, small1b, dense8b zerocopy, 30
# iterations. Then every ipc and p2p GPU test on B.
# Predicted: the consumer's "ahead" 3-5 us less on lora8b and small1b (no shape read per tensor
# in its copies of the last plan); that phase was 1-4 us longer than the producer's work before
# its post in run 102, so small1b 1-4 us faster; tiny and dense8b unchanged.
set -u
out=${1:?usage: run.sh OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
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
    rows "pass $pass b mps" /tmp/bench-b
  done
} > "$out/rows.txt" 2>&1
echo quit | nvidia-cuda-mps-control; sleep 1
WS_CPU_TESTS=0 WS_BENCH=none WS_CTEST_ARGS="-R ipc|p2p" bash scripts/gpu-check.sh "$out/gpu" > "$out/gpu-check.txt" 2>&1
echo "gpu-check rc=$? ($((SECONDS - start)) s)" >> "$out/gpu-check.txt"
cat "$out/build.txt"
grep -E "^== |raw-|zerocopy" "$out/rows.txt" | grep -v "^\[" |
  awk '/^==/{p=$3" "$4" "$5; next} {print p, $1, $2, $6, $7, $11}'
awk '/^== /{p=$3" "$4} /layout: /{l=$3} /producer us|consumer us/{print p, l, $0}' "$out/rows.txt" |
  grep -E "small1b|lora8b" | sed 's/(median of 30)//; s/; control shm//'
tail -5 "$out/gpu-check.txt"
