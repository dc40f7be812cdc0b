#!/usr/bin/env bash
# Run 59 (2026-11-27, one GPU, after run 58 on the same warm machine): before/after #26 part 1 in one run under
# one MPS daemon. A: the tree of 98bf388 (protocol 3), in bench-old/ (carried);
# B: this tree (protocol 4; build/gpu of run 58). Alternated A B A B: ipc tiny and dense8b
# zerocopy (20 iterations), nccl tiny and tiny504 zerocopy, 2 ranks sharing the GPU (30).
set -u
out=$1
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
cmake -S bench-old -B build/old -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DWEIGHTSYNC_WITH_CUDA=ON -DWEIGHTSYNC_WITH_NCCL=ON -DWEIGHTSYNC_BUILD_TESTS=OFF \
  -DWEIGHTSYNC_BUILD_BENCHMARKS=ON -DWEIGHTSYNC_BUILD_EXAMPLES=OFF > "$out/build-a.txt" 2>&1 &&
  cmake --build build/old -j "$(nproc)" --target weightsync_bench >> "$out/build-a.txt" 2>&1 ||
  { tail -20 "$out/build-a.txt"; exit 1; }
cmake --build build/gpu -j "$(nproc)" --target weightsync_bench > "$out/build-b.txt" 2>&1 ||
  { tail -20 "$out/build-b.txt"; exit 1; }
cp build/old/benchmarks/weightsync_bench /tmp/bench-a
cp build/gpu/benchmarks/weightsync_bench /tmp/bench-b
export CUDA_MPS_PIPE_DIRECTORY=/tmp/ws-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/ws-mps-log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d || { echo "no MPS daemon"; exit 1; }
trap 'echo quit | nvidia-cuda-mps-control' EXIT
for i in 1 2; do
  for v in a b; do
    timeout 60 /tmp/bench-$v --backend ipc --layout tiny,dense8b --mode zerocopy --iters 20 \
      --json "$out/ipc-$v.jsonl" > "$out/ipc-$v-$i.txt" 2>&1; echo "rc=$?" >> "$out/ipc-$v-$i.txt"
    timeout 60 /tmp/bench-$v --np 2 --layout tiny,tiny504 --mode zerocopy --iters 30 \
      --json "$out/nccl-$v.jsonl" > "$out/nccl-$v-$i.txt" 2>&1; echo "rc=$?" >> "$out/nccl-$v-$i.txt"
  done
done
grep -h "tiny\|dense8b" "$out"/ipc-*-?.txt "$out"/nccl-*-?.txt | head -40
