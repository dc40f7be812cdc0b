#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# The IPC / copy-engine runs behind BENCHMARKS.md, on a machine with 2 GPUs, after
# scripts/gpu-check.sh has built build/gpu:   bash scripts/ipc-sweep.sh LOG_DIR [probe|tune|final]
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0
logs=${1:-gpu-logs}
what=${2:-final}
mkdir -p "$logs"
build=${WEIGHTSYNC_BUILD_DIR:-build/gpu}
bench=$build/benchmarks/weightsync_bench
run() {
  echo "== weightsync_bench $*" | tee -a "$logs/bench-ipc.txt"
  timeout 120 "$bench" "$@" --json "$logs/ipc.jsonl" 2>/dev/null | grep -v "^#  Rank" | tee -a "$logs/bench-ipc.txt"
}
case "$what" in
  probe)
    timeout 120 "$build/benchmarks/copy_engine_probe" 16 2>&1 | tee "$logs/probe.txt"
    ;;
  tune)
    for cs in 1 2 4; do
      for piece in 256M 1G; do
        run --backend ipc --layout dense8b --mode zerocopy --copy-streams $cs --piece $piece --iters 8 --warmup 2
      done
    done
    for cs in 1 2 4 8; do
      run --backend p2p --layout dense8b --mode zerocopy,staged --copy-streams $cs --iters 8 --warmup 2
    done
    ;;
  final)
    # ipc: both models and the raw-copy baseline's source share one GPU, so no moe30b (3 x 61 GB).
    run --backend ipc --layout dense8b,small1b,lora8b --mode zerocopy,packed,staged --iters 10 --warmup 3 "${@:3}"
    run --backend p2p --layout dense8b,moe30b,small1b,lora8b --mode zerocopy,packed,staged --iters 10 --warmup 3 "${@:3}"
    ;;
esac
