// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The "nccl" backend: CollectiveTransport over an NcclCommunicator, one GPU per rank. Including
//! this header registers "nccl" with BackendRegistry::global() (<weightsync/backends.hpp> includes
//! it). vllm_init_info, the init info a trainer hands a vLLM server, is vLLM's:
//! <weightsync/vllm/nccl_init.hpp> (<weightsync/vllm.hpp> includes it where NCCL is).

#include "weightsync/config.hpp"
#if !WEIGHTSYNC_HAS_NCCL
#error "<weightsync/nccl/backend.hpp> needs NCCL (WEIGHTSYNC_HAS_NCCL=0)"
#endif

#include <cstdint>
#include <memory>

#include "weightsync/cuda/check.hpp"
#include "weightsync/engine/backend.hpp"
#include "weightsync/engine/comm_backend.hpp"
#include "weightsync/engine/group_info.hpp"
#include "weightsync/engine/registry.hpp"
#include "weightsync/engine/transport.hpp"
#include "weightsync/nccl/communicator.hpp"
#include "weightsync/nccl/torch_bootstrap.hpp"
#include "weightsync/nccl/unique_id.hpp"
#include "weightsync/tuning.hpp"

namespace weightsync {

static_assert(ShardedTransport<CollectiveTransport<NcclCommunicator>>);

//! The NCCL backend: TCP rendezvous (master_address/master_port) or a shared unique id, one GPU
//! per rank (EngineOptions::device).
inline std::unique_ptr<Backend> make_nccl_backend() {
  return make_comm_backend<NcclCommunicator>("nccl", [](const GroupInfo& info, int rank,
                                                        const EngineOptions& o) {
    NcclOptions n;
    n.device = o.device;
    n.timeout = o.timeout;
    n.stop = o.stop;
    // Blocking launches split a child communicator off the bounded parent: a collective that
    // vLLM's workers do not run, so vLLM's wire keeps non-blocking launches. Only this
    // library's peers set up every connection at init.
    const bool ours = o.protocol == Protocol::weightsync;
    n.blocking = o.nccl_blocking && ours;
    n.connect_all = ours;
    // The group is checked first, then the GPU: at once, not after a rendezvous timeout.
    if (info.uses_unique_id()) {
      detail::require_cuda_device("nccl", o.device);
      return NcclCommunicator::init(NcclUniqueId(*info.nccl_unique_id), rank, info.world_size, n);
    }
    const auto r = detail::rendezvous_options(info, rank, o, "nccl");
    detail::require_cuda_device("nccl", o.device);
    if (!ours)  // vLLM's TCP mode: its TCPStore and pickled unique id
      return vllm_tcp_communicator(r.address, r.port, rank, info.world_size, n);
    return NcclCommunicator::connect(r, n);
  });
}

namespace detail {
//! Registers "nccl" when the program starts (once, whatever the number of includes).
inline const bool nccl_backend_registered = register_builtin_backend("nccl", make_nccl_backend);
}  // namespace detail

}  // namespace weightsync
