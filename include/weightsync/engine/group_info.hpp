// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! GroupInfo: how one end joins a transfer group, in the engines' own terms (no JSON, no base64):
//! the world size and one rendezvous mode. Backend::init takes it; vLLM's NcclInitInfo
//! (vllm/init_info.hpp) converts to it with NcclInitInfo::group_info(). Also the decoding of a
//! unique id from the standard base64 that vLLM's JSON and NcclUniqueId::from_base64 use.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "weightsync/detail/base64.hpp"
#include "weightsync/detail/format.hpp"
#include "weightsync/error.hpp"

namespace weightsync {

//! Size of an ncclUniqueId (NCCL_UNIQUE_ID_BYTES).
inline constexpr std::size_t kNcclUniqueIdBytes = 128;

namespace detail {
inline void check_port(std::int64_t v) {
  if (v < 1 || v > 65535) throw config_error("master_port", cat("must be in 1..65535, got ", v));
}
}  // namespace detail

//! Decodes a standard-base64 ncclUniqueId. @throws config_error("nccl_unique_id_b64") when it is
//! not canonical base64 or does not decode to exactly 128 bytes.
inline std::array<std::byte, kNcclUniqueIdBytes> decode_unique_id_b64(const std::string& b64) {
  std::string why;
  auto bytes = detail::base64_decode(b64, why);
  if (!bytes) throw config_error("nccl_unique_id_b64", "not valid standard base64: " + why);
  if (bytes->size() != kNcclUniqueIdBytes)
    throw config_error("nccl_unique_id_b64", detail::cat("must decode to ", kNcclUniqueIdBytes,
                                                         " bytes, got ", bytes->size()));
  std::array<std::byte, kNcclUniqueIdBytes> out{};
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = (*bytes)[i];
  return out;
}

//! The group a backend joins: `world_size` ranks that meet in exactly one way:
//! - TCP rendezvous at `master_address`:`master_port` (rank 0 listens): every backend;
//! - a shared NCCL unique id (`nccl_unique_id`, its 128 raw bytes): the "nccl" backend only.
struct GroupInfo {
  int world_size = 2;
  std::optional<std::string> master_address;
  std::optional<int> master_port;
  std::optional<std::array<std::byte, kNcclUniqueIdBytes>> nccl_unique_id;

  bool uses_unique_id() const noexcept { return nccl_unique_id.has_value(); }

  //! @throws config_error naming the first field at fault.
  void validate() const {
    if (world_size < 1)
      throw config_error("world_size", detail::cat("must be >= 1, got ", world_size));
    const bool tcp = master_address.has_value() || master_port.has_value();
    if (tcp && uses_unique_id())
      throw config_error("nccl_unique_id",
                         "pass a unique id or master_address/master_port, not both");
    if (!tcp && !uses_unique_id())
      throw config_error("master_address",
                         "need a unique id, or both master_address and master_port");
    if (!tcp) return;
    if (!master_address) throw config_error("master_address", "required with master_port");
    if (master_address->empty()) throw config_error("master_address", "must not be empty");
    if (!master_port) throw config_error("master_port", "required with master_address");
    detail::check_port(*master_port);
  }

  friend bool operator==(const GroupInfo&, const GroupInfo&) = default;
};

}  // namespace weightsync
