// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The engines: WeightTransferEngine on the inference side (vLLM's worker API: init, start, update,
//! finish with a version, shutdown) and TrainerEngine on the training side (trainer_init,
//! send_weights), over backends chosen by name from a registry ("host", "nccl", "ipc", "p2p").
//!
//! Session state machine of the receiver:
//!   uninitialized --init--> ready --start--> updating --update*--> updating --finish--> ready
//! Starting twice, updating or finishing without a start, and anything before init are
//! state_error. An update that fails ends the session (back to ready, version unchanged) so the
//! next start works; if the failure broke the communicator, the next start says so and a new
//! init_transfer_engine() is needed.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "weightsync/concepts.hpp"
#include "weightsync/detail/format.hpp"
#include "weightsync/error.hpp"
#include "weightsync/host/communicator.hpp"
#include "weightsync/info.hpp"
#include "weightsync/log.hpp"
#include "weightsync/packed_broadcast.hpp"
#include "weightsync/tensor_meta.hpp"
#if WEIGHTSYNC_HAS_CUDA
#include "weightsync/cuda/ipc.hpp"
#endif
#if WEIGHTSYNC_HAS_NCCL
#include "weightsync/nccl/communicator.hpp"
#endif

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
      throw config_error("data_parallel_index", detail::cat("must be in 0..", data_parallel_size - 1,
                                                            ", got ", data_parallel_index));
    const int replica = tensor_parallel_size * pipeline_parallel_size;
    if (local_rank < 0 || local_rank >= replica)
      throw config_error("local_rank", detail::cat("must be in 0..", replica - 1, ", got ", local_rank));
  }
  //! Workers of the whole engine: TP * PP * DP.
  int workers() const { return tensor_parallel_size * pipeline_parallel_size * data_parallel_size; }
};

//! vLLM's rule: rank = dp_index * (TP * PP) + local_rank + rank_offset.
inline int worker_rank(const ParallelConfig& p, int rank_offset) {
  p.validate();
  if (rank_offset < 0) throw config_error("rank_offset", detail::cat("must be >= 0, got ", rank_offset));
  return p.data_parallel_index * (p.tensor_parallel_size * p.pipeline_parallel_size) + p.local_rank +
         rank_offset;
}

//! load_weights, type-erased for backends chosen at run time: the stream is a cudaStream_t on the
//! GPU backends and nullptr on the host backend.
using AnyLoadWeights = std::function<void(std::span<const TensorView>, void* stream)>;
//! Where a tensor should land (nullptr: hand me a view). See TransferOptions::destination.
using AnyDestination = std::function<void*(const TensorMeta&)>;

//! A single-pass range over a generator of SourceTensorRef; models TensorIterator. Lets a backend
//! chosen at run time iterate a trainer's tensors without knowing their type.
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
    explicit iterator(AnyTensorRange* r) : r_(r) { advance(); }
    const SourceTensorRef& operator*() const { return cur_; }
    iterator& operator++() {
      advance();
      return *this;
    }
    void operator++(int) { advance(); }
    friend bool operator==(const iterator& it, std::default_sentinel_t) { return it.r_ == nullptr; }

   private:
    void advance() {
      if (r_ && !r_->next_(cur_)) r_ = nullptr;
    }
    AnyTensorRange* r_ = nullptr;
    SourceTensorRef cur_{};
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
  bool nccl_blocking = false;              //!< see NcclOptions::blocking
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
  virtual void shutdown() noexcept = 0;
};

