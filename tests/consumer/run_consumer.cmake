# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# cmake -DMODE=<find_package|add_subdirectory> -DSRC=<consumer dir> -DBIN=<build dir>
#       [-DPREFIX=<CMAKE_PREFIX_PATH>] [-DWS_DIR=<weightsync_DIR>] [-DWS_SOURCE=<weightsync source>]
#       -P run_consumer.cmake
file(REMOVE_RECURSE "${BIN}")
set(args -S "${SRC}" -B "${BIN}" -G Ninja -DWS_CONSUMER_MODE=${MODE})
if(PREFIX)
  list(APPEND args "-DCMAKE_PREFIX_PATH=${PREFIX}")
endif()
if(WS_DIR)
  list(APPEND args "-Dweightsync_DIR=${WS_DIR}")
endif()
if(WS_SOURCE)
  list(APPEND args "-DWS_SOURCE_DIR=${WS_SOURCE}")
endif()
foreach(step IN ITEMS configure build run)
  if(step STREQUAL "configure")
    execute_process(COMMAND "${CMAKE_COMMAND}" ${args} RESULT_VARIABLE rc)
  elseif(step STREQUAL "build")
    execute_process(COMMAND "${CMAKE_COMMAND}" --build "${BIN}" RESULT_VARIABLE rc)
  else()
    execute_process(COMMAND "${BIN}/consumer" RESULT_VARIABLE rc)
  endif()
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "consumer ${MODE}: ${step} failed (${rc})")
  endif()
endforeach()
