#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 84 (2026-11-27, one GPU): two labs before changing code.
# gate_lab.cu (#32): the batched copy kernel against a copy-engine copy at lora8b, small1b and
#   dense8b sizes; a stream released by a host store into registered shm (cuStreamWaitValue32).
#   Predicted: kernel within +-5 % of the copy engine at >= 2 CTAs/SM; release 2-6 us.
# nccl_lab.cu (#25): one exchange's pieces on two ranks sharing the GPU (socket transport), MPS.
#   Predicted: allgather 8 KiB ~ broadcast 4 KiB (20-35 us); the exchange +10-20 us over it.
#   bash benchmarks/results/2026-11-27/run84/run.sh OUT_DIR
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
  nvcc -O3 -arch=sm_90 -std=c++20 gate_lab.cu -o /tmp/gate_lab -lcuda &
  nvcc -O3 -arch=sm_90 -std=c++20 nccl_lab.cu -o /tmp/nccl_lab -lnccl &
  wait
  [ -n "${LAB_SKIP_GATE:-}" ] || { echo "== gate_lab, no MPS"; timeout 120 /tmp/gate_lab; echo "rc=$?"; }
  [ -n "${LAB_SIZES:-}" ] || { echo "== nccl_lab, no MPS"; timeout 120 /tmp/nccl_lab; echo "rc=$?"; }
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/ws-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/ws-mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  if nvidia-cuda-mps-control -d; then
    echo "== nccl_lab, MPS"; timeout 120 /tmp/nccl_lab; echo "rc=$?"
    [ -n "${LAB_SIZES:-}" ] || { echo "== nccl_lab, MPS (again)"; timeout 120 /tmp/nccl_lab; echo "rc=$?"; }
    [ -n "${LAB_SKIP_GATE:-}" ] || { echo "== gate_lab, MPS"; timeout 120 /tmp/gate_lab; echo "rc=$?"; }
    echo quit | nvidia-cuda-mps-control; sleep 1
  fi
} > "$out/lab.txt" 2>&1
# Pass 3 (LAB_SIZES=1 LAB_SKIP_GATE=1): the all-gather's latency against its size, under MPS.
