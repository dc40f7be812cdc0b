#!/usr/bin/env bash
# Run 60 (2026-11-27, one GPU): #26's one schedule (PiecePlan + TransferRun) and the ipc/ + c10d/
# moves: every GPU test (multi-rank ones share the GPU over NCCL's socket transport) and the CPU
# suite (Catch2 v3), then bench rows that check every byte: nccl --np 2 (tiny, tiny504, small1b;
# packed and zerocopy) and --np 4 (small1b), and ipc dense8b. At most 8 files come back.
set -u
out=$1
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
WS_BENCH=none timeout 480 bash scripts/gpu-check.sh "$out/check" > "$out/gpu-check.txt" 2>&1
echo "gpu-check rc=$?" >> "$out/gpu-check.txt"
grep -E "tests passed|tests failed|\*\*\*Failed" "$out/check/ctest-cpu.txt" | head -20 > "$out/cpu-summary.txt"
grep -B5 -A60 "\*\*\*Failed\|FAILED:" "$out/check/ctest-gpu.txt" 2>/dev/null | head -400 > "$out/failures.txt"
cp "$out/check/summary.txt" "$out/" 2>/dev/null
rm -rf "$out/check"
b=build/gpu/benchmarks/weightsync_bench
{
  timeout 60 $b --np 2 --layout tiny,tiny504,small1b --mode packed,zerocopy --iters 10 --warmup 2
  echo "rc=$?"
  timeout 60 $b --np 4 --layout small1b --mode packed,zerocopy --iters 3 --warmup 1
  echo "rc=$?"
  timeout 60 $b --backend ipc --layout tiny,dense8b --mode zerocopy --iters 10 --warmup 2
  echo "rc=$?"
} > "$out/bench.txt" 2>&1
tail -4 "$out/gpu-check.txt"
grep -E "^ +[0-9]|rc=|wrong" "$out/bench.txt" | head -40
