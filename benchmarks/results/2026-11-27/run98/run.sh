#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Run 98 (2026-11-27, one GPU, MPS): run 97 found B (the eager producer's trims) 0.6-13.9 us
# slower than A on tiny, where 2-5 us faster was predicted. Again, with six alternated passes and
# a third tree: A = 9a63309 (bench-old/), B = d107491 (this tree), C = B with the producer's final
# drain kept (bench-c/). All three built the same way (Release, tests off).
#   bash benchmarks/results/2026-11-27/run98/run.sh OUT_DIR
set -u
out=${1:?usage: run.sh OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0
start=$SECONDS
build() {  # $1 = source dir, $2 = build dir
  cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DWEIGHTSYNC_WITH_CUDA=ON -DWEIGHTSYNC_WITH_NCCL=ON -DWEIGHTSYNC_BUILD_TESTS=OFF \
    -DWEIGHTSYNC_BUILD_BENCHMARKS=ON -DWEIGHTSYNC_BUILD_EXAMPLES=OFF > /dev/null 2>&1 &&
    cmake --build "$2" -j 5 --target weightsync_bench > "$2.log" 2>&1
}
{
  build bench-old build/old & pa=$!
  build . build/new & pb=$!
  build bench-c build/c & pc=$!
  wait $pa; echo "A rc=$?"; wait $pb; echo "B rc=$?"; wait $pc; echo "C rc=$? ($((SECONDS - start)) s)"
} > "$out/build.txt" 2>&1
cp build/old/benchmarks/weightsync_bench /tmp/bench-a; cp build/new/benchmarks/weightsync_bench /tmp/bench-b
cp build/c/benchmarks/weightsync_bench /tmp/bench-c
export CUDA_MPS_PIPE_DIRECTORY=/tmp/ws-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/ws-mps-log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d
{
  for pass in 1 2 3 4 5 6; do
    for v in a b c; do
      echo "== pass $pass $v"
      timeout 60 /tmp/bench-$v --np 2 --layout tiny --mode zerocopy --iters 100 --warmup 10 \
        --barrier shm --json "$out/bench.jsonl" 2>&1 | grep -E "raw-nccl|zerocopy|host us"
    done
  done
} > "$out/rows.txt" 2>&1
echo quit | nvidia-cuda-mps-control; sleep 1
cat "$out/build.txt"; grep -E "==|zerocopy|raw" "$out/rows.txt" | awk '/==/{p=$3" "$4} /raw-nccl/{r=$7} /zerocopy/{print p, "raw", r, "tiny", $7}'
