// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! WeightTransferEngine, the inference side (vLLM's worker API: init, start, update, finish with a
//! version, shutdown), over a backend chosen by name from the registry.
//!
//! Session state machine of the receiver:
//!   uninitialized --init--> ready --start--> updating --update*--> updating --finish--> ready
//! Starting twice, updating or finishing without a start, and anything before init are
//! state_error. An update that fails ends the session (back to ready, version unchanged) so the
//! next start works; if the failure broke the communicator, the next start says so and a new
//! init_transfer_engine() is needed.
//!
//! The engine takes neutral types (InitRequest, UpdateRequest: engine/init_request.hpp,
//! engine/update_request.hpp) and, through constrained templates, anything an adapter converts to
//! them (engine/adapter.hpp): vLLM's NcclInitInfo, M2NInitInfo, NcclUpdateInfo, M2NUpdateInfo and
//! their JSON once <weightsync/vllm.hpp> is included.

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "weightsync/delta/receive.hpp"
#include "weightsync/detail/format.hpp"
#include "weightsync/engine/adapter.hpp"
#include "weightsync/engine/backend.hpp"
#include "weightsync/engine/init_request.hpp"
#include "weightsync/engine/registry.hpp"
#include "weightsync/engine/shadow.hpp"
#include "weightsync/engine/update_request.hpp"
#include "weightsync/error.hpp"
#include "weightsync/log.hpp"
#include "weightsync/shard.hpp"

