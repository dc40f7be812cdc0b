#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 91 (2026-11-27, one GPU, under MPS): xchg_lab.cu, the floor of one eager 4 KiB sync over
# NCCL's socket transport on two ranks sharing the GPU (see the file's head for the cases).
# Predicted (events, max over ranks): R 20-25 us; A 30-35; X 55-65 (the bench's tiny row is
# 68-72); G 3-6 us under X; H 6-10 us under X; H1 5 us under H.
#   bash benchmarks/results/2026-11-27/run91/run.sh OUT_DIR
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
  nvcc -O3 -arch=sm_90 -std=c++20 xchg_lab.cu -o /tmp/xchg_lab -lnccl
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/ws-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/ws-mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  if nvidia-cuda-mps-control -d; then
    for pass in 1 2 3; do echo "== xchg_lab, MPS, pass $pass"; timeout 150 /tmp/xchg_lab; echo "rc=$?"; done
    echo quit | nvidia-cuda-mps-control; sleep 1
  fi
} > "$out/lab.txt" 2>&1
cat "$out/lab.txt"
