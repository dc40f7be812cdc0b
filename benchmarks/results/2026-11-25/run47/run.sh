#!/usr/bin/env bash
# Run 47 (H200): the fixed cost of one sync (tiny, tiny504) after the eager handshake: nccl with
# two ranks sharing the GPU and host, then ipc from tiny to dense8b; without and with MPS.
set -u
out=$1
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
WS_SKIP_TESTS=1 WS_CPU_TESTS=0 WS_BENCH=none WS_BUILD_TARGETS="weightsync_bench" \
  timeout 300 bash scripts/gpu-check.sh "$out/build" > "$out/build.txt" 2>&1 || { tail -30 "$out/build.txt"; exit 1; }
rm -rf "$out/build"
B=build/gpu/benchmarks/weightsync_bench
timeout 150 bash scripts/mps-compare.sh $B --np 2 --layout tiny,tiny504 --mode packed,zerocopy \
  --iters 30 --json "$out/nccl.jsonl" > "$out/nccl.txt" 2>&1; echo "rc=$?" >> "$out/nccl.txt"
timeout 60 $B --backend host --layout tiny,tiny504 --mode packed,zerocopy --iters 50 \
  --json "$out/host.jsonl" > "$out/host.txt" 2>&1; echo "rc=$?" >> "$out/host.txt"
timeout 200 bash scripts/mps-compare.sh $B --backend ipc --layout tiny,tiny504,lora8b,small1b,dense8b \
  --mode zerocopy --iters 20 --json "$out/ipc.jsonl" > "$out/ipc.txt" 2>&1; echo "rc=$?" >> "$out/ipc.txt"
git rev-parse --short HEAD > "$out/commit.txt"
