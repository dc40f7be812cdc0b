#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# The benchmark runs behind BENCHMARKS.md, on a machine with 2 GPUs, after scripts/gpu-check.sh
# has built build/gpu:   bash scripts/bench-sweep.sh LOG_DIR WHAT...   (WHAT: quick memory blocking
# final full python; several run in order: "final python" is the side-by-side run)
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0
logs=${1:-gpu-logs}
shift
[ $# -eq 0 ] && set -- full
mkdir -p "$logs"
bench=${WEIGHTSYNC_BUILD_DIR:-build/gpu}/benchmarks/weightsync_bench
run() {  # run NAME ARGS...
  local name=$1
  shift
  echo "== weightsync_bench $*" | tee -a "$logs/bench.txt"
  timeout 300 "$bench" "$@" --json "$logs/bench.jsonl" 2>/dev/null | tee -a "$logs/bench.txt"
}
for what in "$@"; do
case "$what" in
  quick)
    run all --layout dense8b,small1b,moe30b --mode packed,zerocopy --buffer-size 1G \
      --num-buffers 2 --direct 0,1M,4M,32M --iters 10 --warmup 3
    run lora --layout lora8b --mode packed,zerocopy --buffer-size 4M,16M,1G --num-buffers 2,3 \
      --direct 0,64K --iters 20 --warmup 5
    run dense --layout dense8b,small1b --mode zerocopy,unpacked-zc --buffer-size 256M,2G --num-buffers 2,3 \
      --direct 0,4M --iters 10 --warmup 3
    echo "== copy engines instead of the batched copy kernel (WEIGHTSYNC_COPY=ce)" | tee -a "$logs/bench.txt"
    WEIGHTSYNC_COPY=ce run ce --layout dense8b,moe30b,lora8b --mode zerocopy --buffer-size 1G --num-buffers 2 \
      --iters 10 --warmup 3
    ;;
  memory)
    for gap in 0 4K; do
      run mem --layout dense8b,small1b,moe30b --mode zerocopy --buffer-size 1G,2G --num-buffers 2 \
        --direct 0,1M,4M --gap $gap --iters 8 --warmup 2
      run lora --layout lora8b --mode zerocopy --buffer-size 16M,1G --num-buffers 2,3 --gap $gap \
        --iters 20 --warmup 5
    done
    ;;
  blocking)
    for b in "" --blocking; do
      run blk --layout lora8b,small1b,dense8b --mode zerocopy --buffer-size 1G --num-buffers 2 $b \
        --iters 10 --warmup 3
      run blk --layout lora8b --mode zerocopy --protocol vllm --buffer-size 1G --num-buffers 2 $b \
        --iters 10 --warmup 3
    done
    ;;
  final)
    run defaults --layout dense8b,moe30b,small1b,lora8b --mode packed,zerocopy,unpacked-zc \
      --buffer-size 1G --num-buffers 2 --iters 10 --warmup 3
    run blocking --layout dense8b,moe30b,small1b,lora8b --mode zerocopy --buffer-size 1G \
      --num-buffers 2 --blocking --iters 10 --warmup 3
    run sweep --layout dense8b,small1b,lora8b --mode zerocopy,packed \
      --buffer-size 16M,64M,256M,1G,2G --num-buffers 1,2,3 --iters 8 --warmup 2
    ;;
  full)
    for layout in dense8b moe30b small1b lora8b; do
      run "$layout" --layout "$layout" --mode packed,zerocopy,unpacked,unpacked-zc \
        --buffer-size 16M,64M,256M,1G,2G --num-buffers 1,2,3 --iters 10 --warmup 3
    done
    ;;
  python)
    for layout in dense8b moe30b small1b lora8b; do
      timeout 300 python3 benchmarks/python/vllm_style_bench.py --layout "$layout" \
        --buffer-size 1073741824 --num-buffers 2 --iters 10 --warmup 3 \
        --json "$logs/python.jsonl" 2>/dev/null | tee -a "$logs/python.txt"
    done
    ;;
esac
done
