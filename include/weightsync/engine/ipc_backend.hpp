// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The CUDA IPC backends "ipc" (one GPU) and "p2p" (one node): IpcEnd, the Transport over
//! IpcTransport. Empty without CUDA.

#include "weightsync/config.hpp"

#if WEIGHTSYNC_HAS_CUDA
#include <cuda_runtime.h>

#include <chrono>
#include <memory>
#include <span>
#include <string>

#include "weightsync/cuda/check.hpp"
#include "weightsync/cuda/ipc.hpp"
#include "weightsync/cuda/mps.hpp"
#include "weightsync/engine/backend.hpp"
#include "weightsync/engine/transport.hpp"
#include "weightsync/log.hpp"

namespace weightsync {

//! The Transport of the CUDA IPC backends: "ipc" (colocated: trainer and server processes on one
//! GPU) and "p2p" (one node, another GPU: the consumer pulls over NVLink with copy engines).
//! Rendezvous over master_address/master_port; see IpcTransport.
class IpcEnd {
 public:
  IpcEnd(const RendezvousOptions& rv, int device, IpcOptions opt, std::chrono::milliseconds timeout)
      : t_(rv, device, opt, timeout) {
    // Colocated processes share one GPU: say whether MPS lets them run side by side.
    if (opt.same_gpu) log(mps_active() ? LogLevel::info : LogLevel::warning, "ipc: " + mps_note());
  }

  int rank() const noexcept { return t_.rank(); }
  int size() const noexcept { return t_.size(); }
  bool healthy() const noexcept { return t_.healthy(); }
  void check() { t_.check(); }
  void abort(const std::string& why) noexcept { t_.abort(why); }
  TransferStats send(std::span<const TensorMeta> metas, AnyTensorRange& items,
                     const TransferOptions& opt) {
    return t_.send(metas, items, opt);
  }
  TransferStats receive(std::span<const TensorMeta> metas, const TransferOptions& opt,
                        const AnyLoadWeights& load) {
    return t_.receive(metas, opt, typed(load));
  }
  TransferStats send_shards(std::span<const TensorMeta> metas, std::span<const ShardSpec> specs,
                            int trainers, AnyTensorRange& items, const TransferOptions& opt) {
    return weightsync::send_shards(t_, metas, specs, trainers, items, opt);
  }
  TransferStats receive_shards(std::span<const TensorMeta> metas, std::span<const ShardSpec> specs,
                               int trainers, const TransferOptions& opt,
                               const AnyLoadWeights& load) {
    return weightsync::receive_shards(t_, metas, specs, trainers, opt, typed(load));
  }
  IpcTransport& transport() noexcept { return t_; }

 private:
  static IpcTransport::LoadFn typed(const AnyLoadWeights& load) {
    return
        [&load](std::span<const TensorView> v, cudaStream_t s) { load(v, static_cast<void*>(s)); };
  }
  IpcTransport t_;
};
static_assert(Transport<IpcEnd>);

namespace detail {
inline std::unique_ptr<Backend> make_ipc_end_backend(IpcOptions io) {
  const char* name = io.same_gpu ? "ipc" : "p2p";
  return make_transport_backend(
      name, [io, name](const NcclInitInfo& info, int rank, const EngineOptions& o) {
        if (o.protocol != Protocol::weightsync)
          throw config_error("protocol", std::string(name) +
                                             " backend: only Protocol::weightsync (vLLM's wire "
                                             "is NCCL)");
        auto rv = rendezvous_options(info, rank, o, name);  // the init info first, then the GPU
        require_cuda_device(name, o.device);  // at once, not after a rendezvous timeout
        return IpcEnd(rv, o.device, io, o.timeout);
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
}  // namespace weightsync
#endif  // WEIGHTSYNC_HAS_CUDA
