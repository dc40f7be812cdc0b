#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 87 (2026-11-27, two GPUs of one host): what one GPU cannot show, on the landed tree.
#   bash benchmarks/results/2026-11-27/run87/run.sh OUT_DIR     (about 5 minutes)
# 1. the GPU tests that need two distinct devices (p2p round trips, ipc refusing peers on two
#    GPUs, p2p sharded), skipped by run 86.
# 2. #31, the checksums' cost where the link is not the GPU's own memory: dense8b zerocopy with
#    checksums off and on, over nccl (--np 2, one GPU per rank) and p2p (copy engines GPU 0 ->
#    GPU 1), every byte checked. Predicted: +0-5 % on both (the digests read each side's HBM,
#    ~4-5 ms at TB/s, beside a ~44 ms transfer at ~370-400 GB/s), against +50-56 % over ipc on one
#    GPU, where the digest and the copy read the same memory.
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
  timeout 300 bash scripts/gpu-check.sh "$tmp/check" > "$out/gpu-check.txt" 2>&1
echo "gpu-check rc=$? ($((SECONDS - start)) s)" >> "$out/gpu-check.txt"
cp "$tmp/check/env.txt" "$tmp/check/ctest-gpu.txt" "$tmp/check/summary.txt" "$out/" 2> /dev/null
b=build/gpu/benchmarks/weightsync_bench
{
  timeout 80 $b --np 2 --layout dense8b --mode zerocopy --checksum off,on --iters 5 --warmup 2 \
    --json "$out/bench.jsonl" 2>&1 | grep -vE "^\["; echo "nccl rc=${PIPESTATUS[0]} ($((SECONDS - start)) s)"
  timeout 80 $b --backend p2p --layout dense8b --mode zerocopy --checksum off,on --iters 5 --warmup 2 \
    --json "$out/bench.jsonl" 2>&1 | grep -vE "^\["; echo "p2p rc=${PIPESTATUS[0]} ($((SECONDS - start)) s)"
} > "$out/bench.txt" 2>&1
rm -rf "$tmp"
echo "=== run 87 ($((SECONDS - start)) s) ==="
grep -E "build ok|BUILD|gpu-check rc" "$out/gpu-check.txt"
tail -8 "$out/summary.txt" 2> /dev/null
grep -E "^ +[0-9]+ |rc=|^# (transport|mps)" "$out/bench.txt" | cut -c1-150
# Then, on the same warm machine (tiny.txt): the fixed cost of a sync over NVLink (NCCL's P2P
# transport, one GPU per rank), two passes of 100 iterations:
#   b=build/gpu/benchmarks/weightsync_bench; for i in 1 2; do
#     $b --np 2 --layout tiny,tiny504 --mode zerocopy --iters 100 --warmup 5 --json bench.jsonl; done
