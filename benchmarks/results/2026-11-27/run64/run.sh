#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 64 (2026-11-27, one H200), the landed tree: the GPU smoke tests of the benchmarks (run 63:
# shadow_bench fixed; the --delta announcement per round), the codec on dense8b on an H200 (#29's
# targets are H200 figures; run 62 ran on an H100), the ipc delta rows with the per-round
# announcement, then the tiny rows of run 63 again, A (98bf388, bench-old/) and B (this tree)
# alternated A B A B under one MPS daemon, to tell a difference from noise (run 63, one pass:
# ipc tiny 31.2 us A / 46.9 us B; nccl tiny 87.5 / 99.5 us with raw 26.8 / 34.7).
# Predicted: smoke 3 of 3; codec encode at 1 % 1.5-1.6 TB/s (H100 1.11 x the HBM ratio 1.43),
# apply at 1 % ~115 GB/s; ipc tiny A and B within each other's spread.
#   bash benchmarks/results/2026-11-27/run64/run.sh OUT_DIR
# Files (<= 8): build.txt, smoke.txt, codec.txt, delta.txt, ab.txt, bench.jsonl, summary.txt
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
    cmake --build build/old -j $((j / 2)) --target weightsync_bench > /tmp/build-a.txt 2>&1 &
  pa=$!
  cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DWEIGHTSYNC_WITH_CUDA=ON -DWEIGHTSYNC_WITH_NCCL=ON -DWEIGHTSYNC_BUILD_TESTS=ON \
    -DWEIGHTSYNC_BUILD_BENCHMARKS=ON -DWEIGHTSYNC_BUILD_EXAMPLES=OFF -DWEIGHTSYNC_WERROR=ON > /dev/null &&
    cmake --build build/gpu -j $((j / 2)) --target weightsync_bench shadow_bench delta_codec_bench
  echo "build B rc=$? ($((SECONDS - start)) s)"
  wait $pa; echo "build A rc=$? ($((SECONDS - start)) s)"; tail -3 /tmp/build-a.txt
} > "$out/build.txt" 2>&1
cp build/old/benchmarks/weightsync_bench /tmp/bench-a 2> /dev/null || echo "no A bench" >> "$out/build.txt"
cp build/gpu/benchmarks/weightsync_bench /tmp/bench-b
b=build/gpu/benchmarks
timeout 120 ctest --test-dir build/gpu -L bench --output-on-failure > "$out/smoke.txt" 2>&1
echo "smoke rc=$? ($((SECONDS - start)) s)" >> "$out/smoke.txt"
{
  timeout 50 $b/delta_codec_bench --layout dense8b --reps 5 --warmup 1 --json "$out/bench.jsonl"
  echo "codec rc=$?"
  timeout 25 $b/delta_codec_bench --layout dense8b --reps 5 --warmup 1 --sparse-writes sectors \
    --densities 0.001,0.01,0.03 --json "$out/bench.jsonl"
  echo "codec sectors rc=$? ($((SECONDS - start)) s)"
} > "$out/codec.txt" 2>&1
{
  timeout 60 $b/weightsync_bench --backend ipc --layout dense8b --mode packed,zerocopy \
    --iters 5 --warmup 2 --delta 0.001,0.01 --json "$out/bench.jsonl" 2>&1 | grep -vE "^\[|^#  Rank"
  echo "ipc delta rc=${PIPESTATUS[0]} ($((SECONDS - start)) s)"
} > "$out/delta.txt" 2>&1
{
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/ws-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/ws-mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d || echo "MPS daemon did not start"
  for i in 1 2; do
    for v in a b; do
      [ -x /tmp/bench-$v ] || continue
      echo "== MPS $v pass $i ipc"
      timeout 40 /tmp/bench-$v --backend ipc --layout tiny,lora8b --mode zerocopy --iters 100 \
        --warmup 10 --json "$out/bench.jsonl" 2>&1 | grep -vE "^\[|^#  Rank"; echo "rc=${PIPESTATUS[0]}"
      echo "== MPS $v pass $i nccl"
      timeout 40 /tmp/bench-$v --np 2 --layout tiny,tiny504 --mode zerocopy --iters 100 --warmup 10 \
        --json "$out/bench.jsonl" 2>&1 | grep -vE "^\[|^#  Rank"; echo "rc=${PIPESTATUS[0]}"
    done
  done
  echo quit | nvidia-cuda-mps-control
  echo "ab done ($((SECONDS - start)) s)"
} > "$out/ab.txt" 2>&1
{
  echo "=== run 64 ($((SECONDS - start)) s) ==="
  grep -E "rc=|H200|H100" "$out/build.txt" | head -4
  grep -E "tests passed|tests failed|\*\*\*|smoke rc" "$out/smoke.txt"
  echo "-- codec (density encode_total_us enc_GB/s apply_us app_GB/s #wrong)"
  grep -E "^# delta_codec_bench|^  +[0-9]" "$out/codec.txt" | awk '/^#/{print substr($0,1,150); next} {print $1, $8, $9, $10, $11, $12}'
  grep -E "rc=" "$out/codec.txt"
  grep -E "^ +[0-9]+ |delta [0-9.]+: payload|rc=" "$out/delta.txt" | cut -c1-250
  grep -E "^==|^ +[0-9]+ .*(raw|zerocopy)|rc=|MPS" "$out/ab.txt" | cut -c1-120
} | tee "$out/summary.txt"
