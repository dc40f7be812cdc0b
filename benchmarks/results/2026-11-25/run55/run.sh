#!/usr/bin/env bash
# Run 55 (H200): the NCCL handshake as one ncclAllGather against grouped broadcasts, in one run
# under one MPS daemon, now that the barrier no longer puts ~50 us of skew between the ranks
# (run 54). A: the tree (all-gather); B: communicator-broadcasts.hpp.txt (the grouped broadcasts,
# as at b37b68b). Alternated A B A B, tiny and tiny504 zerocopy, 50 iterations each.
set -u
out=$1
here=$(dirname "$0")
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
WS_SKIP_TESTS=1 WS_CPU_TESTS=0 WS_BENCH=none WS_BUILD_TARGETS=weightsync_bench \
  timeout 300 bash scripts/gpu-check.sh "$out/b" > "$out/build-a.txt" 2>&1 || { tail -20 "$out/build-a.txt"; exit 1; }
rm -rf "$out/b"
cp build/gpu/benchmarks/weightsync_bench /tmp/bench-a
cp include/weightsync/nccl/communicator.hpp /tmp/communicator-a.hpp
cp "$here/communicator-broadcasts.hpp.txt" include/weightsync/nccl/communicator.hpp
cmake --build build/gpu --target weightsync_bench > "$out/build-b.txt" 2>&1 || { tail -20 "$out/build-b.txt"; exit 1; }
cp build/gpu/benchmarks/weightsync_bench /tmp/bench-b
cp /tmp/communicator-a.hpp include/weightsync/nccl/communicator.hpp
export CUDA_MPS_PIPE_DIRECTORY=/tmp/ws-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/ws-mps-log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d || { echo "no MPS daemon"; exit 1; }
trap 'echo quit | nvidia-cuda-mps-control' EXIT
for i in 1 2; do
  for v in a b; do
    timeout 60 /tmp/bench-$v --np 2 --layout tiny,tiny504 --mode zerocopy --iters 50 \
      --json "$out/$v.jsonl" > "$out/$v-$i.txt" 2>&1; echo "rc=$?" >> "$out/$v-$i.txt"
  done
done
