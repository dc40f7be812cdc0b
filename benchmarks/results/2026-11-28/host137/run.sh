#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Host137 (2026-11-28, this project's 2-core CI machine, no GPU): the host backend's tiny and
# tiny504 rows with --paired on the landing tree (RelWithDebInfo, -O2 -g, bench only), three passes
# in each of four placements of the two rank processes:
#   idle   - as the scheduler likes, nothing else running;
#   busy   - the same beside one niced spinning process (vCPUs that never halt);
#   cpu0   - both ranks pinned to one vCPU (taskset -c 0): every step of either side in turn;
#   split  - the bench pinned to both vCPUs (taskset -c 0,1), beside the niced spinner.
#   B=/tmp/build-new/benchmarks/weightsync_bench bash benchmarks/results/2026-11-28/host137/run.sh OUT_DIR
set -u
out=${1:?usage: run.sh OUT_DIR}
mkdir -p "$out"
for place in idle busy cpu0 split; do
  sp=""
  if [ $place = busy ] || [ $place = split ]; then nice -n 19 sh -c 'while :; do :; done' & sp=$!; sleep 1; fi
  pin=""
  [ $place = cpu0 ] && pin="taskset -c 0"
  [ $place = split ] && pin="taskset -c 0,1"
  for pass in 1 2 3; do
    echo "== $place pass $pass"
    $pin $B --backend host --layout tiny,tiny504 --mode zerocopy --iters 300 --warmup 20 --paired \
      --json "$out/rows.jsonl" 2>&1 | grep -E "zerocopy|raw-host|paired"
  done
  [ -n "$sp" ] && kill $sp
done > "$out/rows.txt" 2>&1
