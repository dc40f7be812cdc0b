// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! mint_unique_id_init: a C++ trainer's half of vLLM's unique-id mode, as vLLM's own trainer
//! helper does it: mint a fresh ncclUniqueId, and return the workers' init info (its
//! nccl_unique_id_b64 the 172-character standard base64 of the 128 bytes) with its JSON for the
//! chosen wire version, ready for POST /init_weight_transfer_engine. The trainer then enters
//! ncclCommInitRank as rank 0 while the workers do (no store barrier in this mode), and runs the
//! one-element float32 SUM all-reduce warm-up vLLM's workers run: EngineOptions{.backend =
//! "nccl", .protocol = Protocol::vllm} with this info does both.

#include "weightsync/config.hpp"
#if !WEIGHTSYNC_HAS_NCCL
#error "<weightsync/vllm/uid_init.hpp> needs NCCL (WEIGHTSYNC_HAS_NCCL=0)"
#endif

#include <nlohmann/json.hpp>

#include "weightsync/engine/update_request.hpp"
#include "weightsync/nccl/unique_id.hpp"
#include "weightsync/vllm/init_info.hpp"
#include "weightsync/vllm/wire.hpp"
#include "weightsync/vllm/wire_version.hpp"

namespace weightsync {

//! The minted id, the workers' init info, and that info's JSON for the wire version.
struct UniqueIdInit {
  NcclUniqueId id;
  NcclInitInfo info;
  nlohmann::json init_info_json;
};

//! Mints an id (ncclGetUniqueId) for a group of `world_size` ranks whose workers start at
//! `rank_offset`. @throws nccl_error when NCCL cannot mint one; config_error("nccl_unique_id_b64")
//! for a wire version without the mode (vLLM < 0.28, SGLang), or as NcclInitInfo::validate().
inline UniqueIdInit mint_unique_id_init(int world_size, int rank_offset = 1,
                                        const Packing& packing = {},
                                        WireVersion version = kDefaultWireVersion) {
  UniqueIdInit r{NcclUniqueId::generate(), {}, {}};
  r.info = unique_id_init_info(r.id.bytes(), world_size, rank_offset, packing);
  r.init_info_json = write_init_info(r.info, version);
  return r;
}

}  // namespace weightsync
