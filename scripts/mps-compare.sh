#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Runs weightsync_bench twice in one go on a GPU machine: without MPS, then under an MPS control
# daemon started here (nvidia-cuda-mps-control -d; no GPU setting is changed) and stopped after.
# Processes sharing a GPU run in time slices without MPS, side by side with it.
#   bash scripts/mps-compare.sh BENCH_BINARY [bench args...]
set -uo pipefail
bench=$1; shift
export NCCL_NVLS_ENABLE=0
echo "== without MPS"
"$bench" "$@"
rc=$?
if ! command -v nvidia-cuda-mps-control >/dev/null; then
  echo "== no nvidia-cuda-mps-control on this machine: MPS rows not run"
  exit $rc
fi
export CUDA_MPS_PIPE_DIRECTORY=/tmp/ws-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/ws-mps-log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d || { echo "== the MPS daemon did not start"; exit 1; }
trap 'echo quit | nvidia-cuda-mps-control' EXIT
echo "== under MPS ($CUDA_MPS_PIPE_DIRECTORY)"
"$bench" "$@" || rc=1
exit $rc
