#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# nccl-tests-style latency curve: 1 KiB to 16 GiB per sync, as one tensor and as 512 tensors, this
# library at its defaults (zerocopy, B = 1 GiB, K = 2) against its baseline in the same processes,
# for the nccl, p2p and ipc backends. Needs 2 GPUs and a build with benchmarks (scripts/gpu-check.sh).
#   bash scripts/latency-curve.sh LOG_DIR [BUILD_DIR=build/gpu]
# WS_CURVE_BACKENDS="ipc" runs only those backends (one GPU: ipc alone).
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0
logs=${1:?LOG_DIR}
bench=${2:-build/gpu}/benchmarks/weightsync_bench
mkdir -p "$logs"
layouts=""
for s in 1024 4096 16384 65536 262144 1048576 4194304 16777216 67108864 268435456 1073741824 \
         4294967296 17179869184; do
  many=$((s / 512))
  [ $((many % 2)) -eq 1 ] && many=$((many + 1))
  layouts+="synthetic:1x$s,synthetic:512x$many,"
done
layouts=${layouts%,}
rc=0
for backend in ${WS_CURVE_BACKENDS:-nccl p2p ipc}; do
  timeout "${WS_CURVE_TIMEOUT:-150}" "$bench" --backend "$backend" --layout "$layouts" --mode zerocopy \
    --iters "${WS_CURVE_ITERS:-20}" --warmup 3 --json "$logs/curve-$backend.jsonl" \
    > "$logs/curve-$backend.txt" 2> "$logs/curve-$backend-progress.txt"
  r=$?
  echo "$backend rc=$r"
  [ $r -eq 0 ] || rc=1
done
exit $rc
