#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 74 (2026-11-27, 2x H200): #30's moe30b FP8 refit rows over NCCL's network (socket)
# transport. WS_SHARE_GPU=1 gives every rank its own NCCL_HOSTID as on one GPU, but here rank r
# sits on GPU r, so each holds its own 61 GB model (two do not fit one GPU beside the references).
# Functional figures, not link figures. Predicted: fp8/bf16 refit ~0.52-0.56x (dense8b: 0.542x,
# run 63), wire 0.5x-0.55x of bf16 (moe30b's experts dominate its bytes).
#   bash benchmarks/results/2026-11-27/run74/run.sh OUT_DIR
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
    -DWEIGHTSYNC_WITH_CUDA=ON -DWEIGHTSYNC_WITH_NCCL=ON -DWEIGHTSYNC_BUILD_TESTS=OFF \
    -DWEIGHTSYNC_BUILD_BENCHMARKS=ON -DWEIGHTSYNC_BUILD_EXAMPLES=OFF -DWEIGHTSYNC_WERROR=ON > /dev/null
  cmake --build build/gpu -j "$(nproc)" --target weightsync_bench 2>&1 | grep -E "error|FAILED" | head
  echo "build rc=${PIPESTATUS[0]} ($((SECONDS - start)) s)"
} > "$out/build.txt" 2>&1
{
  WS_SHARE_GPU=1 timeout 420 build/gpu/benchmarks/weightsync_bench --np 2 --layout moe30b \
    --mode packed --fp8 --warmup 1 --iters 2 --json "$out/bench.jsonl" 2>&1 | grep -vE "^\["
  echo "fp8 refit moe30b rc=${PIPESTATUS[0]} ($((SECONDS - start)) s)"
} > "$out/fp8.txt" 2>&1
