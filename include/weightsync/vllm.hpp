// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! vLLM's side of weight syncing, converted to the engines' neutral types (engine/adapter.hpp):
//! the init infos (NcclInitInfo: vllm/init_info.hpp; M2NInitInfo: vllm/m2n_info.hpp), the update
//! infos (NcclUpdateInfo with the delta and sparse_nccl fields: vllm/update_info.hpp;
//! M2NUpdateInfo; M2N schema 2: vllm/m2n_v2.hpp), and their JSON (vllm/json.hpp: to_json /
//! from_json, parse_init_info); the JSON of one engine version, vLLM before or since 0.28 or
//! SGLang (vllm/wire.hpp, vllm/sglang.hpp).
//! With it, the engines take vLLM's structs and JSON as they come
//! (`engine.init_transfer_engine(init_info)`, `engine.update_weights(update_info, load)`).
//! The HTTP routes and client (cpp-httplib) are in <weightsync/vllm/control_plane.hpp>; the
//! pickled unique id of vLLM's TCP rendezvous in <weightsync/c10d/vllm_pickle.hpp>.

#include "weightsync/config.hpp"
#include "weightsync/vllm/init_info.hpp"
#include "weightsync/vllm/json.hpp"
#include "weightsync/vllm/m2n_info.hpp"
#include "weightsync/vllm/m2n_v2.hpp"
#include "weightsync/vllm/sglang.hpp"
#include "weightsync/vllm/update_info.hpp"
#include "weightsync/vllm/wire.hpp"
#include "weightsync/vllm/wire_version.hpp"
#if WEIGHTSYNC_HAS_NCCL
#include "weightsync/vllm/nccl_init.hpp"  // vllm_init_info
#include "weightsync/vllm/uid_init.hpp"   // mint_unique_id_init
#endif
#if !WEIGHTSYNC_HAS_NCCL
namespace weightsync {
namespace detail {
template <class...>
inline constexpr bool needs_nccl = false;
}  // namespace detail
//! Without NCCL (weightsync::host, or a build that found none): vllm_init_info mints an
//! ncclUniqueId, which only NCCL can; a call says so at compile time.
template <class... Args>
NcclInitInfo vllm_init_info(Args&&...) {
  static_assert(detail::needs_nccl<Args...>,
                "vllm_init_info mints an ncclUniqueId: it needs NCCL (CMake: link weightsync::cuda "
                "from a weightsync built with NCCL); the host backend takes an NcclInitInfo with "
                "master_address and master_port instead");
  return {};
}
}  // namespace weightsync
#endif
