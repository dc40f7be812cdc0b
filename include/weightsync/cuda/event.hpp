// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! CudaEvent (ordering only, cudaEventDisableTiming) and TimedEvent (for benchmarks).

#include "weightsync/config.hpp"
#if !WEIGHTSYNC_HAS_CUDA
#error "<weightsync/cuda/event.hpp> needs the CUDA runtime (WEIGHTSYNC_HAS_CUDA=0)"
#endif

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstddef>
#include <utility>

#include "weightsync/cuda/check.hpp"

namespace weightsync {

namespace detail {
template <unsigned Flags>
class BasicEvent {
 public:
  explicit BasicEvent(int device = -1) {
    device_ = device >= 0 ? device : current_device();
    CurrentDeviceGuard g(device_);
    check(cudaEventCreateWithFlags(&e_, Flags), "cudaEventCreateWithFlags");
  }
  static BasicEvent from_native_handle(cudaEvent_t e, int device) noexcept {
    BasicEvent r(Adopt{});
    r.e_ = e;
    r.device_ = device;
    return r;
  }
  BasicEvent(const BasicEvent&) = delete;
  BasicEvent& operator=(const BasicEvent&) = delete;
  BasicEvent(BasicEvent&& o) noexcept
      : e_(std::exchange(o.e_, nullptr)), device_(std::exchange(o.device_, -1)) {}
  BasicEvent& operator=(BasicEvent&& o) noexcept {
    BasicEvent tmp(std::move(o));
    std::swap(e_, tmp.e_);
    std::swap(device_, tmp.device_);
    return *this;
  }
  ~BasicEvent() {
    if (!e_) return;
    CurrentDeviceGuard g(device_);
    check_nothrow(cudaEventDestroy(e_), "cudaEventDestroy");
  }

  cudaEvent_t get() const noexcept { return e_; }
  cudaEvent_t native_handle() const noexcept { return e_; }
  int device() const noexcept { return device_; }
  cudaEvent_t release() noexcept {
    device_ = -1;
    return std::exchange(e_, nullptr);
  }

  void record(cudaStream_t s) { check(cudaEventRecord(e_, s), "cudaEventRecord"); }
  //! True once the work captured by the last record() has completed.
  bool ready() const {
    const auto st = cudaEventQuery(e_);
    if (st == cudaSuccess) return true;
    if (st == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    check(st, "cudaEventQuery");
    return false;
  }
  //! Blocks the host until the event completes (benchmarks and tests; the pipeline polls).
  void synchronize() const { check(cudaEventSynchronize(e_), "cudaEventSynchronize"); }

 private:
  struct Adopt {};
  explicit BasicEvent(Adopt) noexcept {}
  cudaEvent_t e_ = nullptr;
  int device_ = -1;
};
}  // namespace detail

//! An event for ordering streams (no timing). Move-only; moved-from holds no event.
using CudaEvent = detail::BasicEvent<cudaEventDisableTiming>;

//! An event with timing, for benchmarks: elapsed(start, end) is a std::chrono duration.
class TimedEvent : public detail::BasicEvent<cudaEventDefault> {
 public:
  using detail::BasicEvent<cudaEventDefault>::BasicEvent;
  //! GPU time between two completed events.
  static std::chrono::duration<double, std::micro> elapsed(const TimedEvent& start,
                                                          const TimedEvent& end) {
    float ms = 0;
    detail::check(cudaEventElapsedTime(&ms, start.get(), end.get()), "cudaEventElapsedTime");
    return std::chrono::duration<double, std::micro>(double(ms) * 1000.0);
  }
};

}  // namespace weightsync
