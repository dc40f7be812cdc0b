// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! NcclInitInfo: how an inference engine joins the trainer's group, as vLLM's
//! NCCLWeightTransferInitInfo says it (field names exactly vLLM's), and its conversion to the
//! engines' InitRequest (to_init_request, found by ADL: engine/adapter.hpp). Its JSON is in
//! vllm/json.hpp; this header needs no JSON library.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "weightsync/detail/base64.hpp"
#include "weightsync/detail/format.hpp"
#include "weightsync/engine/adapter.hpp"
#include "weightsync/engine/group_info.hpp"
#include "weightsync/engine/init_request.hpp"
#include "weightsync/engine/update_request.hpp"
#include "weightsync/error.hpp"
#include "weightsync/tuning.hpp"

namespace weightsync {

//! How an inference engine joins the trainer's group. Exactly one rendezvous mode:
//! master_address + master_port (TCP rendezvous, rank 0 listens) or nccl_unique_id_b64.
struct NcclInitInfo {
  std::optional<std::string> master_address;
  std::optional<int> master_port;
  int rank_offset = 1;
  int world_size = 2;
  std::optional<std::string> nccl_unique_id_b64;
  bool packed = false;
  std::int64_t packed_buffer_size_bytes = kDefaultPackedBufferSizeBytes;
  int packed_num_buffers = kDefaultPackedNumBuffers;

  bool uses_unique_id() const { return nccl_unique_id_b64.has_value(); }

  //! @throws config_error naming the first field at fault.
  void validate() const {
    if (world_size < 1)
      throw config_error("world_size", detail::cat("must be >= 1, got ", world_size));
    if (rank_offset < 0)
      throw config_error("rank_offset", detail::cat("must be >= 0, got ", rank_offset));
    if (rank_offset >= world_size)
      throw config_error("rank_offset",
                         detail::cat("must be < world_size (", world_size, "), got ", rank_offset));
    const bool tcp = master_address.has_value() || master_port.has_value();
    if (tcp && uses_unique_id())
      throw config_error("nccl_unique_id_b64",
                         "pass nccl_unique_id_b64 or master_address/master_port, not both");
    if (!tcp && !uses_unique_id())
      throw config_error("master_address",
                         "need nccl_unique_id_b64, or both master_address and master_port");
    if (tcp) {
      if (!master_address) throw config_error("master_address", "required with master_port");
      if (master_address->empty()) throw config_error("master_address", "must not be empty");
      if (!master_port) throw config_error("master_port", "required with master_address");
      detail::check_port(*master_port);
    } else {
      (void)decode_unique_id_b64(*nccl_unique_id_b64);
    }
    packing().validate();
  }

  //! The group this info describes, as the backends take it (Backend::init): the unique id
  //! decoded from base64, no vLLM fields (rank_offset and packing are the engines').
  //! @throws config_error as validate() does.
  GroupInfo group_info() const {
    validate();
    GroupInfo g;
    g.world_size = world_size;
    g.master_address = master_address;
    g.master_port = master_port;
    if (uses_unique_id()) g.nccl_unique_id = decode_unique_id_b64(*nccl_unique_id_b64);
    return g;
  }
  //! The packing of every update that does not override it.
  Packing packing() const { return {packed, packed_buffer_size_bytes, packed_num_buffers}; }

  friend bool operator==(const NcclInitInfo&, const NcclInitInfo&) = default;
};

//! The workers' init info of vLLM's unique-id mode: `id` (the 128 raw ncclUniqueId bytes) as
//! standard base64 (172 characters), no master_address/master_port, and the packing every
//! update uses. What a trainer sends after minting the id (vllm/uid_init.hpp mints it where NCCL
//! is); write_init_info (vllm/wire.hpp) writes it for vLLM >= 0.28, the first with this mode.
//! @throws config_error as validate() does.
inline NcclInitInfo unique_id_init_info(std::span<const std::byte, kNcclUniqueIdBytes> id,
                                        int world_size, int rank_offset = 1,
                                        const Packing& packing = {}) {
  NcclInitInfo i;
  i.nccl_unique_id_b64 = detail::base64_encode(id);
  i.world_size = world_size;
  i.rank_offset = rank_offset;
  i.packed = packing.packed;
  i.packed_buffer_size_bytes = packing.buffer_size_bytes;
  i.packed_num_buffers = packing.num_buffers;
  i.validate();
  return i;
}

//! The engines' InitRequest (engine/adapter.hpp). @throws config_error as validate() does.
inline InitRequest to_init_request(const NcclInitInfo& info, InitContext) {
  InitRequest r;
  r.group = info.group_info();
  r.rank_offset = info.rank_offset;
  r.packing = info.packing();
  return r;
}

}  // namespace weightsync
