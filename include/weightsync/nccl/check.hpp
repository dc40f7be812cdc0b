// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! nccl_error: an NCCL call failed; carries the status, the call, and ncclGetLastError's text.

#include "weightsync/config.hpp"
#if !WEIGHTSYNC_HAS_NCCL
#error "<weightsync/nccl/check.hpp> needs NCCL (WEIGHTSYNC_HAS_NCCL=0)"
#endif

#include <nccl.h>

#include <source_location>
#include <string>

#include "weightsync/detail/format.hpp"
#include "weightsync/error.hpp"

namespace weightsync {

class nccl_error : public error {
 public:
  nccl_error(ncclResult_t status, std::string api, int rank, ncclComm_t comm = nullptr,
             std::source_location loc = std::source_location::current())
      : error(detail::cat("[weightsync.nccl] ", api, " failed on rank ", rank, ": ",
                          result_name(status), " (", static_cast<int>(status), "): ",
                          ncclGetErrorString(status), last_error(comm), " (at ", loc.file_name(),
                          ":", loc.line(), ")")),
        status_(status),
        api_(std::move(api)) {}
  ncclResult_t status() const noexcept { return status_; }
  const std::string& api() const noexcept { return api_; }

  static const char* result_name(ncclResult_t r) noexcept {
    switch (r) {
      case ncclSuccess: return "ncclSuccess";
      case ncclUnhandledCudaError: return "ncclUnhandledCudaError";
      case ncclSystemError: return "ncclSystemError";
      case ncclInternalError: return "ncclInternalError";
      case ncclInvalidArgument: return "ncclInvalidArgument";
      case ncclInvalidUsage: return "ncclInvalidUsage";
      case ncclRemoteError: return "ncclRemoteError";
      case ncclInProgress: return "ncclInProgress";
      default: return "ncclResult";
    }
  }

 private:
  static std::string last_error(ncclComm_t comm) {
    const char* s = ncclGetLastError(comm);
    return s && *s ? std::string(" [") + s + "]" : std::string();
  }
  ncclResult_t status_;
  std::string api_;
};

}  // namespace weightsync
