#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Issue #29 (branch issue-29), one H200: the delta GPU tests (kernels against the host codec,
# the reference update inside measure, both sparse write modes, blobs through a load plan's
# gather, sparse pairs on the GPU, engine rounds over nccl and ipc), the codec on dense8b (and
# the first 36 GB of moe30b), and ipc delta rows against the full sync of the same run.
#   bash benchmarks/results/2026-11-27/issue-29/run.sh OUT_DIR      (at most 8 minutes: the timeouts add up to 480 s)
set -u
out=${1:?usage: run.sh OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
tmp=$(mktemp -d)
# 1. build (only these targets) and the GPU tests whose names contain "delta"
WS_BUILD_TARGETS="weightsync_gpu_tests weightsync_nccl_tests weightsync_bench delta_codec_bench" \
  WS_CTEST_ARGS="-R delta" WS_CPU_TESTS=0 WS_BENCH=none \
  timeout 270 bash scripts/gpu-check.sh "$tmp/check" > "$out/check.txt" 2>&1
echo "gpu-check rc=$?" >> "$out/check.txt"
cp "$tmp/check/ctest-gpu.txt" "$out/ctest-gpu.txt" 2> /dev/null
tail -40 "$tmp/check/build.txt" >> "$out/check.txt" 2> /dev/null
b=build/gpu/benchmarks
# 2. the codec on dense8b: the reference update inside measure (default), sparse writes scattered
#    (default); then sparse writes by whole sectors at the sparse densities (same build, same run)
{
  timeout 50 $b/delta_codec_bench --layout dense8b --reps 5 --warmup 1 --json "$out/codec.jsonl"
  echo "codec rc=$?"
  timeout 25 $b/delta_codec_bench --layout dense8b --reps 5 --warmup 1 --sparse-writes sectors \
    --densities 0.001,0.01,0.03 --json "$out/codec.jsonl.sectors"
  echo "codec sectors rc=$?"
  # moe30b does not fit 3 copies (183 GB): its first 36 GB (about a third of its tensors)
  timeout 35 $b/delta_codec_bench --layout moe30b --max-bytes 36000000000 --reps 3 --warmup 1 \
    --densities 0.01 --json "$out/codec.jsonl.moe"
  echo "codec moe30b rc=$?"
} > "$out/codec.txt" 2>&1
cat "$out/codec.jsonl.sectors" "$out/codec.jsonl.moe" >> "$out/codec.jsonl" 2> /dev/null
rm -f "$out/codec.jsonl.sectors" "$out/codec.jsonl.moe"
# 3. ipc (two processes on GPU 0): dense8b full rows (packed, zerocopy) and delta rows, the
#    automatic mode (told the link speed of the faster full row) and always
{
  timeout 55 $b/weightsync_bench --np 2 --backend ipc --layout dense8b --mode packed,zerocopy \
    --iters 5 --warmup 2 --delta 0.001,0.01 --json "$out/ipc.jsonl" 2> "$tmp/ipc-progress.txt"
  echo "ipc auto rc=$?"
  timeout 45 $b/weightsync_bench --np 2 --backend ipc --layout dense8b --mode zerocopy \
    --iters 3 --warmup 1 --delta 0.001,0.01,0.1 --delta-mode always --json "$tmp/ipc2.jsonl" \
    2>> "$tmp/ipc-progress.txt"
  echo "ipc always rc=$?"
  tail -5 "$tmp/ipc-progress.txt"
} > "$out/ipc.txt" 2>&1
cat "$tmp/ipc2.jsonl" >> "$out/ipc.jsonl" 2> /dev/null
# 4. summary (printed last)
{
  echo "== summary"
  grep -E "passed|failed|skipped" "$out/check.txt" | tail -3
  grep -E "^(ok|FAILED|not ok)|Test +#.*delta" "$out/ctest-gpu.txt" 2> /dev/null | tail -12
  echo "-- codec (density encode_total_us enc_GB/s apply_us app_GB/s #wrong); targets at 0.01: enc >= 1500, app >= 200"
  grep -E "^# delta_codec_bench|^  +[0-9]" "$out/codec.txt" | awk '/^#/{print substr($0,1,150); next} {print $1, $8, $9, $10, $11, $12}'
  grep -E "rc=" "$out/codec.txt"
  echo "-- ipc rows (impl time_us vs_full), delta notes"
  grep -E "^# *delta|delta [0-9.]+: payload" "$out/ipc.txt" | cut -c1-220
  grep -E "rc=" "$out/ipc.txt"
} | tee "$out/summary.txt"
rm -rf "$tmp"
