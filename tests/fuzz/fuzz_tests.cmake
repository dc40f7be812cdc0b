# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Included by tests/CMakeLists.txt: where clang++ is found, builds the fuzz targets (tests/fuzz,
# with clang) as part of the main build (target weightsync_fuzz_targets, one job of the build
# beside the g++ ones) and registers them as CTest tests (label "fuzz"): fuzz.build checks that
# build is up to date, then each fuzz.<t> replays its checked-in corpus (tests/fuzz/corpus/<t>,
# crash reproducers included) and fuzzes for WEIGHTSYNC_FUZZ_SECONDS seconds. WEIGHTSYNC_FUZZ=OFF
# leaves them out.
# A fuzzer is one single-threaded process: under ctest -j N it takes one of the N slots like any
# other test (PROCESSORS 1), so the runs no longer go one after another with the other slot idle.
# In CTest they are a regression and smoke run (the corpus replayed, then a short exploration);
# the long runs that find new inputs are scripts/fuzz.sh (600 s per target by default).
set(WEIGHTSYNC_FUZZ AUTO CACHE STRING "Register the libFuzzer runs in CTest: AUTO (if clang++ is found), ON or OFF")
set(WEIGHTSYNC_FUZZ_SECONDS 10 CACHE STRING "Seconds each fuzz target runs in CTest (after replaying its corpus)")
if(WEIGHTSYNC_FUZZ STREQUAL "OFF")
  return()
endif()
find_program(WEIGHTSYNC_CLANGXX NAMES clang++ clang++-19 clang++-18 clang++-16 clang++-15 clang++-14)
if(NOT WEIGHTSYNC_CLANGXX)
  if(WEIGHTSYNC_FUZZ STREQUAL "ON")
    message(FATAL_ERROR "WEIGHTSYNC_FUZZ=ON but clang++ was not found")
  endif()
  message(STATUS "weightsync: clang++ not found; the fuzz tests are not registered")
  return()
endif()
# clang without its libFuzzer runtime (Debian: libclang-rt-<version>-dev) cannot build them.
set(_ws_fz_probe "${CMAKE_CURRENT_BINARY_DIR}/fuzz_probe.cpp")
file(WRITE "${_ws_fz_probe}" "#include <cstddef>\n#include <cstdint>\nextern \"C\" int LLVMFuzzerTestOneInput(const std::uint8_t*, std::size_t) { return 0; }\n")
execute_process(COMMAND "${WEIGHTSYNC_CLANGXX}" -fsanitize=fuzzer,address,undefined "${_ws_fz_probe}"
                        -o "${CMAKE_CURRENT_BINARY_DIR}/fuzz_probe"
                RESULT_VARIABLE _ws_fz_rc OUTPUT_QUIET ERROR_VARIABLE _ws_fz_err)
if(NOT _ws_fz_rc EQUAL 0)
  if(WEIGHTSYNC_FUZZ STREQUAL "ON")
    message(FATAL_ERROR "WEIGHTSYNC_FUZZ=ON but ${WEIGHTSYNC_CLANGXX} cannot link -fsanitize=fuzzer: ${_ws_fz_err}")
  endif()
  message(STATUS "weightsync: ${WEIGHTSYNC_CLANGXX} cannot link -fsanitize=fuzzer (libclang-rt-<version>-dev missing?); the fuzz tests are not registered")
  return()
endif()
message(STATUS "weightsync: fuzz tests with ${WEIGHTSYNC_CLANGXX}, ${WEIGHTSYNC_FUZZ_SECONDS} s each")

set(_ws_fz_src "${CMAKE_CURRENT_SOURCE_DIR}/fuzz")
set(_ws_fz_bin "${CMAKE_CURRENT_BINARY_DIR}/fuzz")
# (a script, not a command line: a list variable would split the shell's ';')
set(_ws_fz_build_sh "${CMAKE_CURRENT_BINARY_DIR}/fuzz_build.sh")
file(CONFIGURE OUTPUT "${_ws_fz_build_sh}" CONTENT "#!/bin/sh
'${CMAKE_COMMAND}' -S '${_ws_fz_src}' -B '${_ws_fz_bin}' -G '${CMAKE_GENERATOR}' -DCMAKE_BUILD_TYPE=RelWithDebInfo '-DCMAKE_CXX_COMPILER=${WEIGHTSYNC_CLANGXX}' >'${_ws_fz_bin}.configure.log' 2>&1 || { cat '${_ws_fz_bin}.configure.log'; exit 1; }
exec '${CMAKE_COMMAND}' --build '${_ws_fz_bin}'
")
# Part of the build ("all"): a custom target always runs; when nothing changed it is a no-op.
add_custom_target(weightsync_fuzz_targets ALL COMMAND sh "${_ws_fz_build_sh}"
  COMMENT "Building the fuzz targets with ${WEIGHTSYNC_CLANGXX} (tests/fuzz)" VERBATIM)
add_test(NAME fuzz.build COMMAND sh "${_ws_fz_build_sh}")
set_tests_properties(fuzz.build PROPERTIES FIXTURES_SETUP ws_fuzz_built LABELS "fuzz" TIMEOUT 900)

file(GLOB _ws_fz_targets RELATIVE "${_ws_fz_src}" CONFIGURE_DEPENDS "${_ws_fz_src}/fuzz_*.cpp")
foreach(f IN LISTS _ws_fz_targets)
  string(REGEX REPLACE "^fuzz_(.*)\\.cpp$" "\\1" t "${f}")
  # -runs is unlimited; -max_total_time bounds it. New inputs go to the build tree's corpus, never
  # to the checked-in one; a crash leaves its input in ${_ws_fz_bin}/artifacts.
  add_test(NAME fuzz.${t}
    COMMAND sh -c "test -x '${_ws_fz_bin}/fuzz_${t}' || { echo 'fuzz_${t} was not built (no cpp-httplib?)'; exit 4; }; mkdir -p '${_ws_fz_bin}/work/${t}' '${_ws_fz_bin}/artifacts' && exec '${_ws_fz_bin}/fuzz_${t}' -max_total_time=${WEIGHTSYNC_FUZZ_SECONDS} -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 '-artifact_prefix=${_ws_fz_bin}/artifacts/${t}-' '${_ws_fz_bin}/work/${t}' '${_ws_fz_src}/corpus/${t}'")
  set_tests_properties(fuzz.${t} PROPERTIES FIXTURES_REQUIRED ws_fuzz_built LABELS "fuzz"
    SKIP_RETURN_CODE 4 TIMEOUT 300 PROCESSORS 1)
endforeach()
