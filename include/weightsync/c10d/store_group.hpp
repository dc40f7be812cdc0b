// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Host-side halves of the two Python rendezvous this library joins through a c10d TCPStore:
//!
//! - vLLM's TCP mode. `StatelessProcessGroup.create(host, port, rank, world_size)` is a TCPStore
//!   hosted by rank 0 (`TCPStore(host, port, world_size, is_master=rank == 0, use_libuv=False)`);
//!   every rank adds 1 to the join counter "init/", and rank 0 waits until it reaches world_size.
//!   `PyNcclCommunicator` then has rank 0 publish the pickled ncclUniqueId with
//!   `broadcast_obj(id, src=0)`: key "broadcast_from/0/<n>" (n counts rank 0's broadcasts, 0 for
//!   the communicator's id), value vllm_pickle_unique_id().
//! - torch.distributed process groups. `init_process_group(init_method="tcp://host:port")` makes
//!   the same kind of store (rank 0 hosts, "init/" counts the joiners) and wraps it:
//!   `PrefixStore("default_pg", store)` for the default group (SGLang's
//!   `init_custom_process_group` wraps it in `PrefixStore(group_name, store)` instead), then
//!   `_new_process_group_helper` adds `PrefixStore(f"{group_name}/")` (the default group is named
//!   "0") and `PrefixStore("cuda/")` for the NCCL backend. PrefixStore joins prefix and key with
//!   "/", so ProcessGroupNCCL's n-th communicator id (raw 128 bytes, key str(n), set by group rank
//!   0, read by the others) lives under "default_pg/0//cuda//0" for the first one.
//!
//! These functions move the 128 id bytes; <weightsync/nccl/torch_bootstrap.hpp> creates the id
//! and the communicator around them.

#include <array>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "weightsync/c10d/client.hpp"
#include "weightsync/c10d/server.hpp"
#include "weightsync/c10d/vllm_pickle.hpp"
#include "weightsync/detail/format.hpp"
#include "weightsync/error.hpp"

namespace weightsync {

using UniqueIdBytes = std::array<std::byte, 128>;

struct StoreGroupOptions {
  std::string host = "127.0.0.1";  //!< master_address
  int port = 0;                    //!< master_port (rank 0 listens here; 0: any, see port())
  int rank = 0;
  int world_size = 1;
  std::chrono::milliseconds timeout{300000};  //!< joining, and every wait on a key
  //! The dialect of a Python rank 0's store: torch2 for torch >= 2.1, torch2_0 / torch1_13 for
  //! torch 2.0 / 1.13 (a wrong guess is a prompt error naming the dialect, see TcpStoreClient).
  //! A store hosted here (rank 0) serves every dialect.
  TcpStoreWire wire = TcpStoreWire::torch2;
  //! Rank 0 listens on this address (vLLM binds master_address; "0.0.0.0" for every interface).
  std::string listen_host;

  void validate() const {
    if (world_size < 1)
      throw config_error("world_size", detail::cat("must be >= 1, got ", world_size));
    if (rank < 0 || rank >= world_size)
      throw config_error("rank", detail::cat("must be in 0..", world_size - 1, ", got ", rank));
    if (port < 0 || port > 65535 || (rank != 0 && port == 0))
      throw config_error("master_port", detail::cat("must be in 1..65535, got ", port));
  }
};

//! The store every rank shares: rank 0 hosts it (and is its own client, as torch's master is).
class StoreGroup {
 public:
  //! Hosts (rank 0) or joins the store, adds this rank to "init/", and on rank 0 waits until all
  //! world_size ranks have joined. @throws timeout_error("store join") naming how many joined.
  static StoreGroup create(const StoreGroupOptions& o) {
    o.validate();
    StoreGroup g;
    g.o_ = o;
    TcpStoreClientOptions c;
    c.host = o.host;
    c.port = o.port;
    c.timeout = o.timeout;
    c.wire = o.wire;
    if (o.rank == 0) {
      TcpStoreServerOptions s;
      s.host = o.listen_host.empty() ? o.host : o.listen_host;
      s.port = o.port;
      g.server_ = std::make_unique<TcpStoreServer>(s);
      c.port = g.o_.port = g.server_->port();
    }
    g.client_ = TcpStoreClient::connect(c);
    g.client_.add_raw("init/", 1);
    if (o.rank == 0) g.wait_for_workers();
    return g;
  }

