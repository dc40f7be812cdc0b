#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 66 (2026-11-27, two GPUs of one host), the landed tree: the three GPU tests that need two
# distinct devices (p2p round trips, ipc refusing peers on two GPUs, p2p sharded), skipped on
# every one-GPU run, then link figures: nccl --np 2 over NVLink (one GPU per rank, no sharing)
# and p2p (copy engines GPU 0 -> GPU 1), dense8b and small1b, every byte checked.
#   bash benchmarks/results/2026-11-27/run66/run.sh OUT_DIR
set -u
out=${1:?usage: run.sh OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
tmp=$(mktemp -d)
WS_CPU_TESTS=0 WS_BENCH=none WS_BUILD_TARGETS="weightsync_gpu_tests weightsync_bench" \
  WS_CTEST_ARGS="-R (p2p|two.GPUs) --timeout 120" \
  timeout 260 bash scripts/gpu-check.sh "$tmp/check" > "$out/gpu-check.txt" 2>&1
echo "gpu-check rc=$? ($((SECONDS - start)) s)" >> "$out/gpu-check.txt"
cp "$tmp/check/env.txt" "$tmp/check/ctest-gpu.txt" "$tmp/check/summary.txt" "$out/" 2> /dev/null
b=build/gpu/benchmarks/weightsync_bench
{
  timeout 60 $b --np 2 --layout dense8b,small1b --mode packed,zerocopy --iters 5 --warmup 2 \
    --json "$out/bench.jsonl" 2>&1 | grep -vE "^\["; echo "nccl rc=${PIPESTATUS[0]}"
  timeout 50 $b --backend p2p --layout dense8b,small1b --mode zerocopy,staged --iters 5 --warmup 2 \
    --json "$out/bench.jsonl" 2>&1 | grep -vE "^\["; echo "p2p rc=${PIPESTATUS[0]} ($((SECONDS - start)) s)"
} > "$out/bench.txt" 2>&1
rm -rf "$tmp"
echo "=== run 66 ($((SECONDS - start)) s) ==="
grep -E "build ok|BUILD|gpu-check rc" "$out/gpu-check.txt"
tail -8 "$out/summary.txt" 2> /dev/null
grep -E "^ +[0-9]+ |rc=" "$out/bench.txt" | cut -c1-150
