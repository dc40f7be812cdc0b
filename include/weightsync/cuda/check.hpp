// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! cuda_error and the checking helpers for CUDA runtime calls.

#include "weightsync/config.hpp"
#if !WEIGHTSYNC_HAS_CUDA
#error "<weightsync/cuda/check.hpp> needs the CUDA runtime (WEIGHTSYNC_HAS_CUDA=0)"
#endif

#include <cuda_runtime_api.h>

#include <source_location>
#include <string>

#include "weightsync/detail/format.hpp"
#include "weightsync/error.hpp"
#include "weightsync/log.hpp"

namespace weightsync {

//! A CUDA runtime call failed. "[weightsync.cuda] cudaMalloc failed: cudaErrorMemoryAllocation (2):
//! out of memory (at file:line)".
class cuda_error : public error {
 public:
  cuda_error(cudaError_t status, std::string api,
             std::source_location loc = std::source_location::current())
      : error(detail::cat("[weightsync.cuda] ", api, " failed: ", cudaGetErrorName(status), " (",
                          static_cast<int>(status), "): ", cudaGetErrorString(status), " (at ",
                          loc.file_name(), ":", loc.line(), ")")),
        status_(status),
        api_(std::move(api)) {}
  cudaError_t status() const noexcept { return status_; }
  const std::string& api() const noexcept { return api_; }

 private:
  cudaError_t status_;
  std::string api_;
};

namespace detail {

//! Throws cuda_error unless `status` is cudaSuccess; clears the (non-sticky) error first.
inline void check(cudaError_t status, const char* api,
                  std::source_location loc = std::source_location::current()) {
  if (status == cudaSuccess) return;
  (void)cudaGetLastError();
  throw cuda_error(status, api, loc);
}

//! Says "no CUDA device" at once, before a GPU backend starts its rendezvous (which would
//! otherwise wait for its peers and report a timeout): throws config_error("backend") naming
//! `backend`, when the runtime sees no device (no driver, no GPU, CUDA_VISIBLE_DEVICES empty), or
//! config_error("device") when `device` (>= 0) is not one of them.
inline void require_cuda_device(const char* backend, int device = -1) {
  int n = 0;
  const cudaError_t status = cudaGetDeviceCount(&n);
  if (status != cudaSuccess) (void)cudaGetLastError();
  if (status != cudaSuccess || n == 0)
    throw config_error(
        "backend", cat(backend, " backend: no CUDA device (cudaGetDeviceCount: ",
                       status == cudaSuccess ? "0 devices" : cudaGetErrorName(status), "); the ",
                       backend, " backend needs a GPU, the host backend does not"));
  if (device >= n)
    throw config_error("device", cat(backend, " backend: device ", device, " asked for, but ", n,
                                     " CUDA device(s) are visible (0..", n - 1, ")"));
}

//! For cleanup paths: logs a failure instead of throwing, and returns the status.
inline cudaError_t check_nothrow(cudaError_t status, const char* api) noexcept {
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    log(LogLevel::warning, cat(api, " failed: ", cudaGetErrorName(status)));
  }
  return status;
}

//! Makes `device` current for its scope and restores the previous device after. noexcept: a
//! failure to switch is logged, and a destructor never throws.
class CurrentDeviceGuard {
 public:
  explicit CurrentDeviceGuard(int device) noexcept {
    if (cudaGetDevice(&previous_) != cudaSuccess) {
      (void)cudaGetLastError();
      previous_ = -1;
    }
    if (device >= 0 && device != previous_) check_nothrow(cudaSetDevice(device), "cudaSetDevice");
  }
  CurrentDeviceGuard(const CurrentDeviceGuard&) = delete;
  CurrentDeviceGuard& operator=(const CurrentDeviceGuard&) = delete;
  ~CurrentDeviceGuard() {
    if (previous_ >= 0) check_nothrow(cudaSetDevice(previous_), "cudaSetDevice");
  }

 private:
  int previous_ = -1;
};

inline int current_device() {
  int d = 0;
  check(cudaGetDevice(&d), "cudaGetDevice");
  return d;
}

}  // namespace detail
}  // namespace weightsync
