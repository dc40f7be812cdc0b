#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 75 (2026-11-27, one GPU): #30's FP8 refit over ipc. Fp8SourceOptions::whole quantizes every
# chosen tensor into one arena (a whole FP8 copy: ipc pulls every tensor at once), then the
# consumer pulls. Predicted on an H200: bf16 zerocopy ~8.1 ms; FP8 ~6.3 ms of quantize (13.9 GB
# at ~2.2 TB/s, before the pull) + ~4.7 ms of pull (9.44 GB) = ~11 ms, i.e. ~1.35x the bf16 row:
# over ipc the quantize costs more than the halved bytes save. Then the bench smoke tests.
# The first calls (first/) measured 27.8 ms: a synchronization after every tensor's quantize.
# This call measures whole_pass (batched launches, one synchronization): predicted ~11-12 ms.
#   bash benchmarks/results/2026-11-27/run75/run.sh OUT_DIR
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
  cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DWEIGHTSYNC_WITH_CUDA=ON -DWEIGHTSYNC_WITH_NCCL=ON -DWEIGHTSYNC_BUILD_TESTS=ON \
    -DWEIGHTSYNC_BUILD_BENCHMARKS=ON -DWEIGHTSYNC_BUILD_EXAMPLES=OFF -DWEIGHTSYNC_WERROR=ON > /dev/null
  cmake --build build/gpu -j "$(nproc)" --target weightsync_bench shadow_bench 2>&1 | grep -E "error|FAILED" | head
  echo "build rc=${PIPESTATUS[0]} ($((SECONDS - start)) s)"
} > "$out/build.txt" 2>&1
{
  timeout 120 build/gpu/benchmarks/weightsync_bench --backend ipc --layout small1b,dense8b \
    --mode zerocopy --iters 7 --warmup 2 --fp8 --json "$out/bench.jsonl" 2>&1 | grep -vE "^\[|^#  Rank"
  echo "ipc fp8 rc=${PIPESTATUS[0]} ($((SECONDS - start)) s)"
  ctest --test-dir build/gpu -L bench --output-on-failure --timeout 200 2>&1 | tail -8
  echo "smoke ($((SECONDS - start)) s)"
} > "$out/fp8.txt" 2>&1
