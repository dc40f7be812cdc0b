#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 73 (2026-11-27, one GPU): a whole bf16 tensor takes ws_fp8_block_bf16's plain path (run 70's
# variant B's addressing). Predicted: q_proj 1839 -> ~2200 GB/s, gate/down ~2300, embed ~2480;
# run 72's lab (run72/fp8_lab.cu, which now includes this kernel) says whether the library kernel
# matches variant B. Then the fp8 GPU tests.
#   bash benchmarks/results/2026-11-27/run73/run.sh OUT_DIR
set -u
out=${1:?usage: run.sh OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
{
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader
  nvcc -O3 -arch=sm_90 -std=c++17 benchmarks/results/2026-11-27/run72/fp8_lab.cu -o /tmp/fp8_lab &
  cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DWEIGHTSYNC_WITH_CUDA=ON -DWEIGHTSYNC_WITH_NCCL=ON -DWEIGHTSYNC_BUILD_TESTS=ON \
    -DWEIGHTSYNC_BUILD_BENCHMARKS=ON -DWEIGHTSYNC_BUILD_EXAMPLES=OFF -DWEIGHTSYNC_WERROR=ON > /dev/null
  cmake --build build/gpu -j 14 --target fp8_quantize_bench weightsync_gpu_tests weightsync_nccl_tests 2>&1 | grep -E "error|FAILED" | head
  echo "build rc=${PIPESTATUS[0]}"
  wait
  timeout 60 /tmp/fp8_lab
  timeout 60 build/gpu/benchmarks/fp8_quantize_bench --reps 20 --trials 7 --json "$out/bench.jsonl" | grep -E "block128|check|#"
  echo "fp8 ($((SECONDS - start)) s)"
  ctest --test-dir build/gpu -L gpu -R "fp8" --output-on-failure --timeout 200 2>&1 | tail -12
  echo "tests ($((SECONDS - start)) s)"
} > "$out/fp8.txt" 2>&1
