// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! NCCL communicators whose rendezvous is a Python rank's c10d TCPStore (or ours, hosted for
//! Python ranks to join):
//!
//! - vllm_tcp_communicator(): vLLM's TCP mode (`NCCLWeightTransferEngine.trainer_init` /
//!   `init_transfer_engine` with master_address/master_port): StatelessProcessGroup + the
//!   PyNcclCommunicator unique-id broadcast + ncclCommInitRank + the 1-element float32 SUM
//!   all-reduce warm-up.
//! - TorchGroupCommunicator::create(): a rank of a torch.distributed NCCL process group
//!   (`init_process_group(backend="nccl", init_method="tcp://...")`, or SGLang's named group):
//!   ProcessGroupNCCL's unique-id exchange through the group's PrefixStore keys, then
//!   ncclCommInitRank, no warm-up (ProcessGroupNCCL runs none). ProcessGroupNCCL creates its
//!   communicator lazily, at the group's first collective: the Python ranks reach
//!   ncclCommInitRank when they call their first `torch.distributed.broadcast`.
//!
//! The store protocol parts are host code (<weightsync/c10d/store_group.hpp>).

#include "weightsync/config.hpp"

#if !WEIGHTSYNC_HAS_NCCL
#error "<weightsync/nccl/torch_bootstrap.hpp> needs NCCL (WEIGHTSYNC_HAS_NCCL=0)"
#endif

#include <array>
#include <cstddef>
#include <cstring>
#include <utility>

#include "weightsync/c10d/store_group.hpp"
#include "weightsync/nccl/communicator.hpp"
#include "weightsync/nccl/unique_id.hpp"

namespace weightsync {

namespace detail {
inline UniqueIdBytes generate_unique_id_bytes(int device) {
  detail::CurrentDeviceGuard g(device);
  const auto id = NcclUniqueId::generate();
  UniqueIdBytes b{};
  std::memcpy(b.data(), id.bytes().data(), b.size());
  return b;
}
}  // namespace detail

//! vLLM TCP mode. Rank 0 (the trainer) hosts the store on g.host:g.port; ranks > 0 (workers,
//! rank = rank_offset + worker index) join it. The store lives until every rank has entered
//! ncclCommInitRank (rank 0's init returns only then), which is all vLLM needs of it.
//! @throws timeout_error ("store join", "store wait", NCCL init) naming what did not arrive,
//!   protocol_error when the stored id is not vLLM's pickle.
inline NcclCommunicator vllm_tcp_communicator(const StoreGroupOptions& g, NcclOptions n = {}) {
  auto group = StoreGroup::create(g);
  UniqueIdBytes id{};
  if (g.rank == 0) id = detail::generate_unique_id_bytes(n.device);
  id = vllm_exchange_unique_id(group, id);
  n.vllm_warmup = true;  // PyNcclCommunicator always runs it
  // No blocking child: splitting one off is a collective that a vLLM rank never runs, so our
  // rank would wait in ncclCommSplit until its deadline.
  n.blocking = false;
  n.connect_all = false;
  return NcclCommunicator::init(NcclUniqueId(id), g.rank, g.world_size, n);
}

//! The same from NcclInitInfo's fields (what the "nccl" backend calls for Protocol::vllm with
//! master_address/master_port): the store and every wait on it share the NCCL timeout.
inline NcclCommunicator vllm_tcp_communicator(const std::string& master_address, int master_port,
                                              int rank, int world_size, const NcclOptions& n) {
  StoreGroupOptions g;
  g.host = master_address;
  g.port = master_port;
  g.rank = rank;
  g.world_size = world_size;
  g.timeout = n.timeout;
  return vllm_tcp_communicator(g, n);
}

//! A rank of a torch.distributed NCCL group, holding the store for as long as the communicator:
//! a hosted store must outlive it, since ProcessGroupNCCL's Python ranks keep using the store
//! (monitoring, later groups).
class TorchGroupCommunicator {
 public:
  //! Hosts (rank 0) or joins the group's store, exchanges the unique id of the group's
  //! `comm_index`-th communicator under `keys`, and initializes. Call it when the Python ranks
  //! run their first collective on the group.
  static TorchGroupCommunicator create(const StoreGroupOptions& g, const TorchGroupKeys& keys = {},
                                       NcclOptions n = {}, int comm_index = 0) {
    TorchGroupCommunicator c;
    c.store_ = StoreGroup::create(g);
    UniqueIdBytes id{};
    if (g.rank == 0) id = detail::generate_unique_id_bytes(n.device);
    id = torch_exchange_unique_id(c.store_, keys, id, comm_index);
    n.vllm_warmup = false;  // ProcessGroupNCCL runs no warm-up collective
    // Nor does it split a child off its communicator: a blocking child (NcclOptions::blocking)
    // would make our rank wait in ncclCommSplit for a collective the Python ranks never run.
    n.blocking = false;
    n.connect_all = false;
    c.comm_ = NcclCommunicator::init(NcclUniqueId(id), g.rank, g.world_size, n);
    return c;
  }

  NcclCommunicator& comm() noexcept { return comm_; }
  StoreGroup& store() noexcept { return store_; }

 private:
  StoreGroup store_;  // declared first: destroyed after the communicator
  NcclCommunicator comm_;
};

}  // namespace weightsync
