// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The CUDA IPC backends "ipc" (one GPU) and "p2p" (one node): TransportBackend<IpcTransport>,
//! IpcTransport being the Transport itself (no adapter). Including this header registers both
//! with BackendRegistry::global() (<weightsync/backends.hpp> includes it).

#include "weightsync/config.hpp"
#if !WEIGHTSYNC_HAS_CUDA
#error "<weightsync/ipc/backend.hpp> needs the CUDA runtime (WEIGHTSYNC_HAS_CUDA=0)"
#endif

#include <cuda_runtime.h>

#include <chrono>
#include <memory>
#include <span>
#include <string>

#include "weightsync/cuda/check.hpp"
#include "weightsync/cuda/mps.hpp"
#include "weightsync/engine/backend.hpp"
#include "weightsync/engine/group_info.hpp"
#include "weightsync/engine/registry.hpp"
#include "weightsync/engine/transport.hpp"
#include "weightsync/ipc/options.hpp"
#include "weightsync/ipc/transport.hpp"
#include "weightsync/log.hpp"

namespace weightsync {

static_assert(ShardedTransport<IpcTransport>);

namespace detail {
inline std::unique_ptr<Backend> make_ipc_end_backend(IpcOptions io) {
  const char* name = io.same_gpu ? "ipc" : "p2p";
  return make_transport_backend(
      name, [io, name](const GroupInfo& info, int rank, const EngineOptions& o) {
        if (o.protocol != Protocol::weightsync)
          throw config_error("protocol", std::string(name) +
                                             " backend: only Protocol::weightsync (vLLM's wire "
                                             "is NCCL)");
        auto rv = rendezvous_options(info, rank, o, name);  // the group first, then the GPU
        require_cuda_device(name, o.device);  // at once, not after a rendezvous timeout
        // Colocated processes share one GPU: say whether MPS lets them run side by side.
        if (io.same_gpu)
          log(mps_active() ? LogLevel::info : LogLevel::warning, "ipc: " + mps_note());
        return IpcTransport(rv, o.device, io, o.timeout);
      });
}
}  // namespace detail

inline std::unique_ptr<Backend> make_ipc_backend(IpcOptions o = {}) {
  o.same_gpu = true;
  return detail::make_ipc_end_backend(o);
}
inline std::unique_ptr<Backend> make_p2p_backend(IpcOptions o = {}) {
  o.same_gpu = false;
  return detail::make_ipc_end_backend(o);
}

namespace detail {
//! Register "ipc" and "p2p" (default IpcOptions) when the program starts (once each).
inline const bool ipc_backend_registered =
    register_builtin_backend("ipc", [] { return make_ipc_backend(); });
inline const bool p2p_backend_registered =
    register_builtin_backend("p2p", [] { return make_p2p_backend(); });
}  // namespace detail

}  // namespace weightsync
