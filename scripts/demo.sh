#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# The main job. Until the end-to-end demo lands: prints the chunk plan and ring memory of a
# benchmark layout.   bash scripts/demo.sh [layout] [B] [K]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
ws_install_deps
build=${WEIGHTSYNC_BUILD_DIR:-build/demo}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DWEIGHTSYNC_BUILD_TESTS=OFF >/dev/null
cmake --build "$build" --target plan_layout -j "$(nproc)"
"$build/examples/plan_layout" "$@"
