#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Host135 (2026-11-28, this project's 2-core CI machine, no GPU): the host backend's tiny and
# tiny504 rows with --paired, all three built alike (RelWithDebInfo, -O2 -g, bench only):
#   A  = 76f4afc's library with this tree's benchmarks/ (in bench-old/, built in /tmp/build-old)
#   B  = the landing tree (/tmp/build-new), its list sealed (the bench's default)
#   Bs = the landing tree, --metadata span
# alternating, three passes each, on an idle machine and with one niced spinning process
# (vCPUs that never halt: loopback's latency drops from ~55 to ~11 us).
#   A=/tmp/build-old/benchmarks/weightsync_bench B=/tmp/build-new/benchmarks/weightsync_bench \
#     bash benchmarks/results/2026-11-28/host135/run.sh OUT_DIR
set -u
out=${1:?usage: run.sh OUT_DIR}
mkdir -p "$out"
for regime in idle busy; do
  if [ $regime = busy ]; then nice -n 19 sh -c 'while :; do :; done' & sp=$!; sleep 1; fi
  for pass in 1 2 3; do
    for t in A B Bs; do
      bin=$A; extra=""
      [ $t != A ] && bin=$B
      [ $t = Bs ] && extra="--metadata span"
      echo "== $regime pass $pass $t"
      $bin --backend host --layout tiny,tiny504 --mode zerocopy --iters 300 --warmup 20 --paired \
        $extra --json "$out/rows.jsonl" 2>&1 | grep -E "zerocopy|raw-host|paired"
    done
  done
  [ $regime = busy ] && kill $sp
done > "$out/rows.txt" 2>&1
