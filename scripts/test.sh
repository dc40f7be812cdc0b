#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Builds weightsync and runs its tests: installs missing Debian packages, configures, builds, runs
# every CTest test, and prints the time each phase took. GPU tests are built and run only where a
# GPU is present (WEIGHTSYNC_BUILD_GPU_TESTS=AUTO; pass -DWEIGHTSYNC_BUILD_GPU_TESTS=ON to build
# them anyway). With WEIGHTSYNC_SANITIZE=asan (CI) the unit and e2e tests run once, in the ASan +
# UBSan run, not also in the plain build.
#   bash scripts/test.sh [--quick] [extra cmake args...]
#   --quick   builds only the CPU unit tests and runs them (ctest -L unit): the fast inner loop.
# Environment: WEIGHTSYNC_FUZZ=OFF skips the fuzz tests (label "fuzz", WEIGHTSYNC_FUZZ_SECONDS per
# parser after replaying its corpus; they need clang and its libFuzzer runtime, installed when
# missing), ON (CI) fails where they cannot be installed or built, AUTO (default) runs them where
# they can; WEIGHTSYNC_SANITIZE="asan" or "asan tsan" then runs scripts/sanitize.sh for each (CI
# sets asan). CMAKE_CXX_COMPILER_LAUNCHER=ccache (environment) speeds up rebuilds.
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
if [ "${1:-}" = --quick ]; then
  quick=1
  shift
fi
times=()
phase_start=$SECONDS
phase_done() {
  times+=("$1 $((SECONDS - phase_start)) s")
  phase_start=$SECONDS
}
# Every phase's time is printed at the end, failed or not: a phase that stopped the script is
# named with the time it ran until then and "FAILED".
report_times() {
  local rc=$? IFS=,
  if [ "$rc" -ne 0 ]; then
    times+=("${running_phase:-?} $((SECONDS - phase_start)) s FAILED (exit $rc)")
  fi
  echo "== time per phase: ${times[*]} (total $SECONDS s)"
}
trap report_times EXIT
running_phase=deps
source scripts/deps.sh
# python3-torch (Debian: torch 1.13, CPU; 177 packages, ~148 MB of archives on a bare Debian 12)
# lets the TCPStore interop tests talk to torch's own client and server; they skip without it.
# WEIGHTSYNC_TEST_EXTRA_PKGS="" leaves it out.
extra_pkgs=${WEIGHTSYNC_TEST_EXTRA_PKGS-python3-torch}
# The Python package (python/, WEIGHTSYNC_BUILD_PYTHON=AUTO) and its tests (ctest label "python").
extra_pkgs+=" ${WEIGHTSYNC_TEST_PYTHON_PKGS-python3-dev pybind11-dev python3-pytest python3-numpy}"
if [[ " $extra_pkgs " == *" python3-torch "* && "${WEIGHTSYNC_SKIP_DEPS:-0}" != 1 ]] &&
   ! dpkg-query -W -f='${Status}' python3-torch 2>/dev/null | grep -q "install ok installed"; then
  echo "== python3-torch (torch 1.13, CPU; ~177 packages on a bare Debian 12) is for the TCPStore" \
       "interop tests against torch's own client and server; WEIGHTSYNC_TEST_EXTRA_PKGS=\"\" leaves it out"
fi
ws_install_deps $extra_pkgs
# The fuzz tests (label "fuzz") need clang; WEIGHTSYNC_FUZZ=OFF leaves them out.
fuzz=${WEIGHTSYNC_FUZZ:-AUTO}
[ $quick = 1 ] && fuzz=OFF
[ "$fuzz" = OFF ] || ws_install_fuzz_deps
phase_done deps
running_phase=configure
build=${WEIGHTSYNC_BUILD_DIR:-build/test}
launcher=()
[ -n "${CMAKE_CXX_COMPILER_LAUNCHER:-}" ] && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER="$CMAKE_CXX_COMPILER_LAUNCHER")
# -O1 -g1 (line tables): half the compile time of -O2 -g, and the tests run as fast (they wait on
# sockets and processes, not on code). The test sources build as unity translation units
# (WEIGHTSYNC_TEST_UNITY, tests/CMakeLists.txt). Header checks: WEIGHTSYNC_HEADER_CHECK=EACH (one
# translation unit per public header, ~100 s more; CI sets it) or ALL (the default here: one
# translation unit with every header).
# When an ASan run follows (WEIGHTSYNC_SANITIZE has asan: CI), the CPU unit and e2e tests are
# built and run there, under ASan + UBSan, and not here as well (WEIGHTSYNC_TEST_CPU_SUITES=OFF):
# this build then holds the rest (header checks, fuzz tests, examples, benchmarks, consumers).
cpu_suites=ON
for mode in ${WEIGHTSYNC_SANITIZE:-}; do
  if [ "$mode" = asan ] && [ $quick = 0 ]; then cpu_suites=OFF; fi
done
if [ $cpu_suites = OFF ]; then
  echo "== the unit and e2e tests are built and run once, in the ASan + UBSan run at the end"
fi
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWEIGHTSYNC_FUZZ="$fuzz" \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DWEIGHTSYNC_TEST_CPU_SUITES=$cpu_suites \
  -DWEIGHTSYNC_HEADER_CHECK="${WEIGHTSYNC_HEADER_CHECK:-ALL}" "${launcher[@]}" "$@"
phase_done configure
running_phase=build
if [ $quick = 1 ]; then
  cmake --build "$build" -j "$(nproc)" --target weightsync_unit_tests
  phase_done build
  running_phase=tests
  ctest --test-dir "$build" --output-on-failure --no-tests=error -j "$(nproc)" -L unit
  phase_done tests
  exit 0
fi
cmake --build "$build" -j "$(nproc)"
phase_done build
running_phase=tests
ctest --test-dir "$build" --output-on-failure --no-tests=error -j "$(nproc)"
phase_done tests
# Sanitizer runs of the CPU tests: WEIGHTSYNC_SANITIZE="asan" (what CI sets), "asan tsan", or "".
for mode in ${WEIGHTSYNC_SANITIZE:-}; do
  echo "== sanitizer run: $mode"
  running_phase="sanitizer-$mode"
  bash scripts/sanitize.sh "$mode"
  phase_done "sanitizer-$mode"
done
