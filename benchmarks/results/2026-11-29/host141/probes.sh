#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Host141's probes (2026-11-29, the 2-core CI machine): the handshake's wire shapes on the host
# communicator alone, and a warm loop of 504 copies of 64 B. Two passes of the wire probe.
#   bash benchmarks/results/2026-11-29/host141/probes.sh OUT_DIR
set -eu
out=${1:?usage: probes.sh OUT_DIR}
mkdir -p "$out"; out=$(cd "$out" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../../.." && pwd)
g++ -std=c++20 -O2 -I"$root/include" -I"$root/benchmarks" "$here/host_wire_probe.cpp" -o "$out/host_wire_probe" -lpthread -lrt
g++ -std=c++20 -O2 "$here/copy_loop_probe.cpp" -o "$out/copy_loop_probe"
{ for pass in 1 2; do echo "== wire pass $pass"; "$out/host_wire_probe"; done
  echo "== copy loop"; "$out/copy_loop_probe"; } | tee "$out/probes.txt"
rm -f "$out/host_wire_probe" "$out/copy_loop_probe"
