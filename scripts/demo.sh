#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# The main job: a C++ trainer trains a small model and pushes its weights into a C++ inference
# server through vLLM's HTTP routes; the server's answers go from noise to right.
#   bash scripts/demo.sh                 # host (CPU) backend, no GPU needed
#   bash scripts/demo.sh --backend nccl  # NCCL: trainer on GPU 0, server on GPU 1
#   bash scripts/demo.sh --shadow        # shadow mode: the server answers during syncs, no pause
set -euo pipefail
cd "$(dirname "$0")/.."
backend=host
shadow=off
while [ $# -gt 0 ]; do
  case "$1" in
    --backend) backend=${2:?--backend needs host or nccl}; shift 2 ;;
    --shadow) shadow=on; shift ;;
    *) echo "usage: bash scripts/demo.sh [--backend host|nccl] [--shadow]" >&2; exit 2 ;;
  esac
done
source scripts/deps.sh
ws_install_deps
build=${WEIGHTSYNC_BUILD_DIR:-build/demo}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DWEIGHTSYNC_BUILD_TESTS=OFF \
  -DWEIGHTSYNC_BUILD_BENCHMARKS=OFF -DWEIGHTSYNC_WITH_HTTP=ON >/dev/null
cmake --build "$build" --target inference_server trainer -j "$(nproc)"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo 18080)
server_device=0; [ "$backend" = nccl ] && server_device=1
"$build/examples/inference_server" --port "$port" --backend "$backend" --device "$server_device" \
  --shadow "$shadow" &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 100); do  # wait until the server answers
  (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null && break
  sleep 0.1
done
"$build/examples/trainer" --server "http://127.0.0.1:$port" --backend "$backend" --device 0 \
  --shadow "$shadow"
kill -TERM $server 2>/dev/null || true
wait $server 2>/dev/null || true
