#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Long libFuzzer runs of weightsync's parsers (CTest runs each for WEIGHTSYNC_FUZZ_SECONDS only).
#   bash scripts/fuzz.sh [seconds per target, default 600] [target...]   (targets: tests/fuzz/fuzz_*.cpp)
# Builds tests/fuzz with clang into build/fuzz (WEIGHTSYNC_FUZZ_BUILD_DIR), then fuzzes each target
# with -jobs=$(nproc) workers. New interesting inputs land in build/fuzz/work/<target>; a crash in
# build/fuzz/artifacts/. Keep a fixed crash's input as a regression case: copy it into
# tests/fuzz/corpus/<target>/ (every CTest run replays that corpus).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
ws_install_deps
seconds=${1:-600}
shift || true
build=${WEIGHTSYNC_FUZZ_BUILD_DIR:-build/fuzz}
mkdir -p "$build"
build=$(cd "$build" && pwd)
corpus=$(pwd)/tests/fuzz/corpus
cxx=$(command -v clang++ || true)
[ -n "$cxx" ] || { echo "fuzz.sh: clang++ not found (apt-get install clang libclang-rt-<version>-dev)" >&2; exit 1; }
cmake -S tests/fuzz -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER="$cxx" >/dev/null
cmake --build "$build"
targets=("$@")
[ ${#targets[@]} -gt 0 ] || read -r -a targets <<<"$(tr ';' ' ' <"$build/targets.txt")"
mkdir -p "$build/artifacts"
status=0
for t in "${targets[@]}"; do
  mkdir -p "$build/work/$t"
  echo "== fuzz_$t for ${seconds} s"
  # (in the build dir: with -jobs, libFuzzer writes each worker's fuzz-<n>.log to the cwd)
  if ! (cd "$build" && "$build/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -jobs="$(nproc)" -workers="$(nproc)" -print_final_stats=1 \
      -artifact_prefix="$build/artifacts/$t-" "$build/work/$t" "$corpus/$t" \
      > "$build/fuzz_$t.log" 2>&1); then
    echo "== fuzz_$t FAILED: see $build/fuzz_$t.log and $build/artifacts/" >&2
    status=1
  fi
  grep -h "stat::number_of_executed_units" "$build"/fuzz-*.log "$build/fuzz_$t.log" 2>/dev/null |
    awk -v t="$t" '{n += $2} END {print "== fuzz_" t ": " n " executions"}'
  rm -f "$build"/fuzz-*.log
done
exit $status
