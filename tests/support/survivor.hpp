// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! The survivor's side of a "peer killed mid-transfer" test: run rounds until one fails, and say
//! how long after the last good round that was (the test then checks it against the deadline).

#include <weightsync/error.hpp>

#include <chrono>
#include <cstdint>
#include <string>

namespace ws_test {

struct Survival {
  std::uint64_t good_rounds = 0;
  double seconds_after_last_ok = 0;
  std::string what;  //!< the error that ended it
};

//! Calls round(1), round(2), ... until one throws weightsync::error (anything else propagates).
template <class Round>
Survival until_failure(Round&& round) {
  using Clock = std::chrono::steady_clock;
  Survival s;
  auto last_ok = Clock::now();
  try {
    for (std::uint64_t r = 1;; ++r) {
      round(r);
      ++s.good_rounds;
      last_ok = Clock::now();
    }
  } catch (const weightsync::error& e) {
    s.what = e.what();
  }
  s.seconds_after_last_ok = std::chrono::duration<double>(Clock::now() - last_ok).count();
  return s;
}

inline std::string describe(const Survival& s, const std::string& who) {
  return who + " failed after " + std::to_string(s.good_rounds) + " good rounds, " +
         std::to_string(s.seconds_after_last_ok) + " s after the last one: " + s.what;
}

}  // namespace ws_test
