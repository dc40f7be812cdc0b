#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# On a machine with GPUs: configure with CUDA for Hopper (sm_90), build, run the GPU tests
# (ctest -L gpu) and a benchmark smoke run, writing logs to a folder.
#   bash scripts/gpu-check.sh [LOG_DIR=gpu-logs] [extra benchmark args...]
# WS_SKIP_TESTS=1 skips the GPU tests, WS_CTEST_ARGS="-R regex" selects some, WS_CPU_TESTS=0 the CPU tests (run by default: the GPU
# machines have Catch2 v3, CI has v2); WS_BENCH="args" replaces the benchmark's arguments;
# WS_PY_BENCH="args" also runs the Python reference benchmark with those arguments.
# Multi-rank NCCL tests run wherever there is one GPU: with fewer GPUs than ranks (or
# WS_SHARE_GPU=1) the ranks share devices over NCCL's socket transport (tests/support/gpu_peers.hpp).
# The last lines are an honest summary: "N passed, M failed, K skipped" (CTest counts skips as
# passes) and every skipped test with its reason (scripts/ctest-summary.py).
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0
logs=${1:-gpu-logs}
mkdir -p "$logs"
build=${WEIGHTSYNC_BUILD_DIR:-build/gpu}
rc=0
{
  date -u +"%Y-%m-%dT%H:%M:%SZ"
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader 2>&1
  nvidia-smi topo -m 2>&1 | head -5
  nvcc --version | tail -1
  ls -l /usr/include/nccl.h /usr/local/cuda/include/nccl.h /usr/lib/x86_64-linux-gnu/libnccl.so* 2>&1
  cmake --version | head -1
} 2>&1 | tee "$logs/env.txt"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DWEIGHTSYNC_WITH_CUDA=ON -DWEIGHTSYNC_WITH_NCCL=ON -DWEIGHTSYNC_BUILD_TESTS=ON \
  -DWEIGHTSYNC_BUILD_BENCHMARKS=ON -DWEIGHTSYNC_BUILD_EXAMPLES=ON -DWEIGHTSYNC_WERROR=ON 2>&1 | tee "$logs/configure.txt" | grep -E "weightsync|NCCL|Catch2|Error" || true
# WS_BUILD_TARGETS="a b": build only those targets (e.g. the GPU test executables and the bench).
targets=()
for t in ${WS_BUILD_TARGETS:-}; do targets+=(--target "$t"); done
start=$SECONDS
if ! cmake --build "$build" -j "$(nproc)" "${targets[@]}" -- -k 0 > "$logs/build.txt" 2>&1; then
  # A newer compiler may warn where the CI's does not: keep every such warning in the log, then
  # build without -Werror so that the tests still run (the run is marked, never silently green).
  if grep -q "all warnings being treated as errors" "$logs/build.txt" &&
    cmake -S . -B "$build" -DWEIGHTSYNC_WERROR=OFF > /dev/null 2>&1 &&
    cmake --build "$build" -j "$(nproc)" "${targets[@]}" > "$logs/build-nowerror.txt" 2>&1; then
    echo "BUILD WARNINGS: -Werror failed with this compiler; built again without -Werror:"
    grep -E "error: |warning: " "$logs/build.txt" | sed 's/^ *//' | sort -u | cut -c1-300 | head -20
    rc=1
  else
    tail -50 "$logs/build.txt"
    echo "BUILD FAILED"
    exit 1
  fi
fi
echo "build ok ($((SECONDS - start)) s)"
if [ "${WS_CPU_TESTS:-1}" = 1 ]; then
  ctest --test-dir "$build" -LE gpu --no-tests=error -j 16 > "$logs/ctest-cpu.txt" 2>&1 || rc=1
  grep -E "tests passed|Failed|\*\*\*" "$logs/ctest-cpu.txt" | head -20
fi
if [ "${WS_SKIP_TESTS:-0}" != 1 ]; then
  ctest --test-dir "$build" -L gpu --output-on-failure --no-tests=error -V \
    --output-junit "$(realpath "$logs")/ctest-gpu.xml" ${WS_CTEST_ARGS:-} > "$logs/ctest-gpu.txt" 2>&1 || rc=1
  grep -E "Test +#|\[ws-test\] mode|verified|free device|consumer failed|bit-exact|NOT RUN" "$logs/ctest-gpu.txt" | sed 's/^ *//' | head -120
  python3 scripts/ctest-summary.py "$logs/ctest-gpu.xml" --list | tee "$logs/summary.txt" || rc=1
fi
bench_args=${WS_BENCH:---layout small1b,lora8b --mode packed,zerocopy --iters 5 --warmup 2}
if [ -x "$build/benchmarks/weightsync_bench" ] && [ "$bench_args" != none ]; then
  "$build/benchmarks/weightsync_bench" $bench_args --json "$logs/bench.jsonl" "${@:2}" 2> "$logs/bench-progress.txt" | tee "$logs/bench.txt" || rc=1
fi
if [ -n "${WS_PY_BENCH:-}" ]; then
  python3 benchmarks/python/vllm_style_bench.py $WS_PY_BENCH --json "$logs/python.jsonl" 2>&1 | tee "$logs/python.txt" | grep -v "^\[" || rc=1
fi
exit $rc
