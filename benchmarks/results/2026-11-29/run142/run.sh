#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 142 (2026-11-29, one GPU, ranks sharing it): 98d7119, the library to land. Since run 139
# (fb85cdb): a copy that continues the last one on both sides extends it (Workspace::add_copy),
# and the host's eager pack copies runs of back-to-back items at once.
#   bash benchmarks/results/2026-11-29/run142/run.sh OUT_DIR [fast|slow]
# fast: 1. host rows (tiny, tiny504, --paired) on this machine's CPUs, fb85cdb's and 98d7119's
#   bench in turn, three passes each, CPU-only binaries built on the CI machine (Debian 12, g++ 12,
#   RelWithDebInfo, stripped) and carried in host-bench-bin/: ranks placed by the scheduler,
#   pinned to two CPUs, and both pinned to one CPU; 2. the build; 3. ipc (three passes) and NCCL
#   --np 2 and --np 4 rows, paired, under MPS; 4. scripts/gpu-check.sh with all but the slowest
#   seven.
# slow: the slowest seven GPU tests.
# Predicted (from the CI machine's phase traces: the producer's pack 6.3 -> 5.8 us, the
# consumer's copy out 3.9 -> 3.2 us): host tiny504's extra 1-2 us less than fb85cdb's, inside
# the noise between passes; ipc and NCCL rows as in run 139; 0 wrong bytes; 63 passed, 0 failed,
# 3 skipped (the new tests are CPU tests); slow 7/0/0.
set -u
out=${1:?usage: run.sh OUT_DIR [fast|slow]}
part=${2:-fast}
mkdir -p "$out"; out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
slow="interop|full-size|back-to-back"  # (no spaces: WS_CTEST_ARGS is split on them)
if [ "$part" = slow ]; then
  WS_CPU_TESTS=0 WS_BENCH=none WS_CTEST_ARGS="-R $slow" bash scripts/gpu-check.sh "$out/gpu-slow" > "$out/gpu-check-slow.txt" 2>&1
  echo "gpu-check slow rc=$? ($((SECONDS - start)) s)" >> "$out/gpu-check-slow.txt"
  tail -12 "$out/gpu-check-slow.txt"
  exit 0
fi
args="--backend host --np 2 --layout tiny,tiny504 --mode zerocopy --iters 300 --warmup 20 --paired"
host_rows() {  # bin placement: free | two | one
  local bin=$1 place=$2 port=$((20000 + RANDOM % 20000))
  case $place in
    free) timeout 60 "$bin" $args ;;
    two | one)
      local c1=3; [ "$place" = one ] && c1=2
      timeout 60 taskset -c 2 "$bin" $args --rank 0 --port $port > "$out/r0.txt" 2>&1 &
      timeout 60 taskset -c $c1 "$bin" $args --rank 1 --port $port > /dev/null 2>&1
      wait; cat "$out/r0.txt" ;;
  esac
}
{
  echo "# $(nproc) CPUs: $(grep -m1 'model name' /proc/cpuinfo)"
  for place in free two one; do
    for pass in 1 2 3; do
      for v in fb85cdb 98d7119; do
        echo "== host $place pass $pass $v"
        host_rows host-bench-bin/bench-$v $place 2>&1 | grep -E "raw-host|zerocopy|paired with"
      done
    done
  done
} > "$out/host-rows.txt" 2>&1
echo "host rows done ($((SECONDS - start)) s)" >> "$out/host-rows.txt"
grep -E "^== |paired with" "$out/host-rows.txt" | sed -E 's/in turn each iteration: //; s/, at most one.*//' | paste - - - | cut -c1-240
WS_CPU_TESTS=0 WS_SKIP_TESTS=1 WS_BENCH=none bash scripts/gpu-check.sh "$out/gpu" > "$out/build.txt" 2>&1
echo "build rc=$? ($((SECONDS - start)) s)" >> "$out/build.txt"
tail -1 "$out/build.txt"
b=build/gpu/benchmarks/weightsync_bench
export CUDA_MPS_PIPE_DIRECTORY=/tmp/ws-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/ws-mps-log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d
{
  for pass in 1 2 3; do
    echo "== ipc pass $pass"
    timeout 100 $b --backend ipc --layout tiny,tiny504 --mode zerocopy --iters 100 --warmup 10 \
      --paired --json "$out/bench.jsonl" 2>&1 | grep -vE "^\[|^#  Rank"
  done
  for np in 2 4; do
    echo "== nccl np$np"
    timeout 120 $b --np $np --layout tiny,tiny504 --mode zerocopy --iters 100 --warmup 10 \
      --barrier shm --paired --json "$out/bench.jsonl" 2>&1 | grep -vE "^\[|^#  Rank"
  done
} > "$out/rows.txt" 2>&1
echo quit | nvidia-cuda-mps-control; sleep 1
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
echo "rows done ($((SECONDS - start)) s)" >> "$out/rows.txt"
grep -E "^== | raw-ipc | raw-nccl |zerocopy|paired with|rows done" "$out/rows.txt" | cut -c1-200
WS_CPU_TESTS=0 WS_BENCH=none WS_CTEST_ARGS="-E $slow" bash scripts/gpu-check.sh "$out/gpu" > "$out/gpu-check.txt" 2>&1
echo "gpu-check rc=$? ($((SECONDS - start)) s)" >> "$out/gpu-check.txt"
tail -6 "$out/gpu-check.txt"
