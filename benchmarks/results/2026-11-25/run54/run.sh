#!/usr/bin/env bash
# Run 54 (H200): after the metadata digest cache (handshake and ipc plan), NcclCommunicator::
# synchronize yielding before it sleeps (the bench's barrier), and ipc pulls not cut on one GPU.
# The ipc and NCCL GPU tests, then the ipc rows (mailbox) and nccl tiny, without and with MPS.
set -u
out=$1
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
WS_CTEST_ARGS="-R ipc|nccl" WS_CPU_TESTS=0 WS_BENCH=none \
  WS_BUILD_TARGETS="weightsync_gpu_tests weightsync_nccl_tests weightsync_bench" \
  timeout 400 bash scripts/gpu-check.sh "$out/check" > "$out/gpu-check.txt" 2>&1
echo "gpu-check rc=$?" >> "$out/gpu-check.txt"
grep -B5 -A40 "\*\*\*Failed\|FAILED:" "$out/check/ctest-gpu.txt" 2>/dev/null | head -200 > "$out/failures.txt"
cp "$out/check/summary.txt" "$out/summary.txt" 2>/dev/null
rm -rf "$out/check"
B=build/gpu/benchmarks/weightsync_bench
timeout 100 bash scripts/mps-compare.sh $B --backend ipc \
  --layout tiny,tiny504,lora8b,small1b,dense8b --mode zerocopy --iters 20 \
  --json "$out/ipc.jsonl" > "$out/ipc.txt" 2>&1; echo "rc=$?" >> "$out/ipc.txt"
timeout 90 bash scripts/mps-compare.sh $B --np 2 --layout tiny,tiny504 --mode packed,zerocopy \
  --iters 30 --json "$out/nccl.jsonl" > "$out/nccl.txt" 2>&1; echo "rc=$?" >> "$out/nccl.txt"
