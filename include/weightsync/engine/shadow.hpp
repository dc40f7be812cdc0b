// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Shadow weights: updates without a pause. The server's parameters exist twice; the live copy
//! serves version v through snapshots while a sync lands in the other (the shadow), and
//! finish_weight_update publishes the shadow as v+1 in one step. A reader holds a Snapshot for one
//! forward pass and sees v or v+1, never a mix. A copy becomes the next shadow only once the last
//! snapshot of it is gone.
//!
//! Memory: one extra copy of the parameters (ShadowWeights::extra_bytes(); the engine logs it when
//! the parameters are registered), allocated through a ShadowMemory (host memory, or the CUDA
//! device policy: PolicyShadowMemory<CudaPolicy>) unless the server provides the second copies.
//!
//! Deltas: the shadow starts each session as a copy of the live version (ShadowOptions::
//! copy_live_at_start, the default), so an update that writes only some parameters, or that
//! applies a delta to its base, works on live's bytes copied into the shadow: a delta sync may
//! add to the shadow's bytes as it would to live's in place. With copy_live_at_start = false the
//! shadow holds the bytes of version v-1 where nothing was written: only for servers whose every
//! update is a full one, and never with deltas.

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "weightsync/detail/format.hpp"
#include "weightsync/engine/backend.hpp"
#include "weightsync/error.hpp"
#include "weightsync/host/device_policy.hpp"
#include "weightsync/log.hpp"
#include "weightsync/tensor_meta.hpp"
#include "weightsync/tuning.hpp"

namespace weightsync {

//! One parameter as the server registers it.
struct ShadowParameter {
  TensorMeta meta;
  //! The server's parameter memory (meta.nbytes() bytes): it serves the initial version.
  void* live = nullptr;
  //! Optional: a second copy of meta.nbytes() bytes that the server provides; nullptr: the
  //! library allocates one (ShadowMemory).
  void* second = nullptr;
};

//! One parameter of a snapshot. `data` is device memory on the CUDA backends, host memory on the
//! host backend. A reader must not write through it (except the engine's shadow view during a
//! session, see WeightTransferEngine::shadow_snapshot).
struct SnapshotParameter {
  const TensorMeta* meta = nullptr;
  void* data = nullptr;
  const std::string& name() const noexcept { return meta->name; }
  std::size_t nbytes() const { return meta->nbytes(); }
};

namespace detail {
struct ShadowState;
}

//! A version of the parameters, held by a reader for one forward pass (through a
//! std::shared_ptr<const Snapshot>). While any snapshot of a copy exists, that copy is not
//! reused as a shadow.
class Snapshot {
 public:
  Snapshot(std::shared_ptr<detail::ShadowState> state, int copy, std::string version,
           std::uint64_t generation);
  Snapshot(const Snapshot&) = delete;
  Snapshot& operator=(const Snapshot&) = delete;
  ~Snapshot();

  //! The version string given to finish_weight_update ("default" before the first).
  const std::string& version() const noexcept { return version_; }
  //! 0 for the registered weights, +1 for every published update.
  std::uint64_t generation() const noexcept { return generation_; }
  //! Which of the two copies (0: the server's registered memory, 1: the second copies).
  int copy() const noexcept { return copy_; }
  //! The parameter table, in registration order.
  std::span<const SnapshotParameter> parameters() const noexcept { return params_; }
  //! The parameter called `name`, or nullptr.
  const SnapshotParameter* find(std::string_view name) const;
  //! @throws config_error("name") when there is no such parameter.
  const SnapshotParameter& at(std::string_view name) const {
    if (const auto* p = find(name)) return *p;
    throw config_error("name", detail::cat("no parameter '", name, "' is registered"));
  }

