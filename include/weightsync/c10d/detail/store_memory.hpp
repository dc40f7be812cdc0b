// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Giving the memory of deleted values and sent replies back to the system. glibc's malloc keeps
//! what a thread frees in that thread's heap, and once a large block has been freed it serves
//! blocks of that size from the heap rather than from their own mappings (its dynamic mmap
//! threshold, up to 32 MiB): a store that held a gigabyte of 8 MiB values stays a gigabyte
//! resident after every key is deleted. TcpStoreServer tells MemoryReturn what it holds after
//! each turn; after a large drop, malloc_trim hands the free pages back (at most once a second).
//! What stays is at most the top of the server thread's heap, which glibc trims itself past its
//! trim threshold (64 MiB at most). Without glibc this does nothing.

#include <algorithm>
#include <chrono>
#include <cstddef>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "weightsync/detail/socket.hpp"

namespace weightsync::detail::c10d {

class MemoryReturn {
 public:
  //! Frees this much or more and it is worth a trim.
  static constexpr std::size_t kMinFreed = std::size_t(32) << 20;
  static constexpr std::chrono::milliseconds kEvery{1000};

  //! `held`: the bytes the server holds now. Trims when at least kMinFreed were let go since the
  //! last trim (or since the most it held) and the last trim is kEvery ago.
  void update(std::size_t held, Clock::time_point now) {
    high_ = std::max(high_, held);
    if (high_ - held < kMinFreed || now - last_ < kEvery) return;
#if defined(__GLIBC__)
    ::malloc_trim(0);
#endif
    ++trims_;
    high_ = held;
    last_ = now;
  }
  //! Whether a trim waits for its turn (the caller polls again within kEvery).
  bool due(std::size_t held) const {
    return high_ - std::min(high_, held) >= kMinFreed;
  }
  std::size_t trims() const {
    return trims_;
  }

 private:
  std::size_t high_ = 0;
  std::size_t trims_ = 0;
  Clock::time_point last_{};
};

}  // namespace weightsync::detail::c10d
