// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The engines' view of a transport: Backend (init, send, receive, health), the options every
//! backend takes, the type-erased load/destination/source types that let a backend be chosen by
//! name at run time, and the worker-rank rule of vLLM. Knows nothing of vLLM's JSON: a backend
//! joins the group a GroupInfo (engine/group_info.hpp) describes.

#include <chrono>
#include <cstddef>
#include <functional>
#include <iterator>
#include <span>
#include <stop_token>
#include <string>
#include <type_traits>
#include <utility>

#include "weightsync/concepts.hpp"
#include "weightsync/detail/format.hpp"
#include "weightsync/engine/group_info.hpp"
#include "weightsync/error.hpp"
#include "weightsync/host/rendezvous.hpp"
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
//! An AnyLoadWeights as a transport with streams of type `Stream` calls it (what
//! TransportBackend hands Transport::receive): a pointer stream (cudaStream_t) is passed on as
//! void*, any other (the host's) as nullptr. The one place that types an AnyLoadWeights; it
//! refers to `load`, which must outlive it.
template <class Stream>
class LoadOn {
 public:
  explicit LoadOn(const AnyLoadWeights& load) : load_(&load) {}
  void operator()(std::span<const TensorView> v, Stream s) const {
    if constexpr (std::is_pointer_v<Stream>) {
      (*load_)(v, static_cast<void*>(s));
    } else {
      (void)s;
      (*load_)(v, nullptr);
    }
  }

 private:
  const AnyLoadWeights* load_;
};

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
  //! A stop requested here ends init's wait for the other ranks early, with a state_error,
  //! instead of at `timeout`: rank 0's wait in the TCP rendezvous (the "host" and "ipc"
  //! backends, "nccl" with master_address) within about 50 ms, and NCCL's own init (the
  //! unique-id mode) at once. For a caller that learns meanwhile that a peer will never join
  //! (http::join_servers stops it when a server's init call fails). Other waits (the other
  //! ranks' in the TCP rendezvous, a TCPStore's) still end at `timeout`.
  std::stop_token stop;
};

//! A transport the engines drive, chosen by name from the BackendRegistry (engine/registry.hpp).
//! The built-ins are TransportBackend<T> (engine/transport.hpp) over a Transport T:
//! CollectiveTransport<HostCommunicator> ("host", host/backend.hpp),
//! CollectiveTransport<NcclCommunicator> ("nccl", nccl/backend.hpp) and IpcTransport ("ipc", "p2p",
//! cuda/ipc/backend.hpp). A new transport models Transport and uses make_transport_backend rather
//! than deriving from Backend; a class that derives from it overrides every pure virtual below.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  //! Joins the group described by `info` as `rank` (0..info.world_size-1). Blocks until every
  //! rank has joined. The engines convert vLLM's NcclInitInfo with NcclInitInfo::group_info().
  virtual void init(const GroupInfo& info, int rank, const EngineOptions& o) = 0;
  virtual bool initialized() const noexcept = 0;
  //! False once the communicator failed or was aborted (a new init is needed).
  virtual bool healthy() const noexcept = 0;
  virtual int rank() const noexcept = 0;
  virtual int world_size() const noexcept = 0;
  //! Throws if a peer is known to be gone or the communicator failed. Non-blocking; never called
  //! during a transfer.
  virtual void check() = 0;
  //! The first peer that left the group cleanly (a goodbye on the control channel: it shut down,
  //! and no transfer can complete any more), -1 when none or not known. Non-blocking.
  virtual int departed_peer() noexcept { return -1; }
  //! Offers `items`: from rank 0, one per entry of `metas`, in order (`shards` nullptr); or, with
  //! a ShardLayout, from each trainer rank 0..trainers-1, one per piece it holds, in declared
  //! order (see sharded_broadcast.hpp). A backend whose transport has no sharded transfers throws
  //! config_error("backend") for a layout.
  virtual TransferStats send(std::span<const TensorMeta> metas, AnyTensorRange& items,
                             TransferOptions opt, const ShardLayout* shards) = 0;
  //! Receives what send offers: views are handed to `load`, destinations filled in place.
  virtual TransferStats receive(std::span<const TensorMeta> metas, TransferOptions opt,
                                const AnyLoadWeights& load, const ShardLayout* shards) = 0;
  virtual void shutdown() noexcept = 0;

  //! A whole-tensor transfer from rank 0.
  TransferStats send(std::span<const TensorMeta> metas, AnyTensorRange& items,
                     TransferOptions opt) {
    return send(metas, items, std::move(opt), nullptr);
  }
  TransferStats receive(std::span<const TensorMeta> metas, TransferOptions opt,
                        const AnyLoadWeights& load) {
    return receive(metas, std::move(opt), load, nullptr);
  }
  //! Deprecated, kept for one release: send(metas, items, opt, &layout).
  [[deprecated("use send(metas, items, opt, &layout) with a ShardLayout")]] TransferStats
  send_sharded(std::span<const TensorMeta> metas, std::span<const ShardSpec> specs, int trainers,
               AnyTensorRange& items, TransferOptions opt) {
    const ShardLayout layout{specs, trainers};
    return send(metas, items, std::move(opt), &layout);
  }
  //! Deprecated, kept for one release: receive(metas, opt, load, &layout).
  [[deprecated("use receive(metas, opt, load, &layout) with a ShardLayout")]] TransferStats
  receive_sharded(std::span<const TensorMeta> metas, std::span<const ShardSpec> specs,
                  int trainers, TransferOptions opt, const AnyLoadWeights& load) {
    const ShardLayout layout{specs, trainers};
    return receive(metas, std::move(opt), load, &layout);
  }
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

//! The TCP rendezvous of `info` for `backend` at `rank`.
//! @throws config_error("master_address") when `info` has none (a unique id instead).
inline RendezvousOptions rendezvous_options(const GroupInfo& info, int rank,
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
  r.stop = o.stop;
  return r;
}
}  // namespace detail

}  // namespace weightsync
