// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The engines' view of a transport: Backend (init, send, receive, health), the options every
//! backend takes, the type-erased load/destination/source types that let a backend be chosen by
//! name at run time, and the worker-rank rule of vLLM.

#include <chrono>
#include <cstddef>
#include <functional>
#include <iterator>
#include <span>
#include <string>
#include <utility>

#include "weightsync/concepts.hpp"
#include "weightsync/detail/format.hpp"
#include "weightsync/error.hpp"
#include "weightsync/host/rendezvous.hpp"
#include "weightsync/info.hpp"
#include "weightsync/shard.hpp"
#include "weightsync/tensor_meta.hpp"
#include "weightsync/transfer_options.hpp"

namespace weightsync {

//! How an inference engine is laid out; picks this worker's rank in the transfer group.
struct ParallelConfig {
  int tensor_parallel_size = 1;
  int pipeline_parallel_size = 1;
  int data_parallel_size = 1;
  int data_parallel_index = 0;  //!< this worker's DP replica
  int local_rank = 0;           //!< this worker's rank within its replica (0..TP*PP-1)

  void validate() const {
    auto positive = [](int v, const char* f) {
      if (v < 1) throw config_error(f, detail::cat("must be >= 1, got ", v));
    };
    positive(tensor_parallel_size, "tensor_parallel_size");
    positive(pipeline_parallel_size, "pipeline_parallel_size");
    positive(data_parallel_size, "data_parallel_size");
    if (data_parallel_index < 0 || data_parallel_index >= data_parallel_size)
      throw config_error(
          "data_parallel_index",
          detail::cat("must be in 0..", data_parallel_size - 1, ", got ", data_parallel_index));
    const int replica = tensor_parallel_size * pipeline_parallel_size;
    if (local_rank < 0 || local_rank >= replica)
      throw config_error("local_rank",
                         detail::cat("must be in 0..", replica - 1, ", got ", local_rank));
  }
  //! Workers of the whole engine: TP * PP * DP.
  int workers() const { return tensor_parallel_size * pipeline_parallel_size * data_parallel_size; }
};

//! vLLM's rule: rank = dp_index * (TP * PP) + local_rank + rank_offset.
inline int worker_rank(const ParallelConfig& p, int rank_offset) {
  p.validate();
  if (rank_offset < 0)
    throw config_error("rank_offset", detail::cat("must be >= 0, got ", rank_offset));
  return p.data_parallel_index * (p.tensor_parallel_size * p.pipeline_parallel_size) +
         p.local_rank + rank_offset;
}

//! load_weights, type-erased for backends chosen at run time: the stream is a cudaStream_t on the
//! GPU backends and nullptr on the host backend.
using AnyLoadWeights = std::function<void(std::span<const TensorView>, void* stream)>;
//! Where a tensor should land (nullptr: hand me a view). See TransferOptions::destination.
using AnyDestination = std::function<void*(const TensorMeta&)>;

//! A single-pass range over a generator of SourceTensorRef; models TensorIterator. Lets a backend
//! chosen at run time iterate a trainer's tensors without knowing their type.
//!
//! Lazy: the generator is asked for the next tensor only when the iterator is dereferenced or
//! compared with the end, never by ++. A source that materializes each tensor (a gather in the
//! trainer's own group, a staging copy) is therefore asked for tensor i only when the pipeline
//! takes tensor i: the first chunk is taken before the handshake, the others after it.
class AnyTensorRange {
 public:
  //! Fills the argument and returns true, or returns false at the end.
  using Next = std::function<bool(SourceTensorRef&)>;
  explicit AnyTensorRange(Next next) : next_(std::move(next)) {}

  class iterator {
   public:
    using value_type = SourceTensorRef;
    using difference_type = std::ptrdiff_t;
    iterator() = default;
    explicit iterator(AnyTensorRange* r) : r_(r), pending_(true) {}
    const SourceTensorRef& operator*() const {
      fetch();
      return cur_;
    }
    iterator& operator++() {
      fetch();  // the current one is consumed, even when it was never looked at
      pending_ = r_ != nullptr;
      return *this;
    }
    void operator++(int) { ++*this; }
    friend bool operator==(const iterator& it, std::default_sentinel_t) {
      it.fetch();
      return it.r_ == nullptr;
    }

   private:
    void fetch() const {
      if (!pending_) return;
      pending_ = false;
      if (r_ && !r_->next_(cur_)) r_ = nullptr;
    }
    mutable AnyTensorRange* r_ = nullptr;
    mutable bool pending_ = false;
    mutable SourceTensorRef cur_{};
  };
  iterator begin() { return iterator(this); }
  std::default_sentinel_t end() { return {}; }