 private:
  std::shared_ptr<detail::ShadowState> state_;
  int copy_;
  std::string version_;
  std::uint64_t generation_;
  std::vector<SnapshotParameter> params_;
};

//! Memory for the library-owned second copies, and the copy of live into the shadow.
class ShadowMemory {
 public:
  virtual ~ShadowMemory() = default;
  //! "host", "cuda:0", ... (for the log line).
  virtual std::string name() const = 0;
  //! `bytes` bytes that stay valid while the returned pointer lives.
  virtual std::shared_ptr<void> allocate(std::size_t bytes) = 0;
  //! dst[i] <- src[i] (n[i] bytes), complete when it returns.
  //! @throws timeout_error("shadow copy") when it takes longer than `timeout`.
  virtual void copy(std::span<void* const> dst, std::span<const void* const> src,
                    std::span<const std::size_t> n, std::chrono::milliseconds timeout) = 0;
};

//! A ShadowMemory over a device policy: HostPolicy (host memory), CudaPolicy (device memory of
//! its device; the copy runs on a stream of its own, waited for with a deadline).
template <class Policy>
class PolicyShadowMemory final : public ShadowMemory {
 public:
  explicit PolicyShadowMemory(Policy policy = Policy(), std::string name = "host")
      : policy_(std::move(policy)), name_(std::move(name)) {}
  std::string name() const override { return name_; }
  std::shared_ptr<void> allocate(std::size_t bytes) override {
    auto buf = std::make_shared<typename Policy::Buffer>(policy_.alloc(bytes));
    void* p = static_cast<void*>(buf->data());
    return std::shared_ptr<void>(std::move(buf), p);
  }
  void copy(std::span<void* const> dst, std::span<const void* const> src,
            std::span<const std::size_t> n, std::chrono::milliseconds timeout) override {
    if (dst.empty()) return;
    auto stream = policy_.make_stream();
    auto done = policy_.make_event();
    policy_.copy_batch(dst.data(), src.data(), n.data(), dst.size(), stream.get());
    policy_.record(done, stream.get());
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!policy_.ready(done)) {
      if (std::chrono::steady_clock::now() > deadline)
        throw timeout_error("shadow copy", -1,
                            detail::cat("copying the live version into the shadow took more than ",
                                        timeout.count(), " ms"));
      std::this_thread::sleep_for(Tuning::Wait::shadow_poll_every);
    }
  }

 private:
  Policy policy_;
  std::string name_;
};

//! Host memory (the host backend's).
inline std::shared_ptr<ShadowMemory> host_shadow_memory() {
  return std::make_shared<PolicyShadowMemory<HostPolicy>>();
}

//! The worker engine's shadow mode (WeightTransferEngine::Options::shadow).
struct ShadowOptions {
  //! Off by default: syncs write in place (no extra memory; the server pauses for them).
  bool enabled = false;
  //! Each session's shadow starts as a copy of the live version (see the file comment).
  bool copy_live_at_start = true;
  //! Where the library allocates the second copies; null: host memory, which only the host backend
  //! can use (the engine refuses null with another backend). For the CUDA backends:
  //! std::make_shared<PolicyShadowMemory<CudaPolicy>>(CudaPolicy(device), "cuda").
  std::shared_ptr<ShadowMemory> memory;
};

namespace detail {

//! What the snapshots share with the ShadowWeights that made them: the parameter table, the two
//! copies' memory and how many snapshots hold each copy.
struct ShadowState {
  std::vector<TensorMeta> metas;
  std::unordered_map<std::string, std::size_t> index;
  std::vector<void*> data[2];
  std::shared_ptr<void> arena;  //!< the library-owned second copies (one allocation)
  std::mutex mutex;
  std::condition_variable released;
  int holders[2] = {0, 0};
  std::string version[2];  //!< what each copy holds (for the error naming a held version)
  std::uint64_t generation[2] = {0, 0};
};

}  // namespace detail

inline Snapshot::Snapshot(std::shared_ptr<detail::ShadowState> state, int copy, std::string version,
                          std::uint64_t generation)
    : state_(std::move(state)), copy_(copy), version_(std::move(version)), generation_(generation) {
  params_.reserve(state_->metas.size());
  for (std::size_t i = 0; i < state_->metas.size(); ++i)
    params_.push_back(SnapshotParameter{&state_->metas[i], state_->data[copy_][i]});
  std::lock_guard lock(state_->mutex);
  ++state_->holders[copy_];
}

inline Snapshot::~Snapshot() {
  {
    std::lock_guard lock(state_->mutex);
    --state_->holders[copy_];
  }
  state_->released.notify_all();
}

inline const SnapshotParameter* Snapshot::find(std::string_view name) const {
  const auto it = state_->index.find(std::string(name));
  return it == state_->index.end() ? nullptr : &params_[it->second];
}

