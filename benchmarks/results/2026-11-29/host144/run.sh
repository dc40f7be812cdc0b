#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Host144 (2026-11-29, this project's 2-core CI machine, no GPU): run 142's host rows here, with
# the same two CPU-only benches (host-bench-bin/bench-fb85cdb and bench-98d7119, built here),
# in turn, three passes each: ranks placed by the scheduler, pinned to CPUs 0 and 1, and both
# pinned to CPU 0. Then one traced pass of each (WEIGHTSYNC_TRACE=phases, 300 syncs).
#   bash benchmarks/results/2026-11-29/host144/run.sh OUT_DIR
set -u
out=${1:?usage: run.sh OUT_DIR}
mkdir -p "$out"; out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
args="--backend host --np 2 --layout tiny,tiny504 --mode zerocopy --iters 300 --warmup 20 --paired"
host_rows() {  # bin placement: free | two | one
  local bin=$1 place=$2 port=$((20000 + RANDOM % 20000))
  case $place in
    free) timeout 60 "$bin" $args ;;
    two | one)
      local c1=1; [ "$place" = one ] && c1=0
      timeout 60 taskset -c 0 "$bin" $args --rank 0 --port $port > "$out/r0.txt" 2>&1 &
      timeout 60 taskset -c $c1 "$bin" $args --rank 1 --port $port > /dev/null 2>&1
      wait; cat "$out/r0.txt"; rm -f "$out/r0.txt" ;;
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
for v in fb85cdb 98d7119; do
  WEIGHTSYNC_TRACE=phases timeout 60 host-bench-bin/bench-$v --backend host --np 2 \
    --layout tiny504 --mode zerocopy --iters 300 --warmup 20 > "$out/rows-$v.txt" 2> "$out/trace-$v.txt"
done
grep -E "^== |paired with" "$out/host-rows.txt" | sed -E 's/in turn each iteration: //; s/, at most one.*//' | paste - - - | cut -c1-200
