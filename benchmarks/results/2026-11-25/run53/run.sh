#!/usr/bin/env bash
# Run 53 (H200): the fixed cost of a sync and the colocated rows, same tree as run 52 (build/gpu
# from it): ipc (mailbox and TCP control) without and with MPS, nccl with 2 ranks on the GPU
# (tiny, tiny504) without and with MPS, host.
set -u
out=$1
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
B=build/gpu/benchmarks/weightsync_bench
[ -x $B ] || { WS_SKIP_TESTS=1 WS_CPU_TESTS=0 WS_BENCH=none WS_BUILD_TARGETS=weightsync_bench \
  timeout 300 bash scripts/gpu-check.sh "$out/build" > "$out/build.txt" 2>&1; rm -rf "$out/build"; }
for c in shm tcp; do
  timeout 150 bash scripts/mps-compare.sh $B --backend ipc --ipc-control $c \
    --layout tiny,tiny504,lora8b,small1b,dense8b --mode zerocopy --iters 20 \
    --json "$out/ipc-$c.jsonl" > "$out/ipc-$c.txt" 2>&1; echo "rc=$?" >> "$out/ipc-$c.txt"
done
timeout 120 bash scripts/mps-compare.sh $B --np 2 --layout tiny,tiny504 --mode packed,zerocopy \
  --iters 30 --json "$out/nccl.jsonl" > "$out/nccl.txt" 2>&1; echo "rc=$?" >> "$out/nccl.txt"
timeout 60 $B --backend host --layout tiny,tiny504 --mode packed,zerocopy --iters 50 \
  --json "$out/host.jsonl" > "$out/host.txt" 2>&1; echo "rc=$?" >> "$out/host.txt"