//! The two copies and the published version. Thread-safe: acquire() may run on any thread at any
//! time; begin/publish/discard are the engine's (one session at a time).
class ShadowWeights {
 public:
  //! @throws config_error naming the parameter for a duplicate name, a null live pointer, or a
  //!   second copy that is the live memory.
  ShadowWeights(std::vector<ShadowParameter> params, std::shared_ptr<ShadowMemory> memory,
                std::string version)
      : state_(std::make_shared<detail::ShadowState>()), memory_(std::move(memory)) {
    if (!memory_) memory_ = host_shadow_memory();
    auto& s = *state_;
    constexpr std::size_t align = 256;
    std::vector<std::size_t> offset(params.size(), 0);
    for (std::size_t i = 0; i < params.size(); ++i) {
      const auto& p = params[i];
      const auto field = detail::cat("parameters[", i, "] (", p.meta.name, ")");
      if (!s.index.emplace(p.meta.name, i).second) throw config_error(field, "registered twice");
      const std::size_t nb = p.meta.nbytes();
      if (!p.live && nb > 0) throw config_error(field, "live is null");
      if (p.second && p.second == p.live)
        throw config_error(field, "second is the live memory; give a copy of its own");
      parameter_bytes_ += nb;
      if (p.second) {
        provided_bytes_ += nb;
      } else {
        offset[i] = extra_bytes_;
        extra_bytes_ += (nb + align - 1) / align * align;
      }
    }
    if (extra_bytes_ > 0) s.arena = memory_->allocate(extra_bytes_);
    for (std::size_t i = 0; i < params.size(); ++i) {
      s.metas.push_back(params[i].meta);
      s.data[0].push_back(params[i].live);
      s.data[1].push_back(params[i].second ? params[i].second
                                           : static_cast<std::byte*>(s.arena.get()) + offset[i]);
    }
    s.version[0] = version;
    live_ = std::make_shared<const Snapshot>(state_, 0, std::move(version), 0);
  }
  ShadowWeights(const ShadowWeights&) = delete;
  ShadowWeights& operator=(const ShadowWeights&) = delete;

  //! Bytes of one copy of the parameters.
  std::size_t parameter_bytes() const noexcept { return parameter_bytes_; }
  //! Bytes the library allocated for the second copies (one extra copy, aligned to 256 B each).
  std::size_t extra_bytes() const noexcept { return extra_bytes_; }
  //! Bytes of the second copies that the server provided.
  std::size_t provided_bytes() const noexcept { return provided_bytes_; }
  //! Where the library-owned copies live (ShadowMemory::name()).
  std::string memory_name() const { return memory_->name(); }

  //! The live version, for one forward pass. Never waits on a sync.
  std::shared_ptr<const Snapshot> acquire() const {
    std::lock_guard lock(mutex_);
    return live_;
  }

  //! The start of a session: waits (at most `timeout`) until no snapshot holds the shadow copy,
  //! then, when asked, copies the live version into it.
  //! @throws timeout_error("shadow") naming the version still held and by how many snapshots.
  void begin(std::chrono::milliseconds timeout, bool copy_live) {
    const auto live = acquire();
    const int sh = 1 - live->copy();
    auto& s = *state_;
    {
      std::unique_lock lock(s.mutex);
      if (!s.released.wait_for(lock, timeout, [&] { return s.holders[sh] == 0; }))
        throw timeout_error(
            "shadow", -1,
            detail::cat("version '", s.version[sh], "' (generation ", s.generation[sh], ", copy ",
                        sh, ") is still held by ", s.holders[sh], " snapshot(s) after ",
                        timeout.count(),
                        " ms: its memory is the next shadow; release each snapshot after its "
                        "forward pass (the live version '",
                        live->version(), "' keeps serving)"));
    }
    if (copy_live) {
      std::vector<void*> dst;
      std::vector<const void*> from;
      std::vector<std::size_t> bytes;
      for (std::size_t i = 0; i < s.metas.size(); ++i)
        if (const auto nb = s.metas[i].nbytes()) {
          dst.push_back(s.data[sh][i]);
          from.push_back(s.data[live->copy()][i]);
          bytes.push_back(nb);
        }
      memory_->copy(dst, from, bytes, timeout);
    }
    {
      std::lock_guard lock(s.mutex);
      s.version[sh] = "(being written)";
    }
    shadow_ = std::make_shared<const Snapshot>(state_, sh, "(shadow)", live->generation() + 1);
  }

  //! The copy being written in this session (null outside one).
  std::shared_ptr<const Snapshot> shadow() const { return shadow_; }

