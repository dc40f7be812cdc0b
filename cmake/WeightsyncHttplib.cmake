# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# Finds cpp-httplib, for weightsync's HTTP parts (<weightsync/vllm/control_plane.hpp>,
# <weightsync/vllm/http_server.hpp>), and creates the imported target weightsync::cpp_httplib
# with what a program that includes <httplib.h> needs to compile and link. Sets WEIGHTSYNC_HAS_HTTPLIB (ON/OFF) and WEIGHTSYNC_HTTPLIB_KIND (how it was found).
# Used by weightsync's own build and, installed next to weightsyncConfig.cmake, by the package
# config, so that consumers find cpp-httplib the same way. Accepts, in this order:
#   - upstream's CMake package (find_package(httplib CONFIG): httplib::httplib);
#   - a split build (Debian's libcpp-httplib-dev: a small header that only declares, and
#     libcpp-httplib.so that defines). The header must be compiled with the CPPHTTPLIB_*_SUPPORT
#     definitions the library was built with, or the class layouts differ: they are read from the
#     library's pkg-config file (cpp-httplib.pc: Debian's says OpenSSL, zlib, brotli); without one,
#     Debian's three are assumed;
#   - upstream's single header (httplib.h with the definitions in it), in WEIGHTSYNC_HTTPLIB_DIR,
#     .deps/httplib of weightsync's source tree, or the usual include directories.
# WEIGHTSYNC_WITH_HTTP: OFF skips the search, ON makes a failure fatal, AUTO (default) reports it.
if(TARGET weightsync::cpp_httplib)
  set(WEIGHTSYNC_HAS_HTTPLIB ON)
  return()
endif()
set(WEIGHTSYNC_HAS_HTTPLIB OFF)
set(WEIGHTSYNC_HTTPLIB_KIND "none")
if(NOT DEFINED WEIGHTSYNC_WITH_HTTP)
  set(WEIGHTSYNC_WITH_HTTP AUTO)
endif()
if(WEIGHTSYNC_WITH_HTTP STREQUAL "OFF")
  return()
endif()
if(NOT TARGET Threads::Threads)
  find_package(Threads REQUIRED)
endif()
# (GLOBAL in weightsync's own build: under add_subdirectory the parent's targets link it through
# weightsync::http; a package config's imported targets belong to the consumer's directory.)
if(PROJECT_NAME STREQUAL "weightsync")
  set(_ws_httplib_scope GLOBAL)
else()
  set(_ws_httplib_scope "")
endif()

find_package(httplib CONFIG QUIET)
if(TARGET httplib::httplib)
  add_library(weightsync::cpp_httplib INTERFACE IMPORTED ${_ws_httplib_scope})
  set_target_properties(weightsync::cpp_httplib PROPERTIES INTERFACE_LINK_LIBRARIES httplib::httplib)
  set(WEIGHTSYNC_HAS_HTTPLIB ON)
  set(WEIGHTSYNC_HTTPLIB_KIND "httplib::httplib (CMake package ${httplib_VERSION})")
else()
  set(_ws_httplib_hints ${WEIGHTSYNC_HTTPLIB_DIR})
  if(DEFINED weightsync_SOURCE_DIR)
    list(APPEND _ws_httplib_hints "${weightsync_SOURCE_DIR}/.deps/httplib")
  endif()
  find_path(WEIGHTSYNC_HTTPLIB_INCLUDE httplib.h HINTS ${_ws_httplib_hints})
  if(WEIGHTSYNC_HTTPLIB_INCLUDE)
    # The split build's header declares only (about 65 kB); the single header defines (> 200 kB).
    file(SIZE "${WEIGHTSYNC_HTTPLIB_INCLUDE}/httplib.h" _ws_httplib_size)
    if(_ws_httplib_size LESS 200000)
      find_library(WEIGHTSYNC_HTTPLIB_LIBRARY NAMES cpp-httplib)
      if(WEIGHTSYNC_HTTPLIB_LIBRARY)
        # The definitions the library was built with: its pkg-config Cflags.
        set(_ws_httplib_defs "")
        find_package(PkgConfig QUIET)
        if(PKG_CONFIG_FOUND)
          pkg_check_modules(_WS_HTTPLIB_PC QUIET cpp-httplib)
          foreach(f IN LISTS _WS_HTTPLIB_PC_CFLAGS_OTHER)
            if(f MATCHES "^-D(.+)$")
              list(APPEND _ws_httplib_defs "${CMAKE_MATCH_1}")
            endif()
          endforeach()
        endif()
        if(NOT _WS_HTTPLIB_PC_FOUND)
          set(_ws_httplib_defs CPPHTTPLIB_OPENSSL_SUPPORT CPPHTTPLIB_ZLIB_SUPPORT
                               CPPHTTPLIB_BROTLI_SUPPORT)
        endif()
        add_library(weightsync::cpp_httplib INTERFACE IMPORTED ${_ws_httplib_scope})
        set_target_properties(weightsync::cpp_httplib PROPERTIES
          INTERFACE_INCLUDE_DIRECTORIES "${WEIGHTSYNC_HTTPLIB_INCLUDE}"
          INTERFACE_COMPILE_DEFINITIONS "${_ws_httplib_defs}"
          INTERFACE_LINK_LIBRARIES "${WEIGHTSYNC_HTTPLIB_LIBRARY};Threads::Threads")
        set(WEIGHTSYNC_HAS_HTTPLIB ON)
        string(REPLACE ";" " " _ws_d "${_ws_httplib_defs}")
        set(WEIGHTSYNC_HTTPLIB_KIND "split build: ${WEIGHTSYNC_HTTPLIB_LIBRARY} (${_ws_d})")
      endif()
    else()
      add_library(weightsync::cpp_httplib INTERFACE IMPORTED ${_ws_httplib_scope})
      set_target_properties(weightsync::cpp_httplib PROPERTIES
        INTERFACE_INCLUDE_DIRECTORIES "${WEIGHTSYNC_HTTPLIB_INCLUDE}"
        INTERFACE_LINK_LIBRARIES Threads::Threads)
      set(WEIGHTSYNC_HAS_HTTPLIB ON)
      set(WEIGHTSYNC_HTTPLIB_KIND "single header: ${WEIGHTSYNC_HTTPLIB_INCLUDE}/httplib.h")
    endif()
  endif()
endif()
if(WEIGHTSYNC_WITH_HTTP STREQUAL "ON" AND NOT WEIGHTSYNC_HAS_HTTPLIB)
  message(FATAL_ERROR "WEIGHTSYNC_WITH_HTTP=ON but cpp-httplib was not found (Debian: apt-get install "
                      "libcpp-httplib-dev; or upstream's httplib.h in WEIGHTSYNC_HTTPLIB_DIR)")
endif()
