// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The "host" backend (the engines' default): CollectiveTransport over a HostCommunicator, TCP and
//! host memory, no GPU. Including this header registers it with BackendRegistry::global();
//! <weightsync/engine.hpp> includes it.

#include <memory>

#include "weightsync/engine/backend.hpp"
#include "weightsync/engine/comm_backend.hpp"
#include "weightsync/engine/group_info.hpp"
#include "weightsync/engine/registry.hpp"
#include "weightsync/engine/transport.hpp"
#include "weightsync/host/communicator.hpp"

namespace weightsync {

static_assert(ShardedTransport<CollectiveTransport<HostCommunicator>>);

//! The host backend: TCP rendezvous at master_address/master_port, host memory, no GPU.
inline std::unique_ptr<Backend> make_host_backend() {
  return make_comm_backend<HostCommunicator>("host", [](const GroupInfo& info, int rank,
                                                        const EngineOptions& o) {
    return HostCommunicator::connect(detail::rendezvous_options(info, rank, o, "host"), o.timeout);
  });
}

namespace detail {
//! Registers "host" when the program starts (once, whatever the number of includes).
inline const bool host_backend_registered = register_builtin_backend("host", make_host_backend);
}  // namespace detail

}  // namespace weightsync
