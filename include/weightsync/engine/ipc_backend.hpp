// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The CUDA IPC backends "ipc" (one GPU) and "p2p" (one node), over IpcTransport. Empty without
//! CUDA.

#include "weightsync/config.hpp"

#if WEIGHTSYNC_HAS_CUDA
#include <cuda_runtime.h>

#include <memory>
#include <optional>
#include <string>

#include "weightsync/cuda/ipc.hpp"
#include "weightsync/engine/backend.hpp"

namespace weightsync {

//! The CUDA IPC backends: "ipc" (colocated: trainer and server processes on one GPU) and "p2p"
//! (one node, another GPU: the consumer pulls over NVLink with copy engines). Rendezvous over
//! master_address/master_port; see IpcTransport.
class IpcBackend final : public Backend {
 public:
  explicit IpcBackend(IpcOptions o) : opt_(o) {}
  std::string name() const override { return opt_.same_gpu ? "ipc" : "p2p"; }
  void init(const NcclInitInfo& info, int rank, const EngineOptions& o) override {
    info.validate();
    if (rank < 0 || rank >= info.world_size)
      throw config_error("rank_offset", detail::cat("this worker's rank ", rank,
                                                    " is outside the world of ", info.world_size));
    if (o.protocol != Protocol::weightsync)
      throw config_error("protocol",
                         name() + " backend: only Protocol::weightsync (vLLM's wire is NCCL)");
    shutdown();
    t_.emplace(detail::rendezvous_options(info, rank, o, opt_.same_gpu ? "ipc" : "p2p"), o.device,
               opt_, o.timeout);
  }
  bool initialized() const noexcept override { return t_.has_value(); }
  bool healthy() const noexcept override { return t_ && t_->healthy(); }
  int rank() const noexcept override { return t_ ? t_->rank() : -1; }
  int world_size() const noexcept override { return t_ ? t_->size() : 0; }
  void check() override {
    if (!t_) return;
    try {
      t_->check();
    } catch (const std::exception& e) {
      t_->abort(e.what());
      throw;
    }
  }
  TransferStats receive(std::span<const TensorMeta> metas, TransferOptions opt,
                        const AnyLoadWeights& load) override {
    ready();
    return t_->receive(metas, opt, [&](std::span<const TensorView> v, cudaStream_t s) {
      load(v, static_cast<void*>(s));
    });
  }
  TransferStats send(std::span<const TensorMeta> metas, AnyTensorRange& items,
                     TransferOptions opt) override {
    ready();
    return t_->send(metas, items, opt);
  }
  TransferStats receive_sharded(std::span<const TensorMeta> metas, std::span<const ShardSpec> specs,
                                int trainers, TransferOptions opt,
                                const AnyLoadWeights& load) override {
    ready();
    return receive_shards(
        *t_, metas, specs, trainers, opt,
        [&](std::span<const TensorView> v, cudaStream_t s) { load(v, static_cast<void*>(s)); });
  }
  TransferStats send_sharded(std::span<const TensorMeta> metas, std::span<const ShardSpec> specs,
                             int trainers, AnyTensorRange& items, TransferOptions opt) override {
    ready();
    return send_shards(*t_, metas, specs, trainers, items, opt);
  }
  void shutdown() noexcept override { t_.reset(); }
  IpcTransport& transport() { return *t_; }

 private:
  void ready() const {
    if (!t_) throw state_error(name() + " backend: not initialized");
    if (!t_->healthy())
      throw state_error(name() +
                        " backend: the transport failed or was aborted by an earlier "
                        "error; call init_transfer_engine again");
  }
  IpcOptions opt_;
  std::optional<IpcTransport> t_;
};

inline std::unique_ptr<Backend> make_ipc_backend(IpcOptions o = {}) {
  o.same_gpu = true;
  return std::make_unique<IpcBackend>(o);
}
inline std::unique_ptr<Backend> make_p2p_backend(IpcOptions o = {}) {
  o.same_gpu = false;
  return std::make_unique<IpcBackend>(o);
}
}  // namespace weightsync
#endif  // WEIGHTSYNC_HAS_CUDA
