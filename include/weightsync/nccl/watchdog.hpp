// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! LaunchWatchdog: bounds the host calls of a blocking NCCL communicator. A blocking launch
//! (ncclBroadcast, ncclGroupEnd) returns once its work is enqueued, but can block inside NCCL when
//! a peer vanishes while a connection is set up. The watchdog's thread aborts the communicator
//! (ncclCommAbort, which NCCL allows from another thread to unblock a stuck call) when a launch is
//! still inside NCCL past its deadline; the stuck call then returns an error. Waits for completed
//! work are bounded elsewhere (the pipeline polls events).

#include "weightsync/config.hpp"
#if !WEIGHTSYNC_HAS_NCCL
#error "<weightsync/nccl/watchdog.hpp> needs NCCL (WEIGHTSYNC_HAS_NCCL=0)"
#endif

#include <nccl.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

namespace weightsync::detail {

class LaunchWatchdog {
 public:
  explicit LaunchWatchdog(ncclComm_t comm) : s_(std::make_shared<Shared>()) {
    s_->comm = comm;
    thread_ = std::thread([s = s_] { run(*s); });
  }
  LaunchWatchdog(const LaunchWatchdog&) = delete;
  LaunchWatchdog& operator=(const LaunchWatchdog&) = delete;
  ~LaunchWatchdog() {
    {
      std::lock_guard lock(s_->m);
      s_->stop = true;
    }
    s_->cv.notify_all();
    thread_.join();
  }

  //! Marks a launch in progress until the guard goes; the communicator is aborted if it is still
  //! in progress after `timeout`.
  class Guard {
   public:
    Guard(LaunchWatchdog* w, std::chrono::milliseconds timeout) : w_(w) {
      if (!w_) return;
      std::lock_guard lock(w_->s_->m);
      w_->s_->deadline = Clock::now() + timeout;
      w_->s_->armed = true;
      w_->s_->cv.notify_all();
    }
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;
    ~Guard() {
      if (!w_) return;
      std::lock_guard lock(w_->s_->m);
      w_->s_->armed = false;
    }

   private:
    LaunchWatchdog* w_;
  };

  //! Aborts the communicator unless the watchdog already did; returns true when this call did.
  //! Serialized with the watchdog's own abort, so that ncclCommAbort runs once.
  bool abort_once() {
    std::lock_guard lock(s_->m);
    if (s_->fired) return false;
    s_->fired = true;
    return true;
  }
  //! True once the watchdog aborted the communicator.
  bool fired() const {
    std::lock_guard lock(s_->m);
    return s_->fired;
  }

 private:
  using Clock = std::chrono::steady_clock;
  struct Shared {
    mutable std::mutex m;
    std::condition_variable cv;
    ncclComm_t comm = nullptr;
    Clock::time_point deadline{};
    bool armed = false;
    bool stop = false;
    bool fired = false;
  };

  static void run(Shared& s) {
    std::unique_lock lock(s.m);
    while (!s.stop) {
      if (!s.armed) {
        s.cv.wait(lock);
        continue;
      }
      if (Clock::now() < s.deadline) {
        s.cv.wait_until(lock, s.deadline);
        continue;
      }
      if (!s.fired) {
        s.fired = true;
        ncclCommAbort(s.comm);  // the stuck launch returns an error on the caller's thread
      }
      s.armed = false;
    }
  }

  std::shared_ptr<Shared> s_;
  std::thread thread_;
};

}  // namespace weightsync::detail
