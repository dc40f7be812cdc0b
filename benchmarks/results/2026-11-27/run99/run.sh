#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 99 (2026-11-27, one GPU): the landed tree, in two calls on one warm machine.
#   bash benchmarks/results/2026-11-27/run99/run.sh OUT_DIR first    builds; ipc rows A/B; the
#                                                                    GPU suite but the slowest
#   bash benchmarks/results/2026-11-27/run99/run.sh OUT_DIR second   the slowest seven
# A = afc23b6 (bench-old/, carried), B = this tree: an ipc consumer times its pulls on one sync in
# 16 (one event record less on the others). Rows under MPS, A B alternated three times: ipc tiny,
# lora8b, small1b, dense8b zerocopy, 30 iterations; nccl --np 2 tiny zerocopy (shm barrier).
# Predicted: ipc tiny, lora8b and small1b 2-4 us faster in B (the record cost ~3 us in run 94's
# "enqueue" of 3 calls, 7.7-12 us); dense8b and nccl unchanged.
set -u
out=${1:?usage: run.sh OUT_DIR first|second}
what=${2:?usage: run.sh OUT_DIR first|second}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
slow="interop|full-size|back-to-back"  # (no spaces: WS_CTEST_ARGS is split on them)
if [ "$what" = first ]; then
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
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/ws-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/ws-mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d
  {
    for pass in 1 2 3; do
      for v in a b; do
        echo "== pass $pass $v ipc"
        timeout 70 /tmp/bench-$v --backend ipc --layout tiny,lora8b,small1b,dense8b --mode zerocopy \
          --iters 30 --warmup 3 --json "$out/bench.jsonl" 2>&1 | grep -vE "^\[|^#  Rank"
        echo "== pass $pass $v nccl"
        timeout 60 /tmp/bench-$v --np 2 --layout tiny --mode zerocopy --iters 100 --warmup 10 \
          --barrier shm --json "$out/bench.jsonl" 2>&1 | grep -E "raw-nccl|zerocopy|host us"
      done
    done
  } > "$out/rows.txt" 2>&1
  echo quit | nvidia-cuda-mps-control; sleep 1
  WS_CPU_TESTS=0 WS_BENCH=none WS_CTEST_ARGS="-E $slow" bash scripts/gpu-check.sh "$out/gpu" > "$out/gpu-check.txt" 2>&1
  echo "gpu-check rc=$? ($((SECONDS - start)) s)" >> "$out/gpu-check.txt"
  cat "$out/build.txt"
  grep -E "^== |raw-|zerocopy" "$out/rows.txt" | grep -v "^\[" | awk '/^==/{p=$3" "$4" "$5; next} {print p, $1, $6, $7, $11}'
  tail -8 "$out/gpu-check.txt"
else
  WS_CPU_TESTS=0 WS_BENCH=none WS_CTEST_ARGS="-R $slow" bash scripts/gpu-check.sh "$out/gpu" > "$out/gpu-check.txt" 2>&1
  echo "gpu-check rc=$? ($((SECONDS - start)) s)" >> "$out/gpu-check.txt"
  tail -12 "$out/gpu-check.txt"
fi
