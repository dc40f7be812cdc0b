// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! CudaStream (owning) and CudaStreamRef (borrowed). weightsync owns only its internal streams;
//! APIs take callers' streams as CudaStreamRef or raw cudaStream_t.

#include "weightsync/config.hpp"
#if !WEIGHTSYNC_HAS_CUDA
#error "<weightsync/cuda/stream.hpp> needs the CUDA runtime (WEIGHTSYNC_HAS_CUDA=0)"
#endif

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

#include "weightsync/cuda/check.hpp"

namespace weightsync {

//! A borrowed stream. Never destroys it.
class CudaStreamRef {
 public:
  constexpr CudaStreamRef(cudaStream_t s) noexcept : s_(s) {}  // NOLINT: implicit by design
  CudaStreamRef(int) = delete;
  CudaStreamRef(std::nullptr_t) = delete;
  constexpr cudaStream_t get() const noexcept { return s_; }
  constexpr operator cudaStream_t() const noexcept { return s_; }  // NOLINT

 private:
  cudaStream_t s_;
};

//! An owning, non-blocking stream that remembers its device. Move-only; the moved-from state
//! holds no stream (get() == nullptr).
class CudaStream {
 public:
  //! Creates a cudaStreamNonBlocking stream on `device` (-1: the current device). `priority`:
  //! 0 is the default; lower numbers are higher priorities (see greatest_priority()).
  explicit CudaStream(int device = -1, int priority = 0) {
    device_ = device >= 0 ? device : detail::current_device();
    detail::CurrentDeviceGuard g(device_);
    detail::check(cudaStreamCreateWithPriority(&s_, cudaStreamNonBlocking, priority),
                  "cudaStreamCreateWithPriority");
  }
  //! The highest priority streams can have on the current device.
  static int greatest_priority() {
    int least = 0, greatest = 0;
    detail::check(cudaDeviceGetStreamPriorityRange(&least, &greatest),
                  "cudaDeviceGetStreamPriorityRange");
    return greatest;
  }
  //! Takes ownership of `s`, created on `device`.
  static CudaStream from_native_handle(cudaStream_t s, int device) noexcept {
    CudaStream r(Adopt{});
    r.s_ = s;
    r.device_ = device;
    return r;
  }
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  CudaStream(CudaStream&& o) noexcept
      : s_(std::exchange(o.s_, nullptr)), device_(std::exchange(o.device_, -1)) {}
  CudaStream& operator=(CudaStream&& o) noexcept {
    CudaStream tmp(std::move(o));
    std::swap(s_, tmp.s_);
    std::swap(device_, tmp.device_);
    return *this;
  }
  ~CudaStream() { reset(); }

  cudaStream_t get() const noexcept { return s_; }
  cudaStream_t native_handle() const noexcept { return s_; }
  int device() const noexcept { return device_; }
  CudaStreamRef ref() const noexcept { return CudaStreamRef(s_); }
  operator CudaStreamRef() const noexcept { return ref(); }  // NOLINT
  //! Gives up ownership.
  cudaStream_t release() noexcept {
    device_ = -1;
    return std::exchange(s_, nullptr);
  }

 private:
  struct Adopt {};
  explicit CudaStream(Adopt) noexcept {}
  void reset() noexcept {
    if (!s_) return;
    detail::CurrentDeviceGuard g(device_);
    detail::check_nothrow(cudaStreamDestroy(s_), "cudaStreamDestroy");
    s_ = nullptr;
  }
  cudaStream_t s_ = nullptr;
  int device_ = -1;
};

}  // namespace weightsync
