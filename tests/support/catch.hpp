// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! Hides the Catch2 v2 / v3 include difference. WEIGHTSYNC_TEST_CATCH2_MAJOR comes from CMake.
//! WS_SKIP(msg): SKIP on v3; on v2 (no SKIP) a WARN and a return, after which the test's main
//! returns 4 so CTest still reports the test as skipped.

#if WEIGHTSYNC_TEST_CATCH2_MAJOR >= 3
#include <catch2/catch_session.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/interfaces/catch_interfaces_capture.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#define WS_SKIP(msg)                   \
  do {                                 \
    ::ws_test::note_skipped();         \
    SKIP(msg);                         \
  } while (0)
#else
#include <catch2/catch.hpp>
#define WS_SKIP(msg)           \
  do {                         \
    ::ws_test::note_skipped(); \
    WARN("SKIPPED: " << msg);  \
    return;                    \
  } while (0)
#endif

namespace ws_test {
//! Counts WS_SKIP calls so the v2 main can report "all skipped" with exit code 4.
inline int& skipped_count() {
  static int n = 0;
  return n;
}
inline void note_skipped() { ++skipped_count(); }
}  // namespace ws_test