  int rank() const noexcept { return o_.rank; }
  int world_size() const noexcept { return o_.world_size; }
  int port() const noexcept { return o_.port; }
  TcpStoreClient& store() noexcept { return client_; }

  //! vLLM's broadcast_obj on raw (already pickled) bytes: src stores, the others read.
  std::string broadcast(std::string_view value_on_src, int src) {
    const std::string key = detail::cat("broadcast_from/", src, "/",
                                        src == o_.rank ? send_counter_ : recv_counter_[src]);
    if (src == o_.rank) {
      client_.set(key, value_on_src);
      ++send_counter_;
      return std::string(value_on_src);
    }
    std::string v = client_.get(key);
    ++recv_counter_[src];
    return v;
  }

 private:
  void wait_for_workers() {
    const auto deadline = detail::Deadline::after(o_.timeout);
    std::int64_t joined = 0;
    while ((joined = client_.add_raw("init/", 0)) < o_.world_size) {
      if (deadline.expired())
        throw timeout_error(
            "store join", -1,
            detail::cat(joined, " of ", o_.world_size, " ranks joined the TCPStore on ", o_.host,
                        ":", o_.port, " within ", o_.timeout.count(), " ms"));
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  StoreGroupOptions o_;
  std::unique_ptr<TcpStoreServer> server_;  // declared before the client: outlives it
  TcpStoreClient client_;
  int send_counter_ = 0;
  std::map<int, int> recv_counter_;
};

//! vLLM TCP mode: rank 0 publishes `id` (pickled as vLLM pickles it), the others read and parse
//! it. Returns the id every rank then passes to ncclCommInitRank.
inline UniqueIdBytes vllm_exchange_unique_id(StoreGroup& g, const UniqueIdBytes& id_on_rank0) {
  if (g.rank() == 0) {
    g.broadcast(vllm_pickle_unique_id(id_on_rank0), 0);
    return id_on_rank0;
  }
  return vllm_unpickle_unique_id(g.broadcast({}, 0));
}

//! Where a torch.distributed group keeps its keys (before the TCPStore's own "/").
struct TorchGroupKeys {
  std::string store_prefix = "default_pg";  //!< init_process_group; SGLang: the group name
  std::string group_name = "0";             //!< the default group's name
  std::string device = "cuda";              //!< the backend's device prefix (NCCL: cuda)

  //! The key ProcessGroupNCCL's `key` ends up as, e.g. "default_pg/0//cuda//0".
  std::string key(const std::string& k) const {
    return store_prefix + "/" + group_name + "/" + "/" + device + "/" + "/" + k;
  }
  //! SGLang / verl / OpenRLHF style named group (init_custom_process_group(group_name=...)).
  static TorchGroupKeys named(const std::string& name) { return {name, name, "cuda"}; }
};

//! ProcessGroupNCCL's unique-id exchange for its `n`-th communicator (n = 0 for the first
//! collective of a group): group rank 0 stores the 128 raw bytes, the others wait and read them.
inline UniqueIdBytes torch_exchange_unique_id(StoreGroup& g, const TorchGroupKeys& keys,
                                              const UniqueIdBytes& id_on_rank0, int n = 0) {
  const std::string k = keys.key(std::to_string(n));
  if (g.rank() == 0) {
    g.store().set(k, std::string_view(reinterpret_cast<const char*>(id_on_rank0.data()), 128));
    return id_on_rank0;
  }
  const std::string v = g.store().get(k);
  if (v.size() != 128)
    throw protocol_error(0, detail::cat("torch.distributed unique id under '", k, "' has ",
                                        v.size(), " bytes, expected 128 (an ncclUniqueId)"));
  UniqueIdBytes id{};
  std::memcpy(id.data(), v.data(), 128);
  return id;
}

}  // namespace weightsync
