// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! DeviceBuffer (cudaMalloc) and PinnedBuffer (cudaMallocHost): owning, move-only, allocated once
//! and reused (the ring).

#include "weightsync/config.hpp"
#if !WEIGHTSYNC_HAS_CUDA
#error "<weightsync/cuda/device_buffer.hpp> needs the CUDA runtime (WEIGHTSYNC_HAS_CUDA=0)"
#endif

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

#include "weightsync/cuda/check.hpp"

namespace weightsync {

//! `size()` bytes of device memory on `device()`. Move-only; moved-from is empty.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(std::size_t bytes, int device) : size_(bytes), device_(device) {
    if (bytes == 0) return;
    detail::CurrentDeviceGuard g(device_);
    void* p = nullptr;
    detail::check(cudaMalloc(&p, bytes), "cudaMalloc");
    p_ = static_cast<std::byte*>(p);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : p_(std::exchange(o.p_, nullptr)), size_(std::exchange(o.size_, 0)), device_(o.device_) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    DeviceBuffer tmp(std::move(o));
    std::swap(p_, tmp.p_);
    std::swap(size_, tmp.size_);
    std::swap(device_, tmp.device_);
    return *this;
  }
  ~DeviceBuffer() {
    if (!p_) return;
    detail::CurrentDeviceGuard g(device_);
    detail::check_nothrow(cudaFree(p_), "cudaFree");
  }
  std::byte* data() const noexcept { return p_; }
  std::size_t size() const noexcept { return size_; }
  int device() const noexcept { return device_; }

 private:
  std::byte* p_ = nullptr;
  std::size_t size_ = 0;
  int device_ = -1;
};

//! `size()` bytes of page-locked host memory. Move-only; moved-from is empty.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(std::size_t bytes) : size_(bytes) {
    if (bytes == 0) return;
    void* p = nullptr;
    detail::check(cudaMallocHost(&p, bytes), "cudaMallocHost");
    p_ = static_cast<std::byte*>(p);
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  PinnedBuffer(PinnedBuffer&& o) noexcept
      : p_(std::exchange(o.p_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept {
    PinnedBuffer tmp(std::move(o));
    std::swap(p_, tmp.p_);
    std::swap(size_, tmp.size_);
    return *this;
  }
  ~PinnedBuffer() {
    if (p_) detail::check_nothrow(cudaFreeHost(p_), "cudaFreeHost");
  }
  std::byte* data() const noexcept { return p_; }
  std::size_t size() const noexcept { return size_; }

 private:
  std::byte* p_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace weightsync
