#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 140 (2026-11-29, the one-GPU machine's CPUs, no GPU work): where host tiny504's time goes
# there, to explain run 139's miss (predicted 8-12 us less extra, measured about 4). The same two
# CPU-only benches as run 139 (host-bench-bin/), WEIGHTSYNC_TRACE=phases, ranks placed by the
# scheduler, 300 syncs each, e6b4ab2 then fb85cdb, twice; the traces go to OUT/trace-*.txt.
#   bash benchmarks/results/2026-11-29/run140/run.sh OUT_DIR
set -u
out=${1:?usage: run.sh OUT_DIR}
mkdir -p "$out"; out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
for pass in 1 2; do
  for v in e6b4ab2 fb85cdb; do
    WEIGHTSYNC_TRACE=phases timeout 60 host-bench-bin/bench-$v --backend host --np 2 \
      --layout tiny504 --mode zerocopy --iters 300 --warmup 20 \
      > "$out/rows-$v-$pass.txt" 2> "$out/trace-$v-$pass.txt"
    grep zerocopy "$out/rows-$v-$pass.txt"
  done
done
