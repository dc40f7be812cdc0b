# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Finds cpp-httplib for the optional HTTP parts and defines weightsync_httplib (INTERFACE) and
# WEIGHTSYNC_HAS_HTTPLIB. Accepts upstream's config package (httplib::httplib), Debian's split build
# (header + libcpp-httplib.so), or a single upstream header in WEIGHTSYNC_HTTPLIB_DIR / .deps/httplib.
set(WEIGHTSYNC_HAS_HTTPLIB OFF)
if(NOT WEIGHTSYNC_WITH_HTTP STREQUAL "OFF")
  find_package(httplib CONFIG QUIET)
  add_library(weightsync_httplib INTERFACE)
  if(TARGET httplib::httplib)
    target_link_libraries(weightsync_httplib INTERFACE httplib::httplib)
    set(WEIGHTSYNC_HAS_HTTPLIB ON)
  else()
    find_path(WEIGHTSYNC_HTTPLIB_INCLUDE httplib.h
      HINTS ${WEIGHTSYNC_HTTPLIB_DIR} "${PROJECT_SOURCE_DIR}/.deps/httplib")
    if(WEIGHTSYNC_HTTPLIB_INCLUDE)
      target_include_directories(weightsync_httplib SYSTEM INTERFACE "${WEIGHTSYNC_HTTPLIB_INCLUDE}")
      # Debian ships the split build: the header only declares, libcpp-httplib defines.
      file(SIZE "${WEIGHTSYNC_HTTPLIB_INCLUDE}/httplib.h" _ws_httplib_size)
      if(_ws_httplib_size LESS 200000)
        find_library(WEIGHTSYNC_HTTPLIB_LIBRARY NAMES cpp-httplib)
        if(WEIGHTSYNC_HTTPLIB_LIBRARY)
          target_link_libraries(weightsync_httplib INTERFACE "${WEIGHTSYNC_HTTPLIB_LIBRARY}")
          target_compile_definitions(weightsync_httplib INTERFACE
            CPPHTTPLIB_OPENSSL_SUPPORT CPPHTTPLIB_ZLIB_SUPPORT CPPHTTPLIB_BROTLI_SUPPORT)
          set(WEIGHTSYNC_HAS_HTTPLIB ON)
        endif()
      else()
        set(WEIGHTSYNC_HAS_HTTPLIB ON)
      endif()
      target_link_libraries(weightsync_httplib INTERFACE Threads::Threads)
    endif()
  endif()
  if(WEIGHTSYNC_WITH_HTTP STREQUAL "ON" AND NOT WEIGHTSYNC_HAS_HTTPLIB)
    message(FATAL_ERROR "WEIGHTSYNC_WITH_HTTP=ON but cpp-httplib was not found (apt-get install libcpp-httplib-dev)")
  endif()
endif()
message(STATUS "weightsync: HTTP parts (cpp-httplib) ${WEIGHTSYNC_HAS_HTTPLIB}")
