#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Issue #30 (FP8 on the fly), branch issue-30, one H200: bash run.sh OUT_DIR (under 8 minutes).
# Files in OUT_DIR (8): build.txt, ctest.txt, ctest.xml, summary.txt, quantize.txt,
# quantize.jsonl, refit.txt, refit.jsonl. The short summary is printed last.
#
# 1. build (as scripts/gpu-check.sh, into build/gpu): the GPU tests, fp8_quantize_bench,
#    weightsync_bench.
# 2. GPU tests matching "fp8" (gpu.fp8 kernels vs host and vs torch, gpu.fp8 on load, gpu.nccl fp8
#    source incl. the ring rounds) and "loading gpu" (the planner's gathers, unchanged kernels but
#    a changed GatherOp / load()).
#    Predicted: all pass; quantize on load bit-exact with the host path for bf16 and fp32, aligned
#    and misaligned sources; the ring rounds bit-exact with K = 1, 2, 3 and unpacked.
# 3. fp8_quantize_bench: block128 / ue8m0 / per-tensor / per-channel throughput on dense8b and
#    moe30b shapes (GB/s of bf16 input, median of 7 x 20 launches, checked against the host).
#    Predicted: block128 on gate/down/embed 1.8-2.3 TB/s (run 31: 1.12-1.26); q_proj (L2-resident
#    in part) higher; moe shapes (3 MB, 96 CTAs) lower, launch-bound.
#    --load dense8b,moe30b: quantize on load into vLLM FP8 parameters at TP 1 and 2, checked
#    against the FP8 checkpoint path. Predicted: dense8b TP 1 ~8-12 ms, TP 2 ~5-7 ms, 0 wrong;
#    moe30b TP 1 ~100-150 ms (18 432 expert launches of ~6 us each: launch-bound), 0 wrong;
#    moe30b needs 61 + 2 x 31 GB here (fits 141 GB; an 80 GB card prints NOT RUN).
# 4. weightsync_bench --np 2 (2 ranks share the GPU: NCCL socket transport, functional figures),
#    packed, bf16 then fp8 (Fp8Source into the producer's ring): dense8b (warmup 1, iters 3), then
#    moe30b (warmup 1, iters 2: 15 s per bf16 sync; skipped if under 150 s remain).
#    Predicted: dense8b fp8/bf16 time ~0.52-0.55x (run 34: 0.525x with arenas), wire 0.5761x
#    (0.5381x with lm_head quantized), producer extra memory ~0.01 MB (run 34: 3322.7 MB);
#    moe30b wire 0.5105x, time ~0.52-0.56x, 0 wrong; two ranks of moe30b: 2 x ~65 GB.
set -u
out=${1:?usage: run.sh OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
build=build/gpu
{
  date -u +"%Y-%m-%dT%H:%M:%SZ"; git log --oneline -1
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DWEIGHTSYNC_WITH_CUDA=ON -DWEIGHTSYNC_WITH_NCCL=ON -DWEIGHTSYNC_BUILD_TESTS=ON \
    -DWEIGHTSYNC_BUILD_GPU_TESTS=ON -DWEIGHTSYNC_BUILD_BENCHMARKS=ON -DWEIGHTSYNC_BUILD_EXAMPLES=OFF
  cmake --build "$build" -j "$(nproc)" --target weightsync_gpu_tests weightsync_nccl_tests \
    fp8_quantize_bench weightsync_bench
} > "$out/build.txt" 2>&1 || { tail -40 "$out/build.txt"; echo "BUILD FAILED"; exit 1; }
echo "build ok ($((SECONDS - start)) s)"
timeout 200 ctest --test-dir "$build" -L gpu -R "fp8|loading gpu" --output-on-failure \
  --no-tests=error -V --output-junit "$out/ctest.xml" > "$out/ctest.txt" 2>&1
python3 scripts/ctest-summary.py "$out/ctest.xml" --list > "$out/summary.txt" 2>&1
echo "tests done ($((SECONDS - start)) s)"
timeout 150 "$build/benchmarks/fp8_quantize_bench" --reps 20 --trials 7 --load dense8b,moe30b \
  --json "$out/quantize.jsonl" > "$out/quantize.txt" 2>&1; echo "rc=$?" >> "$out/quantize.txt"
echo "quantize bench done ($((SECONDS - start)) s)"
timeout 120 "$build/benchmarks/weightsync_bench" --np 2 --layout dense8b --mode packed --fp8 \
  --warmup 1 --iters 3 --json "$out/refit.jsonl" > "$out/refit.txt" 2>&1
echo "rc=$? (dense8b)" >> "$out/refit.txt"
left=$((470 - (SECONDS - start)))
if [ "$left" -gt 150 ]; then
  timeout "$left" "$build/benchmarks/weightsync_bench" --np 2 --layout moe30b --mode packed --fp8 \
    --warmup 1 --iters 2 --json "$out/refit.jsonl" >> "$out/refit.txt" 2>&1
  echo "rc=$? (moe30b)" >> "$out/refit.txt"
else
  echo "moe30b skipped: ${left} s left" >> "$out/refit.txt"
fi
echo "=== summary ($((SECONDS - start)) s) ==="
tail -3 "$out/summary.txt"
grep -E "block128 |load |check:" "$out/quantize.txt" | grep -vE "per_|k_proj" | head -24
grep -E "^ +[0-9]+ .*(raw-nccl|packed)|fp8 packed:|rc=|skipped|NOT RUN" "$out/refit.txt" | cut -c1-200
