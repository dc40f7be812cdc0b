#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 117 (2026-11-28, one GPU): after a review of the descriptor tables: the table allocates only
# in reserve() (the pipeline reserves when a transfer begins, ipc before its batch), keeps outgrown
# buffers (a cudaFree would wait for the whole device, NCCL included), and waits on an upload or a
# reader by its event rather than by stream handle; the table test's memsets now run on its stream.
# With the device time left: the cuda policy tests, the NCCL round trips and eager syncs, ipc
# colocated round trips.
#   bash benchmarks/results/2026-11-28/run117/run.sh OUT_DIR
set -u
out=${1:?usage: run.sh OUT_DIR}
mkdir -p "$out"; out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DWEIGHTSYNC_WITH_CUDA=ON -DWEIGHTSYNC_WITH_NCCL=ON -DWEIGHTSYNC_BUILD_TESTS=ON -DWEIGHTSYNC_BUILD_GPU_TESTS=ON \
  -DWEIGHTSYNC_BUILD_BENCHMARKS=OFF -DWEIGHTSYNC_BUILD_EXAMPLES=OFF > "$out/build.txt" 2>&1 &&
  cmake --build build/gpu -j 16 --target weightsync_gpu_tests weightsync_nccl_tests >> "$out/build.txt" 2>&1
echo "build rc=$? ($((SECONDS - start)) s)"
g=build/gpu/tests/gpu
for t in "$g/weightsync_gpu_tests|cuda policy*" "$g/weightsync_gpu_tests|ipc colocated round trips*" \
         "$g/weightsync_nccl_tests|nccl round trips*" "$g/weightsync_nccl_tests|nccl eager*" \
         "$g/weightsync_nccl_tests|nccl syncs of 4 to 32 KiB*"; do
  bin=${t%%|*}; name=${t#*|}
  timeout 60 "$bin" "$name" > "$out/t.txt" 2>&1; rc=$?
  echo "rc=$rc $name: $(grep -E "^(All tests passed|test cases:)" "$out/t.txt" | head -1)"
  cat "$out/t.txt" >> "$out/tests.txt"
done
echo "done ($((SECONDS - start)) s)"
