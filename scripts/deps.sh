#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Installs the Debian packages weightsync's build needs, if any is missing. Sourced by test.sh/demo.sh.
# Another apt/dpkg process (unattended-upgrades on a fresh cloud VM, a second build) may hold the
# dpkg lock: we wait for it, up to WEIGHTSYNC_APT_LOCK_WAIT seconds (default 600), saying so.

# Runs "apt-get $@", retrying while another process holds the apt/dpkg locks, until the wait limit.
ws_apt_get() {
  local limit=${WEIGHTSYNC_APT_LOCK_WAIT:-600} start=$SECONDS said=0 rc out
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  while true; do
    local left=$((limit - (SECONDS - start)))
    [ "$left" -lt 1 ] && left=1
    # DPkg::Lock::Timeout makes apt-get itself wait for the dpkg frontend lock (install); the loop
    # covers what it does not (apt-get update's lists lock, older apt versions).
    out=$(mktemp)
    # (the if keeps a caller's set -e from ending the pipeline before the status is recorded)
    { if DEBIAN_FRONTEND=noninteractive $sudo apt-get -o DPkg::Lock::Timeout="$left" "$@"; then
        echo 0 >"$out.rc"; else echo $? >"$out.rc"; fi; } 2>&1 | tee "$out"
    rc=$(cat "$out.rc")
    rm -f "$out.rc"
    if [ "$rc" -eq 0 ] || ! grep -qE "Could not get lock|Unable to acquire the dpkg frontend lock|Unable to lock" "$out"; then
      rm -f "$out"
      return "$rc"
    fi
    rm -f "$out"
    if [ $((SECONDS - start)) -ge "$limit" ]; then
      echo "== gave up: another apt/dpkg process still holds the lock after ${limit} s (WEIGHTSYNC_APT_LOCK_WAIT)" >&2
      return "$rc"
    fi
    if [ $said = 0 ]; then
      echo "== another apt/dpkg process holds the lock; waiting for it (up to ${limit} s, WEIGHTSYNC_APT_LOCK_WAIT)" >&2
      said=1
    fi
    sleep 5
  done
}

ws_install_deps() {
  # Machines without package access (or with their own toolchain) set WEIGHTSYNC_SKIP_DEPS=1.
  [ "${WEIGHTSYNC_SKIP_DEPS:-0}" = 1 ] && return 0
  local pkgs=(g++ cmake ninja-build catch2 nlohmann-json3-dev libcpp-httplib-dev "$@")
  local missing=()
  for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "== installing ${missing[*]}"
    ws_apt_get update
    ws_apt_get install -y --no-install-recommends "${missing[@]}"
  fi
}

# clang and its libFuzzer/sanitizer runtime, for the fuzz tests (registered in CTest when clang++ can
# link -fsanitize=fuzzer). Best effort: a machine without them just runs no fuzz tests.
ws_install_fuzz_deps() {
  [ "${WEIGHTSYNC_SKIP_DEPS:-0}" = 1 ] && return 0
  dpkg-query -W -f='${Status}' clang 2>/dev/null | grep -q "install ok installed" ||
    ws_install_deps clang || return 0
  local v rt
  v=$(clang++ --version 2>/dev/null | sed -n 's/.*clang version \([0-9]*\).*/\1/p' | head -1)
  rt="libclang-rt-$v-dev"
  if [ -n "$v" ] && ! dpkg-query -W -f='${Status}' "$rt" 2>/dev/null | grep -q "install ok installed" &&
     apt-cache show "$rt" >/dev/null 2>&1; then
    ws_install_deps "$rt" || true
  fi
}
