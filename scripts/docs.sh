#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Renders the API reference from the headers' //! comments with Doxygen (installed with apt-get
# when missing, as scripts/deps.sh does for the build):
#   bash scripts/docs.sh [OUT_DIR=build/docs]
# Open OUT_DIR/html/index.html. Doxygen's warnings go to OUT_DIR/warnings.txt; the ones not fixed
# yet are listed, with the reason, in docs/api-warnings.txt. Not part of scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
if ! command -v doxygen >/dev/null; then
  if [ "${WEIGHTSYNC_SKIP_DEPS:-0}" = 1 ]; then
    echo "docs.sh: doxygen is not installed (apt-get install doxygen)" >&2
    exit 1
  fi
  echo "== installing doxygen"
  ws_apt_get update
  ws_apt_get install -y --no-install-recommends doxygen
fi
out=${1:-build/docs}
mkdir -p "$out"
version=$(sed -n 's/^#define WEIGHTSYNC_VERSION_STRING "\(.*\)"/\1/p' include/weightsync/config.hpp)
# The configuration is here, not in a Doxyfile: only what differs from Doxygen's defaults.
{
  echo "PROJECT_NAME = weightsync"
  echo "PROJECT_NUMBER = $version"
  echo "PROJECT_BRIEF = \"Moves model weights from a trainer to inference engines\""
  echo "OUTPUT_DIRECTORY = $out"
  echo "INPUT = include/weightsync README.md docs/ARCHITECTURE.md BENCHMARKS.md tests/fuzz/RESULTS.md"
  echo "USE_MDFILE_AS_MAINPAGE = README.md"
  echo "FILE_PATTERNS = *.hpp *.md"
  echo "RECURSIVE = YES"
  echo "STRIP_FROM_PATH = include"
  echo "STRIP_FROM_INC_PATH = include"
  echo "FULL_PATH_NAMES = YES"
  # (the embedded PTX of the kernels is data, not API)
  echo "EXCLUDE_PATTERNS = */detail/batched_copy_ptx.hpp */detail/gather_ptx.hpp"
  echo "EXCLUDE_SYMBOLS = weightsync::detail weightsync::detail::*"
  echo "EXAMPLE_PATH = tests examples"
  echo "EXTRACT_ALL = NO"
  echo "EXTRACT_STATIC = YES"
  echo "JAVADOC_AUTOBRIEF = YES"
  echo "QT_AUTOBRIEF = YES"
  echo "MARKDOWN_SUPPORT = YES"
  echo "ENABLE_PREPROCESSING = YES"
  echo "MACRO_EXPANSION = YES"
  echo "PREDEFINED = WEIGHTSYNC_HAS_CUDA=1 WEIGHTSYNC_HAS_NCCL=1"
  echo "GENERATE_LATEX = NO"
  echo "GENERATE_HTML = YES"
  echo "HAVE_DOT = NO"
  echo "QUIET = YES"
  echo "WARNINGS = YES"
  echo "WARN_IF_UNDOCUMENTED = NO"
  echo "WARN_IF_DOC_ERROR = YES"
  echo "WARN_LOGFILE = $out/warnings.txt"
} > "$out/Doxyfile"
doxygen "$out/Doxyfile"
n=$(grep -c "warning:" "$out/warnings.txt" || true)
echo "== API reference: $out/html/index.html ($n doxygen warnings: $out/warnings.txt)"
