#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 135 (2026-11-28, one GPU): the ipc consumer relaunches its last pull (Puller::enqueue_again).
# A = 50340ae's library with this tree's benchmarks/ (bench-old/, carried), B = this tree.
# --paired ipc rows under MPS, tiny and tiny504, passes alternating A, B (three each); then the
# ipc GPU tests on B.
#   bash benchmarks/results/2026-11-28/run135/run.sh OUT_DIR
# Predicted: tiny504's consumer enqueue from 14-18 us to 6-9 us, its row 5-9 us faster, its extra
# over raw-ipc from 10.6-21.3 us to 4-14 us; tiny unchanged (one piece: no batch).
set -u
out=${1:?usage: run.sh OUT_DIR}
mkdir -p "$out"; out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
WS_CPU_TESTS=0 WS_SKIP_TESTS=1 WS_BENCH=none \
  WS_BUILD_TARGETS="weightsync_bench weightsync_gpu_tests" \
  bash scripts/gpu-check.sh "$out/gpu" > "$out/build.txt" 2>&1
echo "build rc=$? ($((SECONDS - start)) s)" >> "$out/build.txt"
tail -1 "$out/build.txt"
(cd bench-old && cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DWEIGHTSYNC_WITH_CUDA=ON -DWEIGHTSYNC_WITH_NCCL=ON -DWEIGHTSYNC_BUILD_TESTS=OFF \
  -DWEIGHTSYNC_BUILD_BENCHMARKS=ON -DWEIGHTSYNC_BUILD_GPU_TESTS=ON -DWEIGHTSYNC_BUILD_EXAMPLES=OFF > /dev/null &&
  cmake --build build -j "$(nproc)" --target weightsync_bench > "$out/build-old.txt" 2>&1)
echo "old build rc=$? ($((SECONDS - start)) s)" | tee -a "$out/build.txt"
export CUDA_MPS_PIPE_DIRECTORY=/tmp/ws-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/ws-mps-log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d
{
  for pass in 1 2 3; do
    for t in A B; do
      b=build/gpu/benchmarks/weightsync_bench
      [ $t = A ] && b=bench-old/build/benchmarks/weightsync_bench
      echo "== ipc pass $pass $t"
      timeout 100 $b --backend ipc --layout tiny,tiny504 --mode zerocopy --iters 100 --warmup 10 \
        --paired --json "$out/bench-$t.jsonl" 2>&1 | grep -vE "^\[|^#  Rank"
    done
  done
} > "$out/rows.txt" 2>&1
echo "rows done ($((SECONDS - start)) s)" >> "$out/rows.txt"
grep -E "^== |raw-ipc|zerocopy|paired with|consumer us|rows done" "$out/rows.txt" | cut -c1-200
echo quit | nvidia-cuda-mps-control; sleep 1
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
WS_CPU_TESTS=0 WS_BENCH=none WS_CTEST_ARGS="-R ipc" \
  WS_BUILD_TARGETS="weightsync_bench weightsync_gpu_tests" \
  bash scripts/gpu-check.sh "$out/gpu" > "$out/gpu-check.txt" 2>&1
echo "gpu-check rc=$? ($((SECONDS - start)) s)" >> "$out/gpu-check.txt"
tail -8 "$out/gpu-check.txt"
