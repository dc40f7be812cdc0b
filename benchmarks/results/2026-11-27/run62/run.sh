#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 62 (2026-11-27, one GPU, the warm machine and build of run 61): the five interop GPU tests
# (run 61 left them out), then the benchmark rows of #29 (delta) and #31 (checksums, shadow).
#   bash benchmarks/results/2026-11-27/run62/run.sh OUT_DIR    (at most 9.5 minutes)
# Predictions, written before the run:
#  - interop: 5 passed (run 60: 32-37 s each).
#  - delta_codec_bench dense8b (reference update inside measure): encode 1.75-1.9 TB/s at 1 %
#    (target >= 1.5), apply ~100-115 GB/s of payload (target 200: likely missed), payload at 1 %
#    <= 2.5 % of the full bytes, 0 wrong.
#  - nccl --np 2 dense8b (shared GPU, socket transport, ~4 GB/s): delta 1 % >= 20x faster than the
#    faster full row (full ~4 s, delta ~ encode + ~330 MB at 4 GB/s + apply ~ 0.1 s: ~40x).
#  - ipc dense8b: the automatic mode within 5 % of the full sync (it sends whole on a link as fast
#    as the diff).
#  - ipc dense8b zerocopy checksums: off ~7.9-8.1 ms; on +55-65 %; on-ce +75-100 % (one GPU: every
#    pass shares HBM; the 10 % target needs the digest on another device's HBM).
#  - shadow_bench dense8b ipc: forward while syncing p50 ~0.5-0.7 ms, longest wait < 100 us
#    (target <= 1 ms), 0 mixed answers.
# Files in OUT_DIR (<= 8): interop.txt, codec.txt, codec.jsonl, nccl-delta.txt, ipc.txt,
# bench.jsonl, shadow.txt, summary.txt.
set -u
out=${1:?usage: run.sh OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
b=build/gpu/benchmarks
timeout 230 ctest --test-dir build/gpu -L gpu -R interop --output-on-failure --timeout 100 \
  > "$out/interop.txt" 2>&1
echo "interop rc=$? ($((SECONDS - start)) s)" >> "$out/interop.txt"
{
  timeout 50 $b/delta_codec_bench --layout dense8b --reps 5 --warmup 1 --json "$out/codec.jsonl"
  echo "codec rc=$?"
  timeout 25 $b/delta_codec_bench --layout dense8b --reps 5 --warmup 1 --sparse-writes sectors \
    --densities 0.001,0.01,0.03 --json "$out/codec.jsonl"
  echo "codec sectors rc=$?"
} > "$out/codec.txt" 2>&1
timeout 80 $b/weightsync_bench --np 2 --layout dense8b --mode packed --iters 2 --warmup 1 \
  --delta 0.01 --json "$out/bench.jsonl" > "$out/nccl-delta.txt" 2>&1
echo "nccl delta rc=$? ($((SECONDS - start)) s)" >> "$out/nccl-delta.txt"
{
  timeout 55 $b/weightsync_bench --np 2 --backend ipc --layout dense8b --mode packed,zerocopy \
    --iters 5 --warmup 2 --delta 0.001,0.01 --json "$out/bench.jsonl"
  echo "ipc delta auto rc=$?"
  timeout 50 $b/weightsync_bench --backend ipc --layout dense8b --mode zerocopy \
    --checksum off,on,on-ce --warmup 3 --iters 10 --json "$out/bench.jsonl"
  echo "ipc checksum rc=$?"
} > "$out/ipc.txt" 2> /dev/null
left=$((560 - (SECONDS - start)))
for ck in off on; do
  if [ "$left" -gt 45 ]; then
    timeout 40 $b/shadow_bench --layout dense8b --syncs 10 --checksum $ck --json "$out/bench.jsonl"
    echo "shadow_bench checksum $ck rc=$?"
  else
    echo "shadow_bench checksum $ck not run: ${left} s left"
  fi
  left=$((560 - (SECONDS - start)))
done > "$out/shadow.txt" 2>&1
{
  echo "=== run 62 ($((SECONDS - start)) s) ==="
  grep -E "tests passed|tests failed|\*\*\*|interop rc" "$out/interop.txt"
  echo "-- codec (density encode_total_us enc_GB/s apply_us app_GB/s #wrong)"
  grep -E "^# delta_codec_bench|^  +[0-9]" "$out/codec.txt" | awk '/^#/{print substr($0,1,150); next} {print $1, $8, $9, $10, $11, $12}'
  grep -E "rc=" "$out/codec.txt"
  echo "-- nccl delta"; grep -E "^ +[0-9]|delta|rc=" "$out/nccl-delta.txt" | cut -c1-200 | tail -12
  echo "-- ipc"; grep -E "^ +[0-9]|^# *delta|delta [0-9.]+: payload|rc=" "$out/ipc.txt" | cut -c1-200
  echo "-- shadow"; grep -vE "^#  " "$out/shadow.txt" | grep -E "forward|wait|landed|sync:|bit-exact|mixed|rc=|not run"
} | tee "$out/summary.txt"
