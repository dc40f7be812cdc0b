#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Runs a command with the libnccl that the Python side (PyTorch + CuPy, as in a vLLM install)
# loads put first on LD_LIBRARY_PATH. NCCL refuses ranks of different versions ("Mismatched NCCL
# version detected"), so a C++ trainer that feeds a vLLM server must load the NCCL build the
# server's Python environment uses; this is how, and what the interop tests run under.
#   tests/interop/with_python_nccl.sh COMMAND [ARGS...]
dir=$(python3 - <<'PY' 2>/dev/null
import os
import torch  # noqa: F401  (vLLM imports torch first; torch pulls in its NCCL)
from cupy.cuda import nccl
nccl.get_version()
seen = []
for line in open("/proc/self/maps"):
    path = line.split()[-1]
    if "libnccl.so" in path and path not in seen:
        seen.append(path)
if seen:
    print(os.path.dirname(seen[0]))
PY
)
if [ -n "$dir" ]; then
  echo "with_python_nccl: using the NCCL in $dir" >&2
  export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
else
  echo "with_python_nccl: no Python NCCL found (torch + cupy); running with the default one" >&2
fi
exec "$@"
