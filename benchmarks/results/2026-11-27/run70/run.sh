#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 70 (2026-11-27, one GPU): the kernel labs fp8_lab.cu and delta_lab.cu (variants against the
# library's kernels, outputs compared with them).
# Predicted: fp8 block-128 persistent+prefetch 2.2-2.5 TB/s on embed (library 1.97), roofline
# ~2.6 TB/s of input; delta measure: U8 or persistent -10-20 % against the library; 64/128-byte
# reference granules slower at 1-3 % (more bytes written); scatter floor at 1 % >= 1.5 ms.
#   bash benchmarks/results/2026-11-27/run70/run.sh OUT_DIR
set -u
out=${1:?usage: run.sh OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
export NCCL_NVLS_ENABLE=0
cd "$here"
{
  date -u +"%Y-%m-%dT%H:%M:%SZ"
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader
  nvcc -O3 -arch=sm_90 -std=c++17 fp8_lab.cu -o /tmp/fp8_lab &
  nvcc -O3 -arch=sm_90 -std=c++17 delta_lab.cu -o /tmp/delta_lab &
  wait
  timeout 120 /tmp/fp8_lab
  echo "fp8_lab rc=$?"
  timeout 240 /tmp/delta_lab
  echo "delta_lab rc=$?"
} > "$out/lab.txt" 2>&1
