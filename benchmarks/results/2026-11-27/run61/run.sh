#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 61 (2026-11-27, one GPU), the merged tree of round 3 (schedule, layout, delta #29, fp8 #30,
# checksums and shadow #31, the ipc review fixes): build every target, every GPU test but the five
# interop ones (run 62 takes those), then the CPU suite under the GPU machine's Catch2 v3.
#   bash benchmarks/results/2026-11-27/run61/run.sh OUT_DIR     (about 7-8 minutes on an H200)
# Files in OUT_DIR (at most 8): env.txt, build-tail.txt, ctest-gpu.txt, summary.txt,
# failures.txt, cpu.txt. The summary is printed last.
set -u
out=${1:?usage: run.sh OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
tmp=$(mktemp -d)
WS_CPU_TESTS=0 WS_BENCH=none WS_CTEST_ARGS="-E interop --timeout 150" \
  timeout 470 bash scripts/gpu-check.sh "$tmp/check" > "$out/gpu-check.txt" 2>&1
echo "gpu-check rc=$? ($((SECONDS - start)) s)" >> "$out/gpu-check.txt"
cp "$tmp/check/env.txt" "$tmp/check/ctest-gpu.txt" "$tmp/check/summary.txt" "$out/" 2> /dev/null
tail -30 "$tmp/check/build.txt" > "$out/build-tail.txt" 2> /dev/null
grep -B5 -A60 "\*\*\*Failed\|FAILED:\|\*\*\*Timeout\|\*\*\*Exception" "$tmp/check/ctest-gpu.txt" 2> /dev/null | head -400 > "$out/failures.txt"
left=$((575 - (SECONDS - start)))
if [ "$left" -gt 30 ]; then
  timeout "$left" ctest --test-dir build/gpu -LE gpu --no-tests=error -j 16 > "$out/cpu.txt" 2>&1
  echo "cpu rc=$? ($((SECONDS - start)) s)" >> "$out/cpu.txt"
else
  echo "cpu suite not run: ${left} s left" > "$out/cpu.txt"
fi
rm -rf "$tmp"
echo "=== run 61 ($((SECONDS - start)) s) ==="
grep -E "build ok|BUILD FAILED|gpu-check rc" "$out/gpu-check.txt"
cat "$out/summary.txt" 2> /dev/null | tail -15
grep -E "tests passed|tests failed|\*\*\*Failed|cpu rc|not run" "$out/cpu.txt" | head -12
