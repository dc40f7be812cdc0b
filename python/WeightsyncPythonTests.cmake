# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# The pytest suite (tests/python/) as one CTest test per file, label "python". It needs an
# interpreter of the same version as the extension's with pytest (and torch / NumPy for most
# tests): WEIGHTSYNC_PYTHON_TEST_EXECUTABLE, by default the first of the build's Python and the
# system's python3 that can import pytest. Without one the tests are not registered (a message
# says so).
set(_ws_py_test_candidates "${Python3_EXECUTABLE}" /usr/bin/python3 /usr/local/bin/python3)
if(NOT WEIGHTSYNC_PYTHON_TEST_EXECUTABLE)
  foreach(_ws_py ${_ws_py_test_candidates})
    if(EXISTS "${_ws_py}")
      execute_process(
        COMMAND "${_ws_py}" -c "import sys, pytest; print('%d.%d' % sys.version_info[:2])"
        RESULT_VARIABLE _ws_rc OUTPUT_VARIABLE _ws_ver ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
      if(_ws_rc EQUAL 0 AND _ws_ver STREQUAL "${Python3_VERSION_MAJOR}.${Python3_VERSION_MINOR}")
        set(WEIGHTSYNC_PYTHON_TEST_EXECUTABLE "${_ws_py}" CACHE FILEPATH
            "The Python that runs the pytest suite (tests/python)")
        break()
      endif()
    endif()
  endforeach()
endif()
if(NOT WEIGHTSYNC_PYTHON_TEST_EXECUTABLE)
  message(STATUS "weightsync: Python tests OFF (no Python ${Python3_VERSION_MAJOR}.${Python3_VERSION_MINOR} "
                 "with pytest: apt install python3-pytest, or set WEIGHTSYNC_PYTHON_TEST_EXECUTABLE)")
  return()
endif()
message(STATUS "weightsync: Python tests with ${WEIGHTSYNC_PYTHON_TEST_EXECUTABLE}")

set(_ws_py_env "PYTHONPATH=${CMAKE_CURRENT_BINARY_DIR}" "PYTHONDONTWRITEBYTECODE=1"
    "WEIGHTSYNC_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
if(TARGET inference_server AND TARGET trainer)
  list(APPEND _ws_py_env "WEIGHTSYNC_INFERENCE_SERVER=$<TARGET_FILE:inference_server>"
       "WEIGHTSYNC_EXAMPLE_TRAINER=$<TARGET_FILE:trainer>")
endif()
file(GLOB _ws_py_tests CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/tests/python/test_*.py")
foreach(t ${_ws_py_tests})
  get_filename_component(n "${t}" NAME_WE)
  # (the GPU tests only where a GPU is: elsewhere they would only skip, at an interpreter's cost)
  if(n STREQUAL "test_gpu" AND NOT WEIGHTSYNC_GPU_BINARIES)
    continue()
  endif()
  add_test(NAME python.${n}
           COMMAND "${WEIGHTSYNC_PYTHON_TEST_EXECUTABLE}" -m pytest -q -p no:cacheprovider "${t}"
           WORKING_DIRECTORY "${PROJECT_SOURCE_DIR}/tests/python")
  set(_ws_labels python)
  if(n STREQUAL "test_gpu")
    set(_ws_labels "python;gpu")
  endif()
  set_tests_properties(python.${n} PROPERTIES LABELS "${_ws_labels}" TIMEOUT 120
                       ENVIRONMENT "${_ws_py_env}")
endforeach()
