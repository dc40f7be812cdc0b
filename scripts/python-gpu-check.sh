#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# The Python package on a GPU machine: configures with CUDA and NCCL for the Python found on PATH
# (torch 2.x with CUDA, pybind11 from pip or apt), builds the extension and the C++ examples,
# installs the package into a scratch prefix and imports it from there, then runs the whole
# pytest suite (tests/python: the CPU tests, and the GPU ones, marker "gpu": ipc, p2p and nccl
# over TCP and unique-id rendezvous on one shared GPU, bf16 and FP8, CUDA views and destinations
# checked by data_ptr, shadow mode), writing logs to a folder. One command:
#   bash scripts/python-gpu-check.sh [LOG_DIR=py-gpu-logs]
# WS_PYTEST_ARGS="-k nccl" selects tests; WEIGHTSYNC_BUILD_DIR (default build/py-gpu).
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0
logs=${1:-py-gpu-logs}
mkdir -p "$logs"
build=${WEIGHTSYNC_BUILD_DIR:-build/py-gpu-sys}
py=$(command -v python3)
# The extension must link the libstdc++ that Python and torch load: the system compiler's. A
# toolchain that links its own statically (the GPU machines' CXX=/opt/gcc/bin/g++ does: no
# libstdc++.so in the module's NEEDED) gives a module that crashes in its first ostringstream
# beside torch. WS_PY_CXX overrides.
export CXX=${WS_PY_CXX:-$( [ -x /usr/bin/g++ ] && echo /usr/bin/g++ || echo "${CXX:-g++}")}
{
  date -u +"%Y-%m-%dT%H:%M:%SZ"
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader 2>&1
  "$py" -c "import sys, torch; print(sys.version); print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available())" 2>&1
  "$py" -c "import pybind11; print('pybind11', pybind11.__version__, pybind11.get_cmake_dir())" 2>&1
  "$py" -c "import pytest, numpy; print('pytest', pytest.__version__, 'numpy', numpy.__version__)" 2>&1
} | tee "$logs/env.txt"
pybind_dir=()
if d=$("$py" -m pybind11 --cmakedir 2>/dev/null); then pybind_dir=(-Dpybind11_DIR="$d"); fi
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DWEIGHTSYNC_WITH_CUDA=ON -DWEIGHTSYNC_WITH_NCCL=ON -DWEIGHTSYNC_BUILD_PYTHON=ON \
  -DWEIGHTSYNC_BUILD_BENCHMARKS=OFF -DWEIGHTSYNC_BUILD_GPU_TESTS=OFF -DWEIGHTSYNC_WERROR=OFF \
  -DPython3_EXECUTABLE="$py" -DWEIGHTSYNC_PYTHON_TEST_EXECUTABLE="$py" "${pybind_dir[@]}" \
  -DWEIGHTSYNC_PYTHON_INSTALL_DIR="$(realpath "$logs")/site" > "$logs/configure.txt" 2>&1 ||
  { tail -30 "$logs/configure.txt"; echo "CONFIGURE FAILED"; exit 1; }
grep -E "weightsync: Python|Python tests" "$logs/configure.txt"
start=$SECONDS
# The C++ example server and trainer need cpp-httplib (absent on the GPU machines): built where
# configured, else the tests that drive them skip, saying so.
targets=(weightsync_python weightsync_python_wire weightsync_python_files)
grep -q "the demo (inference_server, trainer) is not built" "$logs/configure.txt" ||
  targets+=(inference_server trainer)
if ! cmake --build "$build" -j "$(nproc)" --target "${targets[@]}" > "$logs/build.txt" 2>&1; then
  grep -E "error|warning" "$logs/build.txt" | head -30
  echo "BUILD FAILED"
  exit 1
fi
echo "build ok ($((SECONDS - start)) s)"
rc=0
cmake --install "$build" --component python > "$logs/install.txt" 2>&1 || rc=1
(cd / && PYTHONPATH="$(realpath "$logs")/site" "$py" -c \
  "import weightsync as ws; print('installed:', ws.__file__, ws.backends(), 'cuda', ws.has_cuda, 'nccl', ws.has_nccl)") \
  2>&1 | tee "$logs/import.txt" || rc=1
export PYTHONPATH="$PWD/$build/python" WEIGHTSYNC_SOURCE_DIR="$PWD"
export WEIGHTSYNC_INFERENCE_SERVER="$PWD/$build/examples/inference_server"
export WEIGHTSYNC_EXAMPLE_TRAINER="$PWD/$build/examples/trainer"
(cd tests/python && "$py" -m pytest -v -rs -p no:cacheprovider \
  --junitxml="$(realpath "../../$logs")/pytest.xml" ${WS_PYTEST_ARGS:-} .) > "$logs/pytest.txt" 2>&1 || rc=1
grep -E "PASSED|FAILED|ERROR|SKIPPED" "$logs/pytest.txt" | sed 's/^ *//' | head -80
tail -3 "$logs/pytest.txt"
[ $rc = 0 ] && echo "PYTHON GPU CHECK OK" || echo "PYTHON GPU CHECK FAILED (logs in $logs)"
exit $rc
