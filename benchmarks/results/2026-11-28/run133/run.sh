#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 133 (2026-11-28, one GPU, ranks sharing it): the landing library (the pipeline's
# SealedMetadata overloads; the bench now seals every backend's list). --paired rows under MPS, two
# passes each of ipc (against raw-ipc) and NCCL --np 2 (against raw-nccl), tiny and tiny504, and
# one NCCL pass with --metadata span; then scripts/gpu-check.sh with every GPU test but the
# slowest seven.
#   bash benchmarks/results/2026-11-28/run133/run.sh OUT_DIR
# Predicted: NCCL tiny504 1-3 us less extra than run 131 with a sealed list (the producer's pass
# over 504 tensors off its critical path), tiny and ipc unchanged; tests all pass but the three
# that need two devices.
set -u
out=${1:?usage: run.sh OUT_DIR}
mkdir -p "$out"; out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
slow="interop|full-size|back-to-back"  # (no spaces: WS_CTEST_ARGS is split on them)
WS_CPU_TESTS=0 WS_SKIP_TESTS=1 WS_BENCH=none bash scripts/gpu-check.sh "$out/gpu" > "$out/build.txt" 2>&1
echo "build rc=$? ($((SECONDS - start)) s)" >> "$out/build.txt"
tail -1 "$out/build.txt"
b=build/gpu/benchmarks/weightsync_bench
export CUDA_MPS_PIPE_DIRECTORY=/tmp/ws-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/ws-mps-log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d
{
  for pass in 1 2; do
    echo "== ipc pass $pass"
    timeout 100 $b --backend ipc --layout tiny,tiny504 --mode zerocopy --iters 100 --warmup 10 \
      --paired --json "$out/bench.jsonl" 2>&1 | grep -vE "^\[|^#  Rank"
    echo "== nccl np2 pass $pass"
    timeout 100 $b --np 2 --layout tiny,tiny504 --mode zerocopy --iters 100 --warmup 10 \
      --barrier shm --paired --json "$out/bench.jsonl" 2>&1 | grep -vE "^\[|^#  Rank"
  done
  echo "== nccl np2 span"
  timeout 100 $b --np 2 --layout tiny,tiny504 --mode zerocopy --iters 100 --warmup 10 \
    --barrier shm --paired --metadata span --json "$out/bench.jsonl" 2>&1 | grep -vE "^\[|^#  Rank"
} > "$out/rows.txt" 2>&1
echo quit | nvidia-cuda-mps-control; sleep 1
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
echo "rows done ($((SECONDS - start)) s)" >> "$out/rows.txt"
grep -E "^== |raw-|zerocopy|paired with|rows done" "$out/rows.txt" | cut -c1-200
WS_CPU_TESTS=0 WS_BENCH=none WS_CTEST_ARGS="-E $slow" bash scripts/gpu-check.sh "$out/gpu" > "$out/gpu-check.txt" 2>&1
echo "gpu-check rc=$? ($((SECONDS - start)) s)" >> "$out/gpu-check.txt"
tail -5 "$out/gpu-check.txt"