namespace detail {
inline RendezvousOptions rendezvous_options(const NcclInitInfo& info, int rank,
                                            const EngineOptions& o, const char* backend) {
  if (!info.master_address || !info.master_port)
    throw config_error("master_address", cat("the ", backend,
                                             " backend needs master_address and master_port"));
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

//! A Backend over any communicator whose Make functor creates it from the init info.
template <class Comm, class Make>
class CommBackend final : public Backend {
 public:
  CommBackend(std::string name, Make make) : name_(std::move(name)), make_(std::move(make)) {}
  std::string name() const override { return name_; }
  void init(const NcclInitInfo& info, int rank, const EngineOptions& o) override {
    info.validate();
    if (rank < 0 || rank >= info.world_size)
      throw config_error("rank_offset", detail::cat("this worker's rank ", rank,
                                                    " is outside the world of ", info.world_size));
    shutdown();
    comm_.emplace(make_(info, rank, o));
    ws_.emplace(detail::make_policy<detail::policy_t<Comm>>(*comm_));
  }
  bool initialized() const noexcept override { return comm_.has_value(); }
  bool healthy() const noexcept override {
    if (!comm_) return false;
    if constexpr (requires { comm_->healthy(); })
      return comm_->healthy();
    else
      return !comm_->aborted();
  }
  int rank() const noexcept override { return comm_ ? comm_->rank() : -1; }
  int world_size() const noexcept override { return comm_ ? comm_->size() : 0; }
  void check() override {
    if (!comm_) return;
    if constexpr (MonitoredCommunicator<Comm>) {
      try {
        comm_->check();
      } catch (const std::exception& e) {
        comm_->abort(e.what());
        throw;
      }
    }
  }
  TransferStats receive(std::span<const TensorMeta> metas, TransferOptions opt,
                        const AnyLoadWeights& load) override {
    ready();
    return packed_broadcast_consumer(
        metas, *comm_, 0,
        [&](std::span<const TensorView> v, typename Comm::stream_type s) { load(v, to_void(s)); },
        opt, *ws_);
  }
  TransferStats send(std::span<const TensorMeta> metas, AnyTensorRange& items,
                     TransferOptions opt) override {
    ready();
    return packed_broadcast_producer(metas, items, *comm_, 0, opt, *ws_);
  }
  void shutdown() noexcept override {
    ws_.reset();
    comm_.reset();
  }
  Comm& communicator() { return *comm_; }

 private:
  static void* to_void(typename Comm::stream_type s) {
    if constexpr (std::is_pointer_v<typename Comm::stream_type>)
      return static_cast<void*>(s);
    else
      return nullptr;
  }
  void ready() const {
    if (!comm_) throw state_error(name_ + " backend: not initialized");
    if (!healthy())
      throw state_error(name_ + " backend: the communicator failed or was aborted by an earlier "
                        "error; call init_transfer_engine again");
  }
  std::string name_;
  Make make_;
  std::optional<Comm> comm_;
  std::optional<workspace_for<Comm>> ws_;
};

template <class Comm, class Make>
std::unique_ptr<Backend> make_comm_backend(std::string name, Make make) {
  return std::make_unique<CommBackend<Comm, Make>>(std::move(name), std::move(make));
}

//! The host backend: TCP, host memory, no GPU.
inline std::unique_ptr<Backend> make_host_backend() {
  return make_comm_backend<HostCommunicator>(
      "host", [](const NcclInitInfo& info, int rank, const EngineOptions& o) {
        return HostCommunicator::connect(detail::rendezvous_options(info, rank, o, "host"),
                                         o.timeout);
      });
}

#if WEIGHTSYNC_HAS_CUDA
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
      throw config_error("protocol", name() + " backend: only Protocol::weightsync (vLLM's wire is NCCL)");
    shutdown();
    t_.emplace(detail::rendezvous_options(info, rank, o, opt_.same_gpu ? "ipc" : "p2p"), o.device, opt_,
               o.timeout);
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
  void shutdown() noexcept override { t_.reset(); }
  IpcTransport& transport() { return *t_; }

 private:
  void ready() const {
    if (!t_) throw state_error(name() + " backend: not initialized");
    if (!t_->healthy())
      throw state_error(name() + " backend: the transport failed or was aborted by an earlier "
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
#endif

//! Backends by name. The built-ins ("host"; "nccl" when NCCL is available; "ipc" and "p2p" with
//! CUDA) are registered on first use; applications may add their own.
class BackendRegistry {
 public:
  using Factory = std::function<std::unique_ptr<Backend>()>;

  static BackendRegistry& global();

  //! @throws config_error when `name` is taken (naming the known ones).
  void add(const std::string& name, Factory f) {
    std::lock_guard lock(mutex_);
    if (name.empty()) throw config_error("backend", "a backend needs a name");
    if (factories_.count(name))
      throw config_error("backend", "a backend named '" + name + "' is already registered (known: " +
                                        known_locked() + ")");
    factories_[name] = std::move(f);
  }
  //! @throws config_error for an unknown name, listing the known ones.
  std::unique_ptr<Backend> make(const std::string& name) const {
    std::lock_guard lock(mutex_);
    auto it = factories_.find(name);
    if (it == factories_.end())
      throw config_error("backend", "unknown backend '" + name + "' (known: " + known_locked() + ")");
    return it->second();
  }
  std::vector<std::string> names() const {
    std::lock_guard lock(mutex_);
    std::vector<std::string> v;
    for (const auto& [k, f] : factories_) v.push_back(k);
    return v;
  }

 private:
  std::string known_locked() const {
    std::string s;
    for (const auto& [k, f] : factories_) s += (s.empty() ? "" : ", ") + k;
    return s;
  }
  mutable std::mutex mutex_;
  std::map<std::string, Factory> factories_;
};

#if WEIGHTSYNC_HAS_NCCL
//! The NCCL backend: TCP rendezvous (master_address/master_port) or a shared unique id
//! (nccl_unique_id_b64), one GPU per rank (EngineOptions::device).
inline std::unique_ptr<Backend> make_nccl_backend() {
  return make_comm_backend<NcclCommunicator>(
      "nccl", [](const NcclInitInfo& info, int rank, const EngineOptions& o) {
        NcclOptions n;
        n.device = o.device;
        n.timeout = o.timeout;
        n.blocking = o.nccl_blocking;
        if (info.uses_unique_id())
          return NcclCommunicator::init(NcclUniqueId::from_base64(*info.nccl_unique_id_b64), rank,
                                        info.world_size, n);
        return NcclCommunicator::connect(detail::rendezvous_options(info, rank, o, "nccl"), n);
      });
}
#endif

#if WEIGHTSYNC_HAS_NCCL
//! The init info a trainer hands a vLLM server (POST /init_weight_transfer_engine): a fresh
//! ncclUniqueId in standard base64, so the server's workers and this trainer all enter
//! ncclCommInitRank together. Pair with EngineOptions{.backend = "nccl", .protocol =
//! Protocol::vllm} on the trainer.
inline NcclInitInfo vllm_init_info(int world_size, int rank_offset = 1, bool packed = true,
                                   std::int64_t buffer_size_bytes = kDefaultPackedBufferSizeBytes,
                                   int num_buffers = kDefaultPackedNumBuffers) {
  NcclInitInfo i;
  i.nccl_unique_id_b64 = NcclUniqueId::generate().to_base64();
  i.world_size = world_size;
  i.rank_offset = rank_offset;
  i.packed = packed;
  i.packed_buffer_size_bytes = buffer_size_bytes;
  i.packed_num_buffers = num_buffers;
  i.validate();
  return i;
}
#endif

inline BackendRegistry& BackendRegistry::global() {
  static BackendRegistry* r = [] {
    auto* reg = new BackendRegistry;  // never destroyed: usable from static destructors too
    reg->add("host", make_host_backend);
#if WEIGHTSYNC_HAS_CUDA
    reg->add("ipc", [] { return make_ipc_backend(); });
    reg->add("p2p", [] { return make_p2p_backend(); });
#endif
#if WEIGHTSYNC_HAS_NCCL
    reg->add("nccl", make_nccl_backend);
#endif
    return reg;
  }();
  return *r;
}

//! How a server reacts to a pause: vLLM's modes.
enum class PauseMode { abort, wait, keep };

inline PauseMode parse_pause_mode(const std::string& s) {
  if (s == "abort") return PauseMode::abort;
  if (s == "wait") return PauseMode::wait;
  if (s == "keep") return PauseMode::keep;
  throw config_error("mode", "must be abort, wait or keep, got '" + s + "'");
}
inline const char* pause_mode_name(PauseMode m) {
  return m == PauseMode::abort ? "abort" : m == PauseMode::wait ? "wait" : "keep";
}

//! The inference side of weight syncing (one per worker process).
class WeightTransferEngine {
 public:
  struct Options {
    EngineOptions engine;
    ParallelConfig parallel;
    //! Between transfers, a watchdog checks this often that the trainer is still there (0: off).
    //! When it is gone, the engine logs it, ends a started session, and calls Hooks::failure.
    std::chrono::milliseconds liveness_interval{500};
  };
  //! Callbacks of the embedding server.
  struct Hooks {
    std::function<void(PauseMode)> pause;  //!< stop (abort), drain (wait) or hold (keep) requests
    std::function<void()> resume;
    //! The group failed between transfers (the trainer died, say); the argument says why.
    std::function<void(const std::string&)> failure;
  };

  WeightTransferEngine() : WeightTransferEngine(Options()) {}
  explicit WeightTransferEngine(Options o) : opt_(std::move(o)) { opt_.parallel.validate(); }
  WeightTransferEngine(const WeightTransferEngine&) = delete;
  WeightTransferEngine& operator=(const WeightTransferEngine&) = delete;
  ~WeightTransferEngine() {
    shutdown();
    stop_watchdog();
  }

  void set_hooks(Hooks h) {
    std::lock_guard lock(mutex_);
    hooks_ = std::move(h);
  }

  //! Joins the trainer's group (blocks until every rank has joined). Allowed again after a failure
  //! or shutdown, and between sessions; not during one.
  void init_transfer_engine(const NcclInitInfo& info) {
    std::unique_lock lock(mutex_);
    if (busy_) throw state_error("init_transfer_engine while update_weights is running");
    if (state_ == State::updating) {
      // A session whose trainer went away before sending: a new trainer takes over.
      log(LogLevel::warning, "init_transfer_engine abandons a started weight update");
      state_ = State::ready;
    }
    info.validate();
    const int rank = worker_rank(opt_.parallel, info.rank_offset);
    if (rank >= info.world_size)
      throw config_error("world_size", detail::cat("this worker's rank ", rank, " (dp_index ",
                                                   opt_.parallel.data_parallel_index, ", local_rank ",
                                                   opt_.parallel.local_rank, ", rank_offset ",
                                                   info.rank_offset, ") needs world_size > ", rank,
                                                   ", got ", info.world_size));
    if (rank == 0) throw config_error("rank_offset", "rank 0 is the trainer's; workers need rank_offset >= 1");
    if (backend_) backend_->shutdown();
    backend_.reset();
    state_ = State::uninitialized;
    std::shared_ptr<Backend> b = BackendRegistry::global().make(opt_.engine.backend);
    b->init(info, rank, opt_.engine);
    backend_ = std::move(b);
    init_ = info;
    state_ = State::ready;
    if (opt_.liveness_interval.count() > 0 && !watchdog_.joinable())
      watchdog_ = std::thread([this] { watch(); });
  }
  void init_transfer_engine(const nlohmann::json& init_info) {
    init_transfer_engine(init_info.get<NcclInitInfo>());
  }

  void start_weight_update() {
    std::lock_guard lock(mutex_);
    if (state_ == State::uninitialized)
      throw state_error("start_weight_update before init_transfer_engine");
    if (state_ == State::updating)
      throw state_error("start_weight_update while an update is already started");
    if (!backend_->healthy())
      throw state_error("the transfer group failed in an earlier update; call init_transfer_engine "
                        "again");
    state_ = State::updating;
    updates_in_session_ = 0;
  }

  //! Receives one update (blocks until it has landed). `load` gets every tensor without a
  //! destination; `destination` (optional) places tensors directly.
  //! @throws state_error outside a session; config_error for a bad update info; whatever the
  //!   transfer throws, after which the session is over (version unchanged).
  TransferStats update_weights(const NcclUpdateInfo& info, const AnyLoadWeights& load,
                               const AnyDestination& destination = {}) {
    std::shared_ptr<Backend> backend;
    TransferOptions t;
    std::vector<TensorMeta> metas;
    {
      // The lock guards the state only; the transfer runs without it, so that status queries
      // (weight_version, is_paused) answer during an update.
      std::lock_guard lock(mutex_);
      if (state_ == State::uninitialized)
        throw state_error("update_weights before init_transfer_engine");
      if (state_ != State::updating) throw state_error("update_weights without start_weight_update");
      if (busy_) throw state_error("update_weights while another update_weights is running");
      metas = info.metas();
      t = transfer_options(init_, info, opt_.engine);
      t.destination = destination;
      backend = backend_;
      busy_ = true;
    }
    try {
      auto st = backend->receive(metas, t, load);
      std::lock_guard lock(mutex_);
      busy_ = false;
      ++updates_in_session_;
      return st;
    } catch (...) {
      std::lock_guard lock(mutex_);
      busy_ = false;
      state_ = State::ready;  // the session is over; the next start begins a new one
      throw;
    }
  }
  TransferStats update_weights(const nlohmann::json& update_info, const AnyLoadWeights& load,
                               const AnyDestination& destination = {}) {
    return update_weights(update_info.get<NcclUpdateInfo>(), load, destination);
  }
  //! vLLM's other name for update_weights.
  TransferStats receive_weights(const NcclUpdateInfo& info, const AnyLoadWeights& load,
                                const AnyDestination& destination = {}) {
    return update_weights(info, load, destination);
  }

  //! Ends the session; the version changes only here, and only when given.
  void finish_weight_update(std::optional<std::string> version = std::nullopt) {
    std::lock_guard lock(mutex_);
    if (state_ != State::updating) throw state_error("finish_weight_update without start_weight_update");
    if (busy_) throw state_error("finish_weight_update while update_weights is running");
    if (version) version_ = *version;
    state_ = State::ready;
  }

  std::string weight_version() const {
    std::lock_guard lock(mutex_);
    return version_;
  }
  bool initialized() const {
    std::lock_guard lock(mutex_);
    return state_ != State::uninitialized;
  }
  bool updating() const {
    std::lock_guard lock(mutex_);
    return state_ == State::updating;
  }
  int world_size() const {
    std::lock_guard lock(mutex_);
    return backend_ ? backend_->world_size() : 0;
  }
  int rank() const {
    std::lock_guard lock(mutex_);
    return backend_ ? backend_->rank() : -1;
  }

  void pause(PauseMode m) {
    std::function<void(PauseMode)> f;
    {
      std::lock_guard lock(mutex_);
      paused_ = true;
      f = hooks_.pause;
    }
    if (f) f(m);
  }
  void resume() {
    std::function<void()> f;
    {
      std::lock_guard lock(mutex_);
      paused_ = false;
      f = hooks_.resume;
    }
    if (f) f();
  }
  bool is_paused() const {
    std::lock_guard lock(mutex_);
    return paused_;
  }

  //! Leaves the group. The engine can be initialized again. Not while update_weights runs.
  void shutdown() noexcept {
    std::lock_guard lock(mutex_);
    if (busy_) {
      log(LogLevel::error, "WeightTransferEngine::shutdown during update_weights ignored");
      return;
    }
    if (backend_) backend_->shutdown();
    backend_.reset();
    state_ = State::uninitialized;
  }

  //! The options of one transfer: the init info's packing, overridden by the update's.
  static TransferOptions transfer_options(const NcclInitInfo& init, const NcclUpdateInfo& u,
                                          const EngineOptions& e) {
    TransferOptions t;
    t.packed = u.packed.value_or(init.packed);
    t.buffer_size_bytes =
        static_cast<std::size_t>(u.packed_buffer_size_bytes.value_or(init.packed_buffer_size_bytes));
    t.num_buffers = u.packed_num_buffers.value_or(init.packed_num_buffers);
    t.protocol = e.protocol;
    t.timeout = e.timeout;
    t.direct_threshold_bytes = e.protocol == Protocol::weightsync ? e.direct_threshold_bytes : 0;
    return t;
  }

 private:
  enum class State { uninitialized, ready, updating };

  void watch() {
    std::unique_lock lock(mutex_);
    while (!stop_) {
      cv_.wait_for(lock, opt_.liveness_interval);
      if (stop_ || busy_ || !backend_ || !backend_->healthy()) continue;
      try {
        backend_->check();
      } catch (const std::exception& e) {
        const std::string why = detail::cat("the transfer group failed between updates: ", e.what());
        log(LogLevel::error, why);
        state_ = State::ready;  // a started session is over
        auto f = hooks_.failure;
        lock.unlock();
        if (f) f(why);
        lock.lock();
      }
    }
  }
  void stop_watchdog() noexcept {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    if (watchdog_.joinable()) watchdog_.join();
  }

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::thread watchdog_;
  bool stop_ = false;
  Options opt_;
  Hooks hooks_;
  std::shared_ptr<Backend> backend_;
  NcclInitInfo init_;
  State state_ = State::uninitialized;
  bool busy_ = false;
  std::string version_ = "default";
  int updates_in_session_ = 0;
  bool paused_ = false;
};

//! What a trainer sends each round: the declared metadata, and a fresh iteration over the tensors
//! (each element a SourceTensor). On non-sender ranks the iteration still runs (materializing a
//! full tensor may be a collective of the trainer's own group) and its bytes are ignored.
template <class S>
concept WeightSource = requires(S& s) {
  //! the ordered metadata of this round
  { s.metas() } -> std::convertible_to<std::vector<TensorMeta>>;
  //! a fresh single pass over the tensors, in the declared order
  requires TensorIterator<decltype(s.iterate())>;
};

//! The training side: rank 0 of the trainer's own group sends; the other trainer ranks only
//! iterate.
class TrainerEngine {
 public:
  struct Options {
    EngineOptions engine;
    int trainer_rank = 0;  //!< this process's rank in the trainer's own group; 0 sends
  };

  TrainerEngine() : TrainerEngine(Options()) {}
  explicit TrainerEngine(Options o) : opt_(std::move(o)) {}
  TrainerEngine(const TrainerEngine&) = delete;
  TrainerEngine& operator=(const TrainerEngine&) = delete;
  ~TrainerEngine() { shutdown(); }

  bool is_sender() const { return opt_.trainer_rank == 0; }

  //! Joins the transfer group as its rank 0 (blocks until every worker has joined); non-sender
  //! ranks return at once. Run it while the workers' init_transfer_engine runs.
  void trainer_init(const NcclInitInfo& info) {
    info.validate();
    if (!is_sender()) return;
    auto b = BackendRegistry::global().make(opt_.engine.backend);
    b->init(info, 0, opt_.engine);
    backend_ = std::move(b);
    init_ = info;
  }

  //! One round: the source's metadata, then its iteration, checked tensor by tensor.
  //! `overrides` may change packing for this round (as NcclUpdateInfo's optional fields do).
  template <WeightSource S>
  TransferStats send_weights(S& source, const NcclUpdateInfo& overrides = {}) {
    const std::vector<TensorMeta> metas = source.metas();
    auto&& range = source.iterate();
    if (!is_sender()) {
      for (auto it = std::ranges::begin(range); it != std::ranges::end(range); ++it) (void)*it;
      return {};
    }
    if (!backend_) throw state_error("send_weights before trainer_init");
    auto it = std::ranges::begin(range);
    auto end = std::ranges::end(range);
    AnyTensorRange items([&](SourceTensorRef& out) {
      if (it == end) return false;
      auto&& item = *it;
      out.meta_ = &static_cast<const TensorMeta&>(item.meta());
      out.data_ = item.data();
      ++it;
      return true;
    });
    return backend_->send(metas, items,
                          WeightTransferEngine::transfer_options(init_, overrides, opt_.engine));
  }

  //! The update info a worker needs for `metas` (names, dtype names, shapes), with this trainer's
  //! packing settings.
  NcclUpdateInfo update_info(const std::vector<TensorMeta>& metas) const {
    auto u = NcclUpdateInfo::from_metas(metas);
    u.packed = init_.packed;
    u.packed_buffer_size_bytes = init_.packed_buffer_size_bytes;
    u.packed_num_buffers = init_.packed_num_buffers;
    return u;
  }

  bool healthy() const { return backend_ && backend_->healthy(); }
  void shutdown() noexcept {
    if (backend_) backend_->shutdown();
    backend_.reset();
  }

 private:
  Options opt_;
  std::unique_ptr<Backend> backend_;
  NcclInitInfo init_;
};

}  // namespace weightsync
