// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! The checks the multi-process CPU tests make on their children's outcomes (support/process.hpp).

#include <chrono>
#include <vector>

#include "support/catch.hpp"
#include "support/process.hpp"

namespace ws_test {

//! Every child returned normally.
inline void expect_all_ok(const std::vector<Result>& results) {
  for (const auto& r : results) {
    INFO(outcome_name(r.outcome) << ": " << r.message);
    CHECK(r.outcome == Outcome::ok);
  }
}

//! Every child but `victim` (killed by the test) failed as a lost peer does (peer_error,
//! timeout_error or state_error) within `max_seconds` of its start.
inline void expect_survivors_failed(const std::vector<Result>& results, int victim,
                                    double max_seconds) {
  for (std::size_t rank = 0; rank < results.size(); ++rank) {
    if (static_cast<int>(rank) == victim) continue;
    const auto& r = results[rank];
    INFO("rank " << rank << ": " << outcome_name(r.outcome) << " " << r.message);
    const bool peer_or_timeout =
        r.outcome == Outcome::peer || r.outcome == Outcome::timeout || r.outcome == Outcome::state;
    CHECK(peer_or_timeout);
    CHECK(r.seconds < max_seconds);
  }
}

}  // namespace ws_test
