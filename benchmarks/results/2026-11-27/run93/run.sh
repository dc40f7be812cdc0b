#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 93 (2026-11-27, one GPU). A = 2049634 (bench-old/, carried), B = this tree: the ipc consumer
# waits on its pull's end event (one event record less), the producer takes the byte count from
# the metadata cache and keeps its sources' vector; the bench prints each phase's median over
# the timed syncs, and the consumer's work ahead of the plan (its own checks, the last plan's
# copies) apart from its wait for the plan.
#   bash benchmarks/results/2026-11-27/run93/run.sh OUT_DIR     (about 5 minutes)
# Builds A's and B's weightsync_bench side by side (and B's tests, for the next call), then ipc
# tiny, lora8b, small1b, dense8b zerocopy, 30 iterations: without MPS (A, B), then under one MPS
# daemon three times (A, B, A, B, A, B).
# Predicted under MPS: B 2-5 us faster on tiny, lora8b and small1b (small1b +0.3-0.8 points of a
# copy, still short of 95 %); dense8b unchanged. Without MPS: no row slower than A beyond noise.
set -u
out=${1:?usage: run.sh OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
{
  date -u +"%Y-%m-%dT%H:%M:%SZ"
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader
  cmake -S bench-old -B build/old -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DWEIGHTSYNC_WITH_CUDA=ON -DWEIGHTSYNC_WITH_NCCL=ON -DWEIGHTSYNC_BUILD_TESTS=OFF \
    -DWEIGHTSYNC_BUILD_BENCHMARKS=ON -DWEIGHTSYNC_BUILD_EXAMPLES=OFF > /tmp/cfg-a.txt 2>&1 &&
    cmake --build build/old -j 4 --target weightsync_bench > /tmp/build-a.txt 2>&1 &
  pa=$!
  WS_CPU_TESTS=0 WS_SKIP_TESTS=1 WS_BENCH=none bash scripts/gpu-check.sh "$out/gpu-build" > /tmp/build-b.txt 2>&1
  echo "build B rc=$? ($((SECONDS - start)) s)"; tail -3 /tmp/build-b.txt
  wait $pa; echo "build A rc=$? ($((SECONDS - start)) s)"; tail -3 /tmp/build-a.txt
} > "$out/build.txt" 2>&1
cp build/old/benchmarks/weightsync_bench /tmp/bench-a 2> /dev/null || echo "no A bench" >> "$out/build.txt"
cp build/gpu/benchmarks/weightsync_bench /tmp/bench-b 2> /dev/null || echo "no B bench" >> "$out/build.txt"
rows() {  # $1 = label, $2 = versions
  for v in $2; do
    [ -x /tmp/bench-$v ] || continue
    echo "== $1 $v ipc"
    timeout 70 /tmp/bench-$v --backend ipc --layout tiny,lora8b,small1b,dense8b --mode zerocopy \
      --iters 30 --warmup 3 --json "$out/bench.jsonl" 2>&1 | grep -vE "^\[|^#  Rank"; echo "rc=${PIPESTATUS[0]}"
  done
}
{
  rows "no-MPS" "a b"
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/ws-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/ws-mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  if nvidia-cuda-mps-control -d; then
    rows "MPS" "a b"
    rows "MPS (again)" "a b"
    rows "MPS (third)" "a b"
    echo quit | nvidia-cuda-mps-control; sleep 2
  else
    echo "MPS daemon did not start"
  fi
  echo "rows done ($((SECONDS - start)) s)"
} > "$out/ab.txt" 2>&1
cat "$out/build.txt"
grep -E "^==|raw-copy|zerocopy|us:|rc=" "$out/ab.txt"