namespace weightsync {


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
    //! M, the trainer ranks of the group (ranks 0..M-1), when known at init; 0: not known (an
    //! init that announces a plan says it, InitRequest::trainer_ranks; else each update does,
    //! UpdateRequest::trainer_ranks). init_transfer_engine refuses a worker whose rank would be a
    //! trainer rank (below M), and an init whose trainer ranks differ.
    int trainer_ranks = 0;
    //! Shadow mode (off: syncs write in place). Needs Acknowledge::each_transfer and
    //! Protocol::weightsync, and register_parameters() before the first start; see shadow.hpp.
    ShadowOptions shadow;
  };
  //! Callbacks of the embedding server.
  struct Hooks {
    std::function<void(PauseMode)> pause;  //!< stop (abort), drain (wait) or hold (keep) requests
    std::function<void()> resume;
    //! The group failed between transfers (the trainer died, say); the argument says why.
    std::function<void(const std::string&)> failure;
  };

  WeightTransferEngine() : WeightTransferEngine(Options()) {}
  explicit WeightTransferEngine(Options o) : opt_(std::move(o)) {
    opt_.parallel.validate();
    if (opt_.trainer_ranks < 0)
      throw config_error("trainer_ranks", detail::cat("must be >= 0, got ", opt_.trainer_ranks));
    detail::check_shadow_options(opt_.shadow, opt_.engine);
  }
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
  //! or shutdown, and between sessions; not during one. With a plan (InitRequest::plan, vLLM's
  //! nccl_m2n), keeps it, so that updates may name only their tensors (plan_update).
  //! @throws config_error for a bad init, or a worker rank that is 0, a trainer rank (below
  //!   Options::trainer_ranks or the init's), or outside world_size.
  void init_transfer_engine(const InitRequest& request) { init(request); }
  //! An adapter's init (engine/adapter.hpp): vLLM's NcclInitInfo, M2NInitInfo or their JSON
  //! (either one, as vLLM sends it) with <weightsync/vllm.hpp>.
  template <InitInfo I>
  void init_transfer_engine(const I& info) {
    init(to_init_request(info, InitContext{}));
  }

  //! In shadow mode, first waits (within EngineOptions::timeout) until no snapshot holds the copy
  //! that becomes the shadow, then copies the live version into it (ShadowOptions).
  //! @throws timeout_error("shadow") naming the version still held; the session does not start.
  void start_weight_update() {
    std::unique_lock lock(mutex_);
    if (state_ == State::uninitialized)
      throw state_error("start_weight_update before init_transfer_engine");
    if (state_ == State::updating)
      throw state_error("start_weight_update while an update is already started");
    if (!backend_->healthy())
      throw state_error(
          "the transfer group failed in an earlier update; call init_transfer_engine "
          "again");
    if (const int r = backend_->departed_peer(); r >= 0)
      throw state_error(detail::cat("rank ", r,
                                    " left the transfer group (it shut down); call "
                                    "init_transfer_engine again"));
    if (opt_.shadow.enabled && !shadow_)
      throw state_error("shadow mode: register_parameters before start_weight_update");
    state_ = State::updating;
    updates_in_session_ = 0;
    if (!shadow_) return;
    // Waits for the readers of the next shadow without the lock (status queries answer); busy_
    // keeps updates, finish and shutdown out meanwhile.
    busy_ = true;
    auto shadow = shadow_;
    lock.unlock();
    try {
      shadow->begin(opt_.engine.timeout, opt_.shadow.copy_live_at_start);
    } catch (...) {
      lock.lock();
      busy_ = false;
      state_ = State::ready;
      throw;
    }
    lock.lock();
    busy_ = false;
  }

  //! Receives one update (blocks until it has landed). `load` gets every tensor without a
  //! destination; `destination` (optional) places tensors directly; `gather` (optional, a delta
  //! update's tensors without a destination): the load plan's gather their blobs are applied
  //! through, in place (<weightsync/delta/gather.hpp>). A sharded update (UpdateRequest::sharded)
  //! is received from all M trainer ranks, each piece landing at its place in the full tensor
  //! (see sharded_broadcast.hpp).
  //! @throws state_error outside a session; config_error for a bad update; whatever the
  //!   transfer throws, after which the session is over (version unchanged).
  TransferStats update_weights(const UpdateRequest& info, const AnyLoadWeights& load,
                               const AnyDestination& destination = {},
                               const AnyDeltaGather& gather = {}) {
    std::shared_ptr<Backend> backend;
    TransferOptions t;
    std::vector<TensorMeta> metas;
    std::vector<ShardSpec> specs;
    int trainers = 1;
    bool sharded = false;
    std::shared_ptr<detail::UpdateReceiver> rx;  // a delta or sparse update lands through it
    AnyLoadWeights rx_load;
    {
      // The lock guards the state only; the transfer runs without it, so that status queries
      // (weight_version, is_paused) answer during an update.
      std::lock_guard lock(mutex_);
      if (state_ == State::uninitialized)
        throw state_error("update_weights before init_transfer_engine");
      if (state_ != State::updating)
        throw state_error("update_weights without start_weight_update");
      if (busy_) throw state_error("update_weights while another update_weights is running");
      info.validate();
      metas = info.metas;
      specs = info.shard_specs();
      trainers = info.trainer_ranks.value_or(trainers_ > 0 ? trainers_ : init_->rank_offset);
      sharded = info.sharded;
      t = transfer_options(init_->packing, info.packing, opt_.engine);
      t.destination = destination;
      if (shadow_) detail::shadow_transfer(shadow_, t);
      if (info.delta || info.sparse_counts) {
        rx = delta_receiver(info, t, load, gather);
        metas = rx->metas();
        // (a sharded delta's wire says who sends each piece's blob; else all from rank 0)
        if (sharded) specs = rx->specs();
        else specs.assign(metas.size(), ShardSpec{});
        t.destination = rx->destination();
        rx_load = rx->load();
      }
      backend = backend_;
      busy_ = true;
    }
    try {
      // Sharded when the update says so (UpdateRequest::sharded); the handshake refuses a
      // trainer that disagrees.
      const ShardLayout layout{specs, trainers};
      auto st = detail::with_progress(t, [&] {
        return backend->receive(metas, t, rx ? rx_load : load, sharded ? &layout : nullptr);
      });
      std::lock_guard lock(mutex_);
      busy_ = false;
      ++updates_in_session_;
      return st;
    } catch (...) {
      std::lock_guard lock(mutex_);
      busy_ = false;
      state_ = State::ready;  // the session is over; the next start begins a new one
      // In place, some tensors may have landed: the weights are no longer any named version, so
      // no delta may build on them until a whole update lands (see delta_base()). In shadow mode
      // the live version is untouched (the shadow is discarded).
      if (!shadow_) base_ok_ = false;
      if (shadow_) detail::discard_shadow(*shadow_, backend->rank(), std::current_exception());
      throw;
    }
  }
  //! An adapter's update (engine/adapter.hpp), converted in this engine's context: with
  //! <weightsync/vllm.hpp>, vLLM's NcclUpdateInfo, M2NUpdateInfo (names only, resolved against
  //! the M2N init's plan) or their JSON (M2NUpdateInfo after an M2N init, else NcclUpdateInfo).
  template <UpdateInfo U>
  TransferStats update_weights(const U& info, const AnyLoadWeights& load,
                               const AnyDestination& destination = {},
                               const AnyDeltaGather& gather = {}) {
    return update_weights(parse_update_info(info), load, destination, gather);
  }
  //! Converts an adapter's update the way this engine's init asks (see update_weights).
  //! @throws config_error naming the field; state_error when the conversion needs an init
  //!   (names only) and there was none.
  template <UpdateInfo U>
  UpdateRequest parse_update_info(const U& info) const {
    std::shared_ptr<const InitRequest> init;
    {
      std::lock_guard lock(mutex_);
      init = init_;
    }
    return to_update_request(info, UpdateContext{init.get()});
  }
  //! vLLM's other name for update_weights.
  TransferStats receive_weights(const UpdateRequest& info, const AnyLoadWeights& load,
                                const AnyDestination& destination = {}) {
    return update_weights(info, load, destination);
  }
  template <UpdateInfo U>
  TransferStats receive_weights(const U& info, const AnyLoadWeights& load,
                                const AnyDestination& destination = {}) {
    return update_weights(info, load, destination);
  }

  //! Ends the session; the version changes only here, and only when given. In shadow mode it
  //! publishes the shadow (when an update landed in this session) as the live version, at once
  //! for every later acquire().
  void finish_weight_update(std::optional<std::string> version = std::nullopt) {
    std::lock_guard lock(mutex_);
    if (state_ != State::updating)
      throw state_error("finish_weight_update without start_weight_update");
    if (busy_) throw state_error("finish_weight_update while update_weights is running");
    if (version) version_ = *version;
    // The weights are version_ again, unless an update landed and no version names it.
    if (updates_in_session_ > 0) base_ok_ = version.has_value();
    if (shadow_ && updates_in_session_ > 0)
      shadow_->publish(version_);
    else if (shadow_ && version)
      shadow_->relabel(version_);
    state_ = State::ready;
  }

  //! Shadow mode: the server's parameters (name, dtype, shape, live memory, optionally a second
  //! copy); the library allocates the missing second copies and logs the memory cost. Between
  //! sessions only; registering again replaces the table (snapshots of the old one stay valid).
  //! @throws config_error("shadow.enabled") when shadow mode is off; config_error naming a bad
  //!   parameter.
  void register_parameters(std::vector<ShadowParameter> params) {
    if (!opt_.shadow.enabled)
      throw config_error("shadow.enabled",
                         "register_parameters needs shadow mode (Options::shadow)");
    std::lock_guard lock(mutex_);
    if (state_ == State::updating || busy_)
      throw state_error("register_parameters during a weight update");
    auto w = std::make_shared<ShadowWeights>(std::move(params), opt_.shadow.memory, version_);
    detail::log_shadow_cost(*w, backend_ ? backend_->rank() : -1);
    std::lock_guard shadow_lock(shadow_mutex_);
    shadow_ = std::move(w);
  }
  //! Shadow mode: the live version for one forward pass (never waits on a sync).
  //! @throws state_error before register_parameters.
  std::shared_ptr<const Snapshot> acquire() const {
    std::lock_guard lock(shadow_mutex_);  // not mutex_: init and the watchdog hold that one
    if (!shadow_) throw state_error("acquire: no parameters registered (shadow mode)");
    return shadow_->acquire();
  }
  //! Shadow mode, during a session: the copy being written (load_weights writes the tensors it
  //! transforms (fused, sharded) there); null outside a session.
  std::shared_ptr<const Snapshot> shadow_snapshot() const {
    std::lock_guard lock(mutex_);
    return shadow_ && state_ == State::updating ? shadow_->shadow() : nullptr;
  }
  //! Shadow mode: the bytes the library allocated for the second copies (0 before registering).
  std::size_t shadow_extra_bytes() const {
    std::lock_guard lock(mutex_);
    return shadow_ ? shadow_->extra_bytes() : 0;
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

  //! The options of one transfer: the init's packing, overridden by the update's.
  static TransferOptions transfer_options(const Packing& init, const PackingOverrides& u,
                                          const EngineOptions& e) {
    TransferOptions t;
    const Packing p = u.over(init);
    t.packed = p.packed;
    t.buffer_size_bytes = static_cast<std::size_t>(p.buffer_size_bytes);
    t.num_buffers = p.num_buffers;
    t.protocol = e.protocol;
    t.timeout = e.timeout;
    t.direct_threshold_bytes = e.protocol == Protocol::weightsync ? e.direct_threshold_bytes : 0;
    t.acknowledge = e.acknowledge;
    t.progress = e.progress;
    t.checksum = e.checksum;
    return t;
  }

  //! The version a delta update may build on (what this rank's handshake marker says): the
  //! current version, or why there is none (a failed update, weights changed without a version).
  std::string delta_base() const {
    std::lock_guard lock(mutex_);
    return held_base();
  }

 private:
  enum class State { uninitialized, ready, updating };

  //! (under mutex_) See delta_base().
  std::string held_base() const {
    return base_ok_ ? version_
                    : "<none: an update since the last named version failed or was not named>";
  }

  //! (under mutex_) The receiver of a delta / sparse update. A delta's marker carries this rank's
  //! base, or why it cannot apply the delta, so that the handshake refuses on every rank.
  std::shared_ptr<detail::UpdateReceiver> delta_receiver(const UpdateRequest& info,
                                                         const TransferOptions& t,
                                                         const AnyLoadWeights& load,
                                                         const AnyDeltaGather& gather) const {
    const bool device = backend_->name() != "host";
    if (info.delta && t.protocol != Protocol::weightsync)
      throw config_error("delta",
                         "a delta update needs the weightsync protocol (its handshake "
                         "checks the base version on every rank)");
    const std::string held = held_base();
    // (the last update's wire when this one is the same: a run of whole or same-shaped rounds
    // pays one comparison, not a wire built and copied)
    auto rx = std::make_shared<detail::UpdateReceiver>(wires_.get(info, held), load,
                                                       t.destination, device, gather);
    const bool delta = info.delta && !info.delta->base_version.empty();
    std::string why = rx->cannot_apply();
    if (why.empty() && (delta || info.sparse_counts) && shadow_ && !opt_.shadow.copy_live_at_start)
      why = "shadow mode without copy_live_at_start: the shadow does not hold the live version";
    if (!why.empty()) {
      if (!delta) throw config_error(info.sparse_counts ? "num_updates_list" : "destination", why);
      rx = std::make_shared<detail::UpdateReceiver>(
          detail::update_wire(info, "<cannot apply: " + why + ">"), load, t.destination, device,
          gather);
    }
    return rx;
  }

  void init(const InitRequest& info) {
    std::unique_lock lock(mutex_);
    if (busy_) throw state_error("init_transfer_engine while update_weights is running");
    if (state_ == State::updating) {
      // A session whose trainer went away before sending: a new trainer takes over.
      log(LogLevel::warning, "init_transfer_engine abandons a started weight update");
      state_ = State::ready;
    }
    info.validate();
    const int world_size = info.group.world_size;
    const int rank = worker_rank(opt_.parallel, info.rank_offset);
    if (rank >= world_size)
      throw config_error(
          "world_size",
          detail::cat("this worker's rank ", rank, " (dp_index ", opt_.parallel.data_parallel_index,
                      ", local_rank ", opt_.parallel.local_rank, ", rank_offset ", info.rank_offset,
                      ") needs world_size > ", rank, ", got ", world_size));
    if (rank == 0)
      throw config_error("rank_offset", "rank 0 is the trainer's; workers need rank_offset >= 1");
    const bool said = info.trainer_ranks > 0;  // the init says M (vLLM's M2N)
    if (said && opt_.trainer_ranks > 0 && opt_.trainer_ranks != info.trainer_ranks)
      throw config_error("rank_offset",
                         detail::cat("the init info has ", info.trainer_ranks,
                                     " trainer ranks (rank_offset, src_mesh_dims), this engine ",
                                     opt_.trainer_ranks, " (Options::trainer_ranks)"));
    const int trainers = said ? info.trainer_ranks : opt_.trainer_ranks;
    if (rank < trainers)
      throw config_error(
          "rank_offset",
          detail::cat("this worker's rank ", rank, " would be a trainer rank: ranks 0..",
                      trainers - 1, " are the ", trainers, " trainer ranks' (",
                      said ? "the init info" : "Options::trainer_ranks",
                      "), so rank_offset must be >= ", trainers, ", got ", info.rank_offset));
    if (backend_) backend_->shutdown();
    backend_.reset();
    init_.reset();
    state_ = State::uninitialized;
    std::shared_ptr<Backend> b = BackendRegistry::global().make(opt_.engine.backend);
    b->init(info.group, rank, opt_.engine);
    backend_ = std::move(b);
    init_ = std::make_shared<const InitRequest>(info);
    trainers_ = trainers;
    state_ = State::ready;
    if (opt_.liveness_interval.count() > 0 && !watchdog_.joinable())
      watchdog_ = std::thread([this] { watch(); });
  }

  void watch() {
    std::unique_lock lock(mutex_);
    while (!stop_) {
      cv_.wait_for(lock, opt_.liveness_interval);
      if (stop_ || busy_ || !backend_ || !backend_->healthy()) continue;
      try {
        backend_->check();
      } catch (const std::exception& e) {
        const std::string why =
            detail::cat("the transfer group failed between updates: ", e.what());
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
  //! The last init (null before one); shared with the conversions of parse_update_info.
  std::shared_ptr<const InitRequest> init_;
  //! M when known at init (Options::trainer_ranks, or the init's trainer_ranks); 0: not.
  int trainers_ = 0;
  State state_ = State::uninitialized;
  bool busy_ = false;
  std::string version_ = "default";
  bool base_ok_ = true;  //!< the weights are version_ (see delta_base())
  int updates_in_session_ = 0;
  bool paused_ = false;
  //! (under mutex_) The last delta / sparse update's wire (delta_receiver).
  mutable detail::UpdateWireCache wires_;
  //! Shadow mode's two copies (null: in place, or nothing registered yet). Written under both
  //! mutexes, read under either: acquire() takes shadow_mutex_ only.
  std::shared_ptr<ShadowWeights> shadow_;
  mutable std::mutex shadow_mutex_;
};

}  // namespace weightsync