  //! Where a received tensor lands: its shadow parameter when name, dtype and shape all match;
  //! else nullptr (it goes to load_weights, which may write into shadow()).
  void* destination(const TensorMeta& m) const {
    if (!shadow_) return nullptr;
    const auto* p = shadow_->find(m.name);
    if (!p || p->meta->dtype != m.dtype || p->meta->shape != m.shape) return nullptr;
    // A zero-size parameter may have no memory; it still lands "in place" (nothing to write).
    static std::byte nothing;
    return p->data ? p->data : &nothing;
  }

  //! Makes the shadow the live version `version` (one step for readers).
  void publish(std::string version) {
    if (!shadow_) throw state_error("shadow: publish without a shadow being written");
    const int sh = shadow_->copy();
    const auto gen = shadow_->generation();
    {
      std::lock_guard lock(state_->mutex);
      state_->version[sh] = version;
      state_->generation[sh] = gen;
    }
    auto next = std::make_shared<const Snapshot>(state_, sh, std::move(version), gen);
    shadow_.reset();
    std::lock_guard lock(mutex_);
    live_.swap(next);  // the old live snapshot is released outside the lock (next's destructor)
  }
  //! The live copy under a new version name (a session in which nothing was received).
  void relabel(std::string version) {
    const auto live = acquire();
    auto next = std::make_shared<const Snapshot>(state_, live->copy(), version, live->generation());
    {
      std::lock_guard lock(state_->mutex);
      state_->version[live->copy()] = std::move(version);
    }
    std::lock_guard lock(mutex_);
    live_.swap(next);
  }
  //! Drops the shadow being written: the live version keeps serving.
  void discard() noexcept { shadow_.reset(); }

 private:
  std::shared_ptr<detail::ShadowState> state_;
  std::shared_ptr<ShadowMemory> memory_;
  mutable std::mutex mutex_;
  std::shared_ptr<const Snapshot> live_;
  std::shared_ptr<const Snapshot> shadow_;
  std::size_t parameter_bytes_ = 0, extra_bytes_ = 0, provided_bytes_ = 0;
};

namespace detail {

//! Shadow mode's demands on the engine's options (WeightTransferEngine's constructor).
inline void check_shadow_options(const ShadowOptions& s, const EngineOptions& e) {
  if (!s.enabled) return;
  // The commit is a vote: every rank must learn every rank's outcome in the same call.
  if (e.protocol != Protocol::weightsync)
    throw config_error("protocol",
                       "shadow mode needs Protocol::weightsync (vLLM's wire has no outcome "
                       "exchange to commit on)");
  if (e.acknowledge != Acknowledge::each_transfer)
    throw config_error("acknowledge",
                       "shadow mode needs Acknowledge::each_transfer (the trainer's too), so that "
                       "every rank learns every rank's outcome before the version flips; got "
                       "next_transfer");
  if (!s.memory && e.backend != "host")
    throw config_error("shadow.memory",
                       "the " + e.backend +
                           " backend lands tensors in device memory: give a ShadowMemory, e.g. "
                           "PolicyShadowMemory<CudaPolicy> (null means host memory, for the host "
                           "backend only)");
}

//! A transfer of a shadow session: tensors land in the shadow, and the call fails on every rank
//! when any rank failed (the vote).
inline void shadow_transfer(std::shared_ptr<const ShadowWeights> w, TransferOptions& t) {
  if (t.destination)
    throw config_error("destination",
                       "shadow mode places tensors itself (their shadow parameter); write the "
                       "others from load_weights into shadow_snapshot()");
  t.destination = [w = std::move(w)](const TensorMeta& m) { return w->destination(m); };
  t.all_or_nothing = true;
}

inline void discard_shadow(ShadowWeights& w, int rank, std::exception_ptr why) noexcept {
  std::string what = "(not a std::exception)";
  try {
    std::rethrow_exception(why);
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
  }
  try {
    log(LogLevel::error,
        cat("[weightsync.shadow] rank ", rank, ": update discarded, the live version '",
            w.acquire()->version(), "' keeps serving: ", what));
  } catch (...) {
  }
  w.discard();
}

inline void log_shadow_cost(const ShadowWeights& w, int rank) {
  log(LogLevel::info,
      cat("[weightsync.shadow] rank ", rank, ": shadow mode, ", w.parameter_bytes(),
          " bytes of parameters; one extra copy: ", w.extra_bytes(), " bytes allocated (",
          w.memory_name(), ") + ", w.provided_bytes(), " bytes provided by the server"));
}

}  // namespace detail

}  // namespace weightsync
