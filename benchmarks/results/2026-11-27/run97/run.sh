#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 97 (2026-11-27, one GPU, MPS). A = 9a63309 (bench-old/, carried: the
# handshake in host memory), B = this tree: an eager producer no longer orders its K slot streams
# after the source stream (one event wait each) and skips its final drain.
#   bash benchmarks/results/2026-11-27/run97/run.sh OUT_DIR
# Builds A's bench and B's bench and tests; the NCCL, checksum and shadow GPU tests but the three
# slow ones; then nccl --np 2 tiny zerocopy (shm barrier), 100 iterations, A B A B A B.
# Predicted: B 2-5 us faster on tiny (the consumer's row: the producer's contribution leaves
# earlier by the K = 2 waits); tests pass.
set -u
out=${1:?usage: run.sh OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
{
  cmake -S bench-old -B build/old -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DWEIGHTSYNC_WITH_CUDA=ON -DWEIGHTSYNC_WITH_NCCL=ON -DWEIGHTSYNC_BUILD_TESTS=OFF \
    -DWEIGHTSYNC_BUILD_BENCHMARKS=ON -DWEIGHTSYNC_BUILD_EXAMPLES=OFF > /tmp/cfg-a.txt 2>&1 &&
    cmake --build build/old -j 4 --target weightsync_bench > /tmp/build-a.txt 2>&1 &
  pa=$!
  WS_CPU_TESTS=0 WS_BENCH=none WS_CTEST_ARGS="-R gpu.nccl|gpu.checksum|gpu.shadow -E full-size|back-to-back" \
    bash scripts/gpu-check.sh "$out/gpu" > "$out/gpu-check.txt" 2>&1
  echo "gpu-check rc=$? ($((SECONDS - start)) s)" >> "$out/gpu-check.txt"
  wait $pa; echo "build A rc=$? ($((SECONDS - start)) s)"; tail -2 /tmp/build-a.txt
} > "$out/build.txt" 2>&1
cp build/old/benchmarks/weightsync_bench /tmp/bench-a 2> /dev/null || echo "no A bench" >> "$out/build.txt"
cp build/gpu/benchmarks/weightsync_bench /tmp/bench-b
export CUDA_MPS_PIPE_DIRECTORY=/tmp/ws-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/ws-mps-log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d
{
  for pass in 1 2 3; do
    for v in a b; do
      echo "== pass $pass $v"
      timeout 60 /tmp/bench-$v --np 2 --layout tiny --mode zerocopy --iters 100 --warmup 10 \
        --barrier shm --json "$out/bench.jsonl" 2>&1 | grep -E "raw-nccl|zerocopy"
      echo "rc=${PIPESTATUS[0]} ($((SECONDS - start)) s)"
    done
  done
} > "$out/rows.txt" 2>&1
echo quit | nvidia-cuda-mps-control; sleep 1
cat "$out/build.txt"; cat "$out/rows.txt"; tail -6 "$out/gpu-check.txt"