 private:
  Next next_;
};
static_assert(TensorIterator<AnyTensorRange&>);

//! Settings of an engine's backend.
struct EngineOptions {
  std::string backend = "host";
  int device = -1;  //!< CUDA device for GPU backends (-1: the current device)
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};  //!< init and every wait
  std::string token;  //!< shared rendezvous token (empty: none)
  Protocol protocol = Protocol::weightsync;
  std::size_t direct_threshold_bytes = 0;  //!< see TransferOptions
  //! When outcomes are exchanged (see Acknowledge); the trainer and every worker must agree.
  Acknowledge acknowledge = Acknowledge::next_transfer;
  //! Per-chunk checksums (see TransferOptions::checksum); the trainer and every worker must agree.
  bool checksum = false;
  //! Blocking NCCL launches under the launch watchdog (see NcclOptions::blocking); Protocol::vllm
  //! always uses non-blocking ones (vLLM's workers do not take part in the split it needs).
  bool nccl_blocking = true;
  //! Optional progress callback of every transfer this engine runs (send_weights,
  //! update_weights): bytes done / total, chunk / chunks, elapsed time and rate; see
  //! TransferProgress for when it is called. A shell's progress line:
  //!
  //! @snippet tests/unit/progress_test.cpp progress line
  ProgressFn progress;
};

//! A transport the engines drive. Implementations: CommBackend<HostCommunicator> ("host"),
//! CommBackend<NcclCommunicator> ("nccl"), IpcBackend ("ipc", "p2p").
class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  //! Joins the group described by `info` as `rank`. Blocks until every rank has joined.
  virtual void init(const NcclInitInfo& info, int rank, const EngineOptions& o) = 0;
  virtual bool initialized() const noexcept = 0;
  //! False once the communicator failed or was aborted (a new init is needed).
  virtual bool healthy() const noexcept = 0;
  virtual int rank() const noexcept = 0;
  virtual int world_size() const noexcept = 0;
  //! Throws if a peer is known to be gone or the communicator failed. Non-blocking; never called
  //! during a transfer.
  virtual void check() = 0;
  virtual TransferStats receive(std::span<const TensorMeta> metas, TransferOptions opt,
                                const AnyLoadWeights& load) = 0;
  virtual TransferStats send(std::span<const TensorMeta> metas, AnyTensorRange& items,
                             TransferOptions opt) = 0;
  //! Sharded transfers (see sharded_broadcast.hpp): ranks 0..trainers-1 are the trainer ranks,
  //! each sending the pieces `specs` give it (`items`: one per piece it holds, in declared
  //! order); the other ranks receive. A backend without them throws config_error("backend").
  virtual TransferStats receive_sharded(std::span<const TensorMeta> metas,
                                        std::span<const ShardSpec> specs, int trainers,
                                        TransferOptions opt, const AnyLoadWeights& load) {
    (void)metas, (void)specs, (void)trainers, (void)opt, (void)load;
    throw config_error("backend", name() + " backend: sharded transfers are not implemented");
  }
  virtual TransferStats send_sharded(std::span<const TensorMeta> metas,
                                     std::span<const ShardSpec> specs, int trainers,
                                     AnyTensorRange& items, TransferOptions opt) {
    (void)metas, (void)specs, (void)trainers, (void)items, (void)opt;
    throw config_error("backend", name() + " backend: sharded transfers are not implemented");
  }
  virtual void shutdown() noexcept = 0;
};

namespace detail {
//! Runs a backend's transfer `call` with `t.progress` watched: a backend that does not report
//! (the IPC ones) still gives the callback its last call, with the totals, when it returns.
template <class F>
TransferStats with_progress(TransferOptions& t, F&& call) {
  if (!t.progress) return call();
  ProgressFn user = std::move(t.progress);
  bool ended = false;
  t.progress = [&](const TransferProgress& p) {
    if (p.done()) ended = true;
    user(p);
  };
  const auto t0 = std::chrono::steady_clock::now();
  TransferStats st = call();
  if (!ended) {
    TransferProgress p;
    p.bytes_done = p.bytes_total = st.bytes;
    p.chunk = p.chunks = st.chunks;
    p.elapsed =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0);
    user(p);
  }
  return st;
}

inline RendezvousOptions rendezvous_options(const NcclInitInfo& info, int rank,
                                            const EngineOptions& o, const char* backend) {
  if (!info.master_address || !info.master_port)
    throw config_error("master_address",
                       cat("the ", backend, " backend needs master_address and master_port"));
  RendezvousOptions r;
  r.address = *info.master_address;
  r.port = *info.master_port;
  r.rank = rank;
  r.world_size = info.world_size;
  r.token = o.token;
  r.timeout = o.timeout;
  return r;
}
}  // namespace detail

}  // namespace weightsync
