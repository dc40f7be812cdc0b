#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Installs the Debian packages weightsync's build needs, if any is missing. Sourced by test.sh/demo.sh.
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
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends "${missing[@]}"
  fi
}
