#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Installs the Debian packages weightsync's build needs, if any is missing. Sourced by test.sh/demo.sh.
# Another apt/dpkg process (unattended-upgrades on a fresh cloud VM, a second build) may hold the
# dpkg lock: we wait for it, up to WEIGHTSYNC_APT_LOCK_WAIT seconds (default 600), saying so.

# Runs "apt-get $@", retrying while another process holds the apt/dpkg locks, until the wait limit.
# apt-get runs with LC_ALL=C, so that its lock messages are the English ones matched below in any
# locale. (WEIGHTSYNC_APT_LOCK_POLL: seconds between tries, default 5.)
ws_apt_get() {
  local limit=${WEIGHTSYNC_APT_LOCK_WAIT:-600} poll=${WEIGHTSYNC_APT_LOCK_POLL:-5}
  local start=$SECONDS said=0 rc out
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  while true; do
    local left=$((limit - (SECONDS - start)))
    [ "$left" -lt 1 ] && left=1
    # DPkg::Lock::Timeout makes apt-get itself wait for the dpkg frontend lock (install); the loop
    # covers what it does not (apt-get update's lists lock, older apt versions).
    out=$(mktemp)
    # (the if keeps a caller's set -e from ending the pipeline before the status is recorded)
    # (env after sudo: sudo's env_reset would drop variables set before it)
    { if $sudo env LC_ALL=C DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout="$left" "$@"; then
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
    sleep "$poll"
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

# clang and its libFuzzer/sanitizer runtime (Debian: libclang-rt-<version>-dev), for the fuzz tests
# (label "fuzz"). With WEIGHTSYNC_FUZZ=ON (what CI sets) a failure to install them is an error;
# otherwise (AUTO) it is reported, and the build then leaves the fuzz tests out.
ws_install_fuzz_deps() {
  [ "${WEIGHTSYNC_SKIP_DEPS:-0}" = 1 ] && return 0
  if ws_try_install_fuzz_deps; then return 0; fi
  if [ "${WEIGHTSYNC_FUZZ:-AUTO}" = ON ]; then
    echo "== WEIGHTSYNC_FUZZ=ON but clang and its libFuzzer runtime could not be installed" >&2
    return 1
  fi
  echo "== clang or its libFuzzer runtime could not be installed: no fuzz tests (WEIGHTSYNC_FUZZ=AUTO)" >&2
  return 0
}

ws_try_install_fuzz_deps() {
  ws_install_deps clang || return 1
  local v rt
  v=$(clang++ --version 2>/dev/null | sed -n 's/.*clang version \([0-9]*\).*/\1/p' | head -1)
  [ -n "$v" ] || { echo "== clang++ --version names no version" >&2; return 1; }
  rt="libclang-rt-$v-dev"
  dpkg-query -W -f='${Status}' "$rt" 2>/dev/null | grep -q "install ok installed" && return 0
  # apt-cache knows a package only once apt-get update has fetched the package lists (a fresh
  # image has none): update first when it does not know it.
  if ! apt-cache show "$rt" >/dev/null 2>&1; then
    echo "== apt-cache does not know $rt: apt-get update first"
    ws_apt_get update || return 1
  fi
  if apt-cache show "$rt" >/dev/null 2>&1; then
    ws_install_deps "$rt"
    return
  fi
  # Releases without the package ship libFuzzer with clang itself (libclang-common-<v>-dev); the
  # build's link probe tells.
  echo "== no package $rt here: assuming clang $v ships its libFuzzer runtime"
}
