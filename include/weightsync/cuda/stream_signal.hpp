// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! StreamSignal: lets the host sleep until a stream reaches a point, instead of polling an event.
//! A host function enqueued behind the work (cudaLaunchHostFunc) wakes the waiter. Waits take a
//! bound: the caller decides what a deadline means (the library's bounded_block).

#include "weightsync/config.hpp"
#if !WEIGHTSYNC_HAS_CUDA
#error "<weightsync/cuda/stream_signal.hpp> needs the CUDA runtime (WEIGHTSYNC_HAS_CUDA=0)"
#endif

#include <cuda_runtime.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>

#include "weightsync/cuda/check.hpp"

namespace weightsync::detail {

class StreamSignal {
 public:
  //! Arms the signal behind the work enqueued on `s` so far (a new arm() replaces the last one).
  void arm(cudaStream_t s) {
    state_ = std::make_shared<State>();
    // The host function owns a reference: the state outlives a waiter that gave up.
    auto* held = new std::shared_ptr<State>(state_);
    const auto st = cudaLaunchHostFunc(s, &fire, held);
    if (st != cudaSuccess) {
      delete held;
      state_.reset();
      check(st, "cudaLaunchHostFunc");
    }
    stream_ = s;
  }
  //! Sleeps until the stream reached the armed point or `d` passed; true once it did. A failed
  //! stream (its work will never reach the point) throws cuda_error.
  template <class Rep, class Period>
  bool wait_for(std::chrono::duration<Rep, Period> d) {
    if (!state_) return true;
    {
      std::unique_lock lock(state_->m);
      if (state_->cv.wait_for(lock, d, [&] { return state_->done; })) return true;
    }
    const auto st = cudaStreamQuery(stream_);
    if (st != cudaSuccess && st != cudaErrorNotReady) check(st, "cudaStreamQuery");
    if (st == cudaErrorNotReady) (void)cudaGetLastError();
    return false;
  }

 private:
  struct State {
    std::mutex m;
    std::condition_variable cv;
    bool done = false;
  };
  static void CUDART_CB fire(void* p) {
    auto* held = static_cast<std::shared_ptr<State>*>(p);
    {
      std::lock_guard lock((*held)->m);
      (*held)->done = true;
    }
    (*held)->cv.notify_all();
    delete held;
  }
  std::shared_ptr<State> state_;
  cudaStream_t stream_ = nullptr;
};

}  // namespace weightsync::detail
