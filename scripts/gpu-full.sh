#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# The whole GPU check of a release on a 2-GPU machine, in priority order, each step bounded, logs
# in LOG_DIR: build, GPU tests, the CPU tests that need torch (store interop), the benchmark rows at
# the defaults (nccl; p2p and ipc), the latency curve. A later step missing from the logs ran out
# of time; the others are complete.
#   bash scripts/gpu-full.sh LOG_DIR
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0
logs=${1:?LOG_DIR}
mkdir -p "$logs"
build=build/gpu
step() { echo "== $(date -u +%H:%M:%S) $*"; }
step configure
{ date -u; nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader;
  nvcc --version | tail -1; } > "$logs/env.txt" 2>&1
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DWEIGHTSYNC_WITH_CUDA=ON -DWEIGHTSYNC_WITH_NCCL=ON -DWEIGHTSYNC_BUILD_TESTS=ON \
  -DWEIGHTSYNC_BUILD_BENCHMARKS=ON > "$logs/configure.txt" 2>&1
step build
if ! cmake --build "$build" -j "$(nproc)" > "$logs/build.txt" 2>&1; then
  grep -E "error" "$logs/build.txt" | head -20; echo "BUILD FAILED"; exit 1
fi
step gpu tests
timeout "${WS_GPU_TEST_TIMEOUT:-330}" ctest --test-dir "$build" -L gpu --output-on-failure --no-tests=error \
  -j 1 > "$logs/ctest-gpu.txt" 2>&1
grep -E "tests passed|\*\*\*|Timeout|verified|median|bit-exact" "$logs/ctest-gpu.txt" | sed 's/^ *//' | head -40
step store interop against this machine\'s torch
timeout 90 ctest --test-dir "$build" -R "tcp_store|vllm|store group|pickle" --no-tests=error -j 4 \
  > "$logs/ctest-store.txt" 2>&1
grep -E "tests passed|\*\*\*" "$logs/ctest-store.txt" | head -10
B=$build/benchmarks/weightsync_bench
step bench nccl
timeout 100 "$B" --layout dense8b,moe30b,small1b,lora8b --mode zerocopy --iters 20 --warmup 3 \
  --json "$logs/bench.jsonl" > "$logs/bench.txt" 2>&1
grep -E "^ +[0-9]" "$logs/bench.txt"
for be in p2p ipc; do
  step bench $be
  timeout 60 "$B" --backend $be --layout dense8b,small1b,lora8b --mode zerocopy --iters 20 --warmup 3 \
    --json "$logs/$be.jsonl" > "$logs/$be.txt" 2>&1
  grep -E "^ +[0-9]|consumer us" "$logs/$be.txt"
done
step latency curve
WS_CURVE_ITERS=${WS_CURVE_ITERS:-10} WS_CURVE_TIMEOUT=${WS_CURVE_TIMEOUT:-45} bash scripts/latency-curve.sh "$logs" "$build"
step done
