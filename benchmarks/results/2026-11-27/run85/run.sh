#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 85 (2026-11-27, one GPU). A = b614f9b (bench-old/, carried), B = this tree: eager blocks of
# at most a frame and 4 KiB (protocol 7), the ipc mailbox spinning 2 ms and waking only sleepers.
#   bash benchmarks/results/2026-11-27/run85/run.sh OUT_DIR     (about 5 minutes)
# 1. build A's and B's weightsync_bench side by side, and B's GPU tests (run by the next call).
# 2. without MPS (A, B), then under one MPS daemon twice (A, B, A, B): ipc tiny, lora8b, small1b,
#    dense8b zerocopy (30 iterations); nccl --np 2 (one GPU, socket transport) tiny, tiny504
#    zerocopy (100 iterations).
# Predicted under MPS: nccl tiny 20-25 us faster in B (its exchange 8192 -> 4352 bytes a rank:
# run 84 measured 52-57 -> 35 us), an extra over raw of 30-50 us (target: one raw latency,
# ~30 us); tiny504 unchanged (not eager). ipc lora8b and small1b 8-12 us faster (the producer's
# outcome wake), small1b ~92-93 % of a copy (target 95: still missed); dense8b unchanged.
# Without MPS: no row slower than A beyond noise.
set -u
out=${1:?usage: run.sh OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
j=$(nproc)
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
    echo "== $1 $v nccl"
    timeout 60 /tmp/bench-$v --np 2 --layout tiny,tiny504 --mode zerocopy --iters $3 --warmup 5 \
      --json "$out/bench.jsonl" 2>&1 | grep -vE "^\[|^#  Rank"; echo "rc=${PIPESTATUS[0]}"
  done
}
{
  rows "no-MPS" "a b" 30
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/ws-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/ws-mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  if nvidia-cuda-mps-control -d; then
    rows "MPS" "a b" 100
    rows "MPS (again)" "a b" 100
    echo quit | nvidia-cuda-mps-control; sleep 2
  else
    echo "MPS daemon did not start"
  fi
  echo "rows done ($((SECONDS - start)) s)"
} > "$out/ab.txt" 2>&1
