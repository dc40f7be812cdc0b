// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The bounded waits every transport uses: poll (or block on) a completion until it is ready, watch
//! the peers every 2 ms meanwhile, and give up at the deadline. Nothing in this library waits
//! without one of them.

#include <algorithm>
#include <chrono>
#include <thread>

#include "weightsync/tuning.hpp"

namespace weightsync::detail {

using Clock = std::chrono::steady_clock;

//! Waits until `ready()` is true.
//! @param check      called every Tuning::Wait::check_every (2 ms) while waiting; throws when a
//!                   peer is known to be gone
//! @param on_timeout called once the deadline `timeout` from now has passed; must throw
//! Spins (yielding) for the first Tuning::Wait::spin_for (2 ms) so that short waits end within
//! microseconds, then polls every Tuning::Wait::poll_every (20 us).
template <class Ready, class Check, class OnTimeout>
void bounded_wait(Ready&& ready, std::chrono::milliseconds timeout, Check&& check,
                  OnTimeout&& on_timeout) {
  if (ready()) return;
  const auto start = Clock::now();
  const auto deadline = start + timeout;
  const auto spin_until = start + Tuning::Wait::spin_for;
  auto next_check = start;
  while (!ready()) {
    const auto now = Clock::now();
    if (now >= next_check) {
      check();
      next_check = now + Tuning::Wait::check_every;
    }
    if (now >= deadline) on_timeout();
    if (now < spin_until)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(Tuning::Wait::poll_every);
  }
}

//! Like bounded_wait, for a completion the host can sleep on: `wait_for(d)` blocks for at most `d`
//! and returns true once the completion happened. No CPU is spent while waiting.
template <class WaitFor, class Check, class OnTimeout>
void bounded_block(WaitFor&& wait_for, std::chrono::milliseconds timeout, Check&& check,
                   OnTimeout&& on_timeout) {
  const auto deadline = Clock::now() + timeout;
  constexpr auto kCheckEvery = Tuning::Wait::check_every;
  while (true) {
    const auto now = Clock::now();
    const auto left = deadline > now ? deadline - now : Clock::duration::zero();
    if (wait_for(std::min<Clock::duration>(left, kCheckEvery))) return;
    check();
    if (Clock::now() >= deadline) on_timeout();
  }
}

}  // namespace weightsync::detail
