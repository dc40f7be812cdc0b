#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 118 (2026-11-28, two GPUs of one host): the GPU suite with one GPU per rank (the tests that
# need two devices among them), but the slowest (full-size, 100 back-to-back, interop: they run
# in the one-GPU run 119), on this tree (the descriptor tables' review fixes: allocation only in
# reserve(), waits by event, the table test without races). Then NCCL over NVLink: tiny, tiny504
# and one tensor of tiny504's bytes, --np 2, two passes, and one traced pass of tiny and tiny504.
#   bash benchmarks/results/2026-11-28/run118/run.sh OUT_DIR
# Predicted: every test passes; tiny 40-45 us against a raw 16-17 us (run 95), as before.
set -u
out=${1:?usage: run.sh OUT_DIR}
mkdir -p "$out"; out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
slow="interop|full-size|back-to-back"  # (no spaces: WS_CTEST_ARGS is split on them)
WS_CPU_TESTS=0 WS_BENCH=none WS_CTEST_ARGS="-E $slow" bash scripts/gpu-check.sh "$out/gpu" > "$out/gpu-check.txt" 2>&1
echo "gpu-check rc=$? ($((SECONDS - start)) s)" >> "$out/gpu-check.txt"
b=build/gpu/benchmarks/weightsync_bench
{
  for pass in 1 2; do
    echo "== pass $pass nvlink np2"
    timeout 100 $b --np 2 --layout tiny,tiny504,synthetic:1x32256 --mode zerocopy,packed --iters 100 \
      --warmup 10 --barrier shm --json "$out/bench.jsonl" 2>&1 | grep -E "^# (weightsync|ranks)|layout:|raw-|zerocopy|packed|host us"
  done
  echo "== trace nvlink np2"
  WEIGHTSYNC_TRACE=phases timeout 100 $b --np 2 --layout tiny,tiny504 --mode zerocopy --iters 30 \
    --warmup 5 --barrier shm 2>&1 | grep -E "layout:|raw-nccl|zerocopy|trace" | grep -v "^\[" |
    awk '/trace/{n[$4]++; if (n[$4] % 10 == 0) print; next} {print}'
} > "$out/rows.txt" 2>&1
echo "done ($((SECONDS - start)) s)" >> "$out/rows.txt"
tail -n 45 "$out/gpu-check.txt" | grep -vE "^\s+gpu\." 
grep -E "^== |raw-|zerocopy|packed|trace|layout:|done" "$out/rows.txt" | cut -c1-200
