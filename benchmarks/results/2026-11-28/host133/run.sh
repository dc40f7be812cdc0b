#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Host133 (2026-11-28, this project's 2-core CI machine, no GPU): the host backend's tiny and
# tiny504 rows with --paired, A = the library of 76f4afc with this tree's bench (built in
# /tmp/build-old from bench-old/, its benchmarks/ replaced by this tree's), B = this tree
# (build/test), alternating, three passes each on an idle machine and three with one niced
# spinning process (vCPUs that never halt: loopback's latency drops from ~55 to ~11 us).
#   A=/tmp/build-old/benchmarks/weightsync_bench B=build/test/benchmarks/weightsync_bench \
#     bash benchmarks/results/2026-11-28/host133/run.sh OUT_DIR
set -u
out=${1:?usage: run.sh OUT_DIR}
mkdir -p "$out"
for regime in idle busy; do
  if [ $regime = busy ]; then nice -n 19 sh -c 'while :; do :; done' & sp=$!; sleep 1; fi
  for pass in 1 2 3; do
    for t in A B; do
      bin=$A; [ $t = B ] && bin=$B
      echo "== $regime pass $pass $t"
      $bin --backend host --layout tiny,tiny504 --mode zerocopy --iters 300 --warmup 20 --paired \
        --json "$out/rows.jsonl" 2>&1 | grep -E "zerocopy|raw-host|paired"
    done
  done
  [ $regime = busy ] && kill $sp
done > "$out/rows.txt" 2>&1
