#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 116 (2026-11-28, one GPU): run 115 failed 4 tests (ipc SealedMetadata, the sharded low-byte
# delta rounds, the two weightsync_bench smokes), all with wrong bytes after a model was made:
# DeviceModel's new cudaMemset of its padding ran on the legacy stream and landed on the callers'
# fills. It now waits. Here: those four, the three cuda policy tests, and the slow full-size and
# back-to-back tests (the five interop tests are left out: device time).
#   bash benchmarks/results/2026-11-28/run116/run.sh OUT_DIR
set -u
out=${1:?usage: run.sh OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
sel="-R SealedMetadata|low-byte.reference|bench.smoke|cuda.policy|full-size|back-to-back"
WS_CPU_TESTS=0 WS_BENCH=none WS_CTEST_ARGS="$sel" bash scripts/gpu-check.sh "$out/gpu" > "$out/gpu-check.txt" 2>&1
echo "gpu-check rc=$? ($((SECONDS - start)) s)" >> "$out/gpu-check.txt"
tail -16 "$out/gpu-check.txt"
