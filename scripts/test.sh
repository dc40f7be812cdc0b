#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Builds weightsync and runs its tests: installs missing Debian packages, configures, builds, runs
# every CTest test. GPU tests report "Skipped" with their reason on a machine without a GPU.
#   bash scripts/test.sh [extra cmake args...]
# Environment: WEIGHTSYNC_FUZZ=OFF skips the fuzz tests (label "fuzz", 20 s per parser; they need
# clang and its libFuzzer runtime, installed when missing), ON (CI) fails where they cannot be
# installed or built, AUTO (default) runs them where they can; WEIGHTSYNC_SANITIZE="asan" or
# "asan tsan" then runs
# scripts/sanitize.sh for each (CI sets asan).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
# python3-torch (Debian: torch 1.13, CPU; 177 packages, ~148 MB of archives on a bare Debian 12)
# lets the TCPStore interop tests talk to torch's own client and server; they skip without it.
# WEIGHTSYNC_TEST_EXTRA_PKGS="" leaves it out.
ws_install_deps ${WEIGHTSYNC_TEST_EXTRA_PKGS-python3-torch}
# The fuzz tests (label "fuzz") need clang; WEIGHTSYNC_FUZZ=OFF leaves them out.
[ "${WEIGHTSYNC_FUZZ:-AUTO}" = OFF ] || ws_install_fuzz_deps
build=${WEIGHTSYNC_BUILD_DIR:-build/test}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWEIGHTSYNC_FUZZ="${WEIGHTSYNC_FUZZ:-AUTO}" "$@"
cmake --build "$build" -j "$(nproc)"
ctest --test-dir "$build" --output-on-failure --no-tests=error -j "$(nproc)"
# Sanitizer runs of the CPU tests: WEIGHTSYNC_SANITIZE="asan" (what CI sets), "asan tsan", or "".
for mode in ${WEIGHTSYNC_SANITIZE:-}; do
  echo "== sanitizer run: $mode"
  bash scripts/sanitize.sh "$mode"
done
