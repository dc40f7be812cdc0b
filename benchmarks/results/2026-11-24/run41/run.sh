#!/usr/bin/env bash
# Run 41 (H200): the whole GPU suite and the CPU suite (Catch2 v3) on the tree with delta syncs.
set -u
out=$1
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
export WS_BENCH=none
timeout 570 bash scripts/gpu-check.sh "$out" > "$out/gpu-check.txt" 2>&1
echo "gpu-check rc=$?" >> "$out/gpu-check.txt"
tail -45 "$out/gpu-check.txt" > "$out/gpu-check-tail.txt"
