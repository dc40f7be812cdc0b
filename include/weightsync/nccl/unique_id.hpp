// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! NcclUniqueId: the 128-byte ncclUniqueId as a value, with the standard-base64 form that
//! NcclInitInfo::nccl_unique_id_b64 (and vLLM) carries.

#include "weightsync/config.hpp"
#if !WEIGHTSYNC_HAS_NCCL
#error "<weightsync/nccl/unique_id.hpp> needs NCCL (WEIGHTSYNC_HAS_NCCL=0)"
#endif

#include <nccl.h>

#include <array>
#include <cstddef>
#include <cstring>
#include <span>
#include <string>

#include "weightsync/detail/base64.hpp"
#include "weightsync/engine/group_info.hpp"
#include "weightsync/nccl/check.hpp"

namespace weightsync {

static_assert(sizeof(ncclUniqueId) == kNcclUniqueIdBytes);

class NcclUniqueId {
 public:
  NcclUniqueId() = default;
  explicit NcclUniqueId(const ncclUniqueId& id) noexcept { std::memcpy(bytes_.data(), &id, bytes_.size()); }
  explicit NcclUniqueId(const std::array<std::byte, kNcclUniqueIdBytes>& b) noexcept : bytes_(b) {}

  //! A fresh id (ncclGetUniqueId). Rank 0 makes it; every rank must use the same one.
  static NcclUniqueId generate() {
    ncclUniqueId id;
    const auto r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) throw nccl_error(r, "ncclGetUniqueId", 0);
    return NcclUniqueId(id);
  }
  //! @throws config_error("nccl_unique_id_b64") unless `b64` is canonical base64 of 128 bytes.
  static NcclUniqueId from_base64(const std::string& b64) {
    return NcclUniqueId(decode_unique_id_b64(b64));
  }
  std::string to_base64() const { return detail::base64_encode(bytes_); }

  ncclUniqueId native() const noexcept {
    ncclUniqueId id;
    std::memcpy(&id, bytes_.data(), bytes_.size());
    return id;
  }
  std::span<const std::byte, kNcclUniqueIdBytes> bytes() const noexcept { return bytes_; }
  friend bool operator==(const NcclUniqueId&, const NcclUniqueId&) = default;

 private:
  std::array<std::byte, kNcclUniqueIdBytes> bytes_{};
};

}  // namespace weightsync
