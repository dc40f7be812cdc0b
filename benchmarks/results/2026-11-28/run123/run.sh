#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 123 (2026-11-28, one GPU, ranks sharing it): on the tree to land, the slowest seven tests
# (full-size, 100 back-to-back, the five interop tests) and every test of the copy tables and of
# eager syncs (the relaunch's own among them), then one traced tiny504 pass under MPS that shows
# the relaunch counts.
#   bash benchmarks/results/2026-11-28/run123/run.sh OUT_DIR
# Predicted: all pass; the trace's copy-table line counts every sync after the first as repeated.
set -u
out=${1:?usage: run.sh OUT_DIR}
mkdir -p "$out"; out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
sel="interop|full-size|back-to-back|eager|descriptor"  # (no spaces: WS_CTEST_ARGS is split on them)
WS_CPU_TESTS=0 WS_BENCH=none WS_CTEST_ARGS="-R $sel" bash scripts/gpu-check.sh "$out/gpu" > "$out/gpu-check.txt" 2>&1
echo "gpu-check rc=$? ($((SECONDS - start)) s)" >> "$out/gpu-check.txt"
export CUDA_MPS_PIPE_DIRECTORY=/tmp/ws-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/ws-mps-log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d
WEIGHTSYNC_TRACE=phases timeout 100 build/gpu/benchmarks/weightsync_bench --np 2 --layout tiny504 \
  --mode zerocopy --iters 30 --warmup 5 --barrier shm 2>&1 | grep -E "raw-nccl|zerocopy|trace" |
  grep -v "^\[" | awk '/trace/{n[$4 $5 $6]++; if (n[$4 $5 $6] % 10 == 0) print; next} {print}' > "$out/trace.txt"
echo quit | nvidia-cuda-mps-control
grep -E "Test +#" "$out/gpu-check.txt" | cut -c1-160
tail -n 4 "$out/gpu-check.txt"
cut -c1-240 "$out/trace.txt"
