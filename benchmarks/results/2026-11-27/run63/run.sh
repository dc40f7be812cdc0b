#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 63 (2026-11-27, one H200: the delta rows of dense8b need two ranks' 3 copies, ~100 GB).
#   bash benchmarks/results/2026-11-27/run63/run.sh OUT_DIR     (at most ~9 minutes)
# A = the tree of 98bf388 (before #26; bench-old/, carried), B = this tree. In one run:
#  1. build B (the benchmarks) and A (its weightsync_bench) side by side; the GPU smoke tests of
#     the benchmarks (shadow_bench over ipc: run 62 found it never registered the ipc backend).
#  2. without MPS, then under one MPS daemon: ipc tiny, lora8b, small1b, dense8b zerocopy (A, B)
#     and nccl tiny, tiny504 zerocopy, 2 ranks sharing the GPU (A, B). Predicted: B = A within
#     noise (the schedule is shared code, not new work per sync); ipc dense8b >= 1.95 TB/s; under
#     MPS lora8b ~105-130 us (target 120), small1b 85-91 % of a copy (target 95), tiny nccl extra
#     ~55-60 us over raw (target: one raw latency, ~21 us: missed).
#  3. delta (#29): nccl --np 2 dense8b 1 % (predicted >= 20x the full row: ~40x); ipc dense8b
#     automatic (within 5 % of the full sync).
#  4. shadow_bench dense8b over ipc, checksums off and on (#31): longest snapshot wait < 1 ms.
#  5. FP8 (#30): --np 2 dense8b packed --fp8 (fp8/bf16 ~0.52-0.55x; wire 0.5761x / 0.5381x with
#     lm_head); fp8_quantize_bench --load dense8b (block128 1.8-2.3 TB/s; target 2).
# Files (8): build.txt, smoke.txt, ab.txt, delta.txt, shadow.txt, fp8.txt, bench.jsonl, summary.txt
set -u
out=${1:?usage: run.sh OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
left() { echo $((540 - (SECONDS - start))); }
j=$(nproc)
{
  date -u +"%Y-%m-%dT%H:%M:%SZ"; git log --oneline -1 2> /dev/null
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader
  cmake -S bench-old -B build/old -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DWEIGHTSYNC_WITH_CUDA=ON -DWEIGHTSYNC_WITH_NCCL=ON -DWEIGHTSYNC_BUILD_TESTS=OFF \
    -DWEIGHTSYNC_BUILD_BENCHMARKS=ON -DWEIGHTSYNC_BUILD_EXAMPLES=OFF > /tmp/cfg-a.txt 2>&1 &&
    cmake --build build/old -j $((j / 2)) --target weightsync_bench > /tmp/build-a.txt 2>&1 &
  pa=$!
  cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DWEIGHTSYNC_WITH_CUDA=ON -DWEIGHTSYNC_WITH_NCCL=ON -DWEIGHTSYNC_BUILD_TESTS=ON \
    -DWEIGHTSYNC_BUILD_BENCHMARKS=ON -DWEIGHTSYNC_BUILD_EXAMPLES=OFF -DWEIGHTSYNC_WERROR=ON > /dev/null &&
    cmake --build build/gpu -j $((j / 2)) --target weightsync_bench shadow_bench fp8_quantize_bench
  echo "build B rc=$? ($((SECONDS - start)) s)"
  wait $pa; echo "build A rc=$? ($((SECONDS - start)) s)"; tail -5 /tmp/build-a.txt
} > "$out/build.txt" 2>&1
cp build/old/benchmarks/weightsync_bench /tmp/bench-a 2> /dev/null || echo "no A bench" >> "$out/build.txt"
cp build/gpu/benchmarks/weightsync_bench /tmp/bench-b
b=build/gpu/benchmarks
timeout 150 ctest --test-dir build/gpu -L bench --output-on-failure > "$out/smoke.txt" 2>&1
echo "smoke rc=$? ($((SECONDS - start)) s)" >> "$out/smoke.txt"
ab() {  # $1 = label
  for v in a b; do
    [ -x /tmp/bench-$v ] || continue
    echo "== $1 $v ipc"
    timeout 70 /tmp/bench-$v --backend ipc --layout tiny,lora8b,small1b,dense8b --mode zerocopy \
      --iters 30 --warmup 3 --json "$out/bench.jsonl" 2>&1 | grep -vE "^\[|^#  Rank"; echo "rc=${PIPESTATUS[0]}"
    echo "== $1 $v nccl"
    timeout 40 /tmp/bench-$v --np 2 --layout tiny,tiny504 --mode zerocopy --iters 30 --warmup 3 \
      --json "$out/bench.jsonl" 2>&1 | grep -vE "^\[|^#  Rank"; echo "rc=${PIPESTATUS[0]}"
  done
}
{
  ab "no-MPS"
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/ws-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/ws-mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  if nvidia-cuda-mps-control -d; then
    ab "MPS"
    echo quit | nvidia-cuda-mps-control; sleep 2
  else
    echo "MPS daemon did not start"
  fi
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  echo "ab done ($((SECONDS - start)) s)"
} > "$out/ab.txt" 2>&1
{
  timeout 100 $b/weightsync_bench --np 2 --layout dense8b --mode packed --iters 2 --warmup 1 \
    --delta 0.01 --json "$out/bench.jsonl" 2>&1 | grep -vE "^\["; echo "nccl delta rc=${PIPESTATUS[0]}"
  timeout 60 $b/weightsync_bench --backend ipc --layout dense8b --mode packed,zerocopy \
    --iters 5 --warmup 2 --delta 0.001,0.01 --json "$out/bench.jsonl" 2>&1 | grep -vE "^\["
  echo "ipc delta rc=${PIPESTATUS[0]} ($((SECONDS - start)) s)"
} > "$out/delta.txt" 2>&1
for ck in off on; do
  if [ "$(left)" -gt 150 ]; then
    timeout 40 $b/shadow_bench --layout dense8b --syncs 10 --checksum $ck --json "$out/bench.jsonl"
    echo "shadow_bench checksum $ck rc=$?"
  else echo "shadow_bench checksum $ck not run: $(left) s left"; fi
done > "$out/shadow.txt" 2>&1
{
  if [ "$(left)" -gt 100 ]; then
    timeout 90 $b/weightsync_bench --np 2 --layout dense8b --mode packed --fp8 --warmup 1 --iters 3 \
      --json "$out/bench.jsonl" 2>&1 | grep -vE "^\["; echo "fp8 refit rc=${PIPESTATUS[0]}"
  else echo "fp8 refit not run: $(left) s left"; fi
  l=$(left)
  if [ "$l" -gt 30 ]; then
    timeout $((l - 5)) $b/fp8_quantize_bench --reps 20 --trials 7 --load dense8b \
      --json "$out/bench.jsonl"; echo "quantize rc=$?"
  else echo "quantize not run: $l s left"; fi
} > "$out/fp8.txt" 2>&1
{
  echo "=== run 63 ($((SECONDS - start)) s) ==="
  grep -E "rc=|GPU|H200|H100" "$out/build.txt" | head -5
  grep -E "tests passed|tests failed|\*\*\*|smoke rc" "$out/smoke.txt"
  grep -E "^==|^ +[0-9]+ .*(raw|zerocopy)|rc=|MPS" "$out/ab.txt" | cut -c1-150
  grep -E "^ +[0-9]+ |delta [0-9.]+: payload|rc=" "$out/delta.txt" | cut -c1-200
  grep -vE "^#  " "$out/shadow.txt" | grep -E "forward|wait|landed|sync:|bit-exact|mixed|rc=|not run"
  grep -E "^ +[0-9]+ .*(raw-nccl|packed)|fp8 packed:|wire|rc=|not run|block128 |load " "$out/fp8.txt" | grep -vE "per_|k_proj" | cut -c1-200 | head -30
} | tee "$out/summary.txt"
