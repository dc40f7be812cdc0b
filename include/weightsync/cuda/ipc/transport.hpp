// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! IpcTransport: one end of an IPC transfer group (rank 0 produces, ranks 1.. consume). The
//! producer exports the allocations behind its tensors (ExportCache) and sends a plan; each
//! consumer maps them once (MappingCache) and pulls with copy engines (Puller). Memory that cannot
//! be exported is staged through a ring of K slots of one exported allocation, in the chunks of
//! chunk_plan over B, each slot reused only after every consumer handed it back. Control messages
//! go over a HostCommunicator (ControlMessages); every wait is the library's bounded wait.

#include "weightsync/config.hpp"
#if !WEIGHTSYNC_HAS_CUDA
#error "<weightsync/cuda/ipc/transport.hpp> needs the CUDA runtime (WEIGHTSYNC_HAS_CUDA=0)"
#endif

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "weightsync/chunk_plan.hpp"
#include "weightsync/concepts.hpp"
#include "weightsync/cuda/check.hpp"
#include "weightsync/cuda/device_buffer.hpp"
#include "weightsync/cuda/event.hpp"
#include "weightsync/cuda/ipc/driver.hpp"
#include "weightsync/cuda/ipc/exporter.hpp"
#include "weightsync/cuda/ipc/mapping.hpp"
#include "weightsync/cuda/ipc/options.hpp"
#include "weightsync/cuda/ipc/placement.hpp"
#include "weightsync/cuda/ipc/pull.hpp"
#include "weightsync/cuda/stream.hpp"
#include "weightsync/detail/control_messages.hpp"
#include "weightsync/detail/format.hpp"
#include "weightsync/detail/frame.hpp"
#include "weightsync/detail/ipc_plan.hpp"
#include "weightsync/detail/pipeline/wait.hpp"
#include "weightsync/error.hpp"
#include "weightsync/host/communicator.hpp"
#include "weightsync/tensor_meta.hpp"
#include "weightsync/transfer_options.hpp"

namespace weightsync {

namespace detail {
struct IpcAccess;
}

//! One end of an IPC transfer group: rank 0 produces, ranks 1.. consume. Move-only; owns its
//! control connections, streams, slots and mappings.
class IpcTransport {
 public:
  using LoadFn = std::function<void(std::span<const TensorView>, cudaStream_t)>;

  //! Joins the group (the rendezvous of HostCommunicator) on CUDA device `device` (-1: current).
  IpcTransport(const RendezvousOptions& rv, int device, IpcOptions opt,
               std::chrono::milliseconds op_timeout)
      : opt_(opt),
        device_(device >= 0 ? device : detail::current_device()),
        stream_(device_),
        sync_(device_),
        pull_begin_(device_),
        pull_end_(device_),
        mappings_(device_) {
    if (opt_.copy_streams < 1 || opt_.copy_streams > 16)
      throw config_error("copy_streams", detail::cat("must be in 1..16, got ", opt_.copy_streams));
    if (opt_.piece_bytes == 0) throw config_error("piece_bytes", "must be > 0");
    detail::DriverApi::get();  // fail early when the driver lacks what we need
    here_ = detail::Placement::here(device_);
    ctrl_ = HostCommunicator::connect(rv, op_timeout);
    detail::CurrentDeviceGuard g(device_);
    puller_.emplace(device_, opt_);
    for (int k = 0; k < kMaxPackedNumBuffers; ++k) slot_done_.emplace_back(device_);
  }
  IpcTransport(IpcTransport&&) noexcept = default;
  //! Not assignable: replacing a transport must drain its streams first (destroy it, then make
  //! one).
  IpcTransport& operator=(IpcTransport&&) = delete;
  ~IpcTransport() {
    if (stream_.get()) (void)cudaStreamSynchronize(stream_.get());
    if (puller_)
      for (auto& s : puller_->streams())
        if (s.get()) (void)cudaStreamSynchronize(s.get());
    close_mappings();
  }
  //! Closes every mapping (each exactly once). Also done by the destructor.
  void close_mappings() noexcept { mappings_.clear(stats_); }

  int rank() const noexcept { return ctrl_.rank(); }
  int size() const noexcept { return ctrl_.size(); }
  int device() const noexcept { return device_; }
  bool healthy() const noexcept { return !ctrl_.aborted(); }
  void check() { ctrl_.check(); }
  void abort(const std::string& why) noexcept { ctrl_.abort(why); }
  const IpcStats& stats() const noexcept { return stats_; }
  //! The settings; may be changed between transfers (same_gpu only before the first).
  IpcOptions& options() noexcept { return opt_; }
  HostCommunicator& control() noexcept { return ctrl_; }

  //! Rank 0: offers `metas.size()` tensors from `items` (device memory of this process, in the
  //! declared order) to every consumer, and returns once every consumer has pulled them. The
  //! bytes must stay unchanged until then. Every wait is bounded by opt.timeout, consumers'
  //! load_weights included. Same errors as packed_broadcast_producer: a wrong item is a
  //! config_error here and a remote_error on every consumer, and the transport stays usable; a
  //! consumer's failure is a remote_error (protocol_error for a mismatch) naming its rank; any
  //! other failure aborts the transport so that no peer waits for us.
  template <TensorIterator R>
  TransferStats send(std::span<const TensorMeta> metas, R&& items, const TransferOptions& opt) {
    using namespace detail;
    begin(opt, /*producer=*/true);
    CurrentDeviceGuard g(device_);
    exports_.begin();
    AbortOnThrow abort_on_throw(ctrl_, "ipc producer failed");
    Produce p;
    p.plan = plan_header(metas);
    std::exception_ptr failure;  // the items were wrong: said in the plan, rethrown at the end
    try {
      p.src = collect_sources(metas, items, p.plan.total_bytes);
    } catch (...) {
      failure = std::current_exception();
      p.plan.error =
          what_of(failure).substr(0, 4000);  // the consumers' decoder takes 64 KiB at most
    }
    // The producer's earlier work on the weights must be complete before a consumer reads them.
    if (opt.source_stream)
      await_stream(static_cast<cudaStream_t>(opt.source_stream), opt, "ipc source stream");
    if (!failure) place_tensors(metas, p);
    stage_ring(p, opt);
    stats_.regions = p.plan.regions.size();
    stats_.staged = p.staged_metas.size();
    exports_.prune(p.plan);
    send_plan(p.plan);
    if (!failure) run_staging(p, opt);
    const auto outcomes = channel().gather_outcomes(FrameCode::ok, "");
    plans_.sent_ok = !failure && std::all_of(outcomes.begin(), outcomes.end(),
                                             [](const auto& o) { return o.ok(); });
    abort_on_throw.disarm();  // in step with every consumer: what follows leaves the channel usable
    if (failure) std::rethrow_exception(failure);
    channel().raise_first(outcomes);
    TransferStats st;
    st.tensors = metas.size();
    st.chunks = p.chunks.size();
    st.bytes = p.plan.total_bytes;
    st.slot_bytes = p.chunks.empty() ? 0 : p.stride;
    st.ring_bytes = slots_.size();
    return st;
  }

  //! Rank >= 1: pulls the tensors of the producer's plan. Tensors with opt.destination are copied
  //! there; the others are handed to `load` as views into the producer's memory (a zero-size
  //! tensor's view has a null data pointer; views are valid during the call; whatever `load`
  //! enqueues on the stream it gets must complete before this returns, which it waits for). Every
  //! wait is bounded by opt.timeout. If `load` throws, the consumer keeps the hand-offs in step
  //! without loading more, waits for what it enqueued, reports the failure to the producer and
  //! rethrows it. Same errors as packed_broadcast_consumer.
  TransferStats receive(std::span<const TensorMeta> metas, const TransferOptions& opt,
                        const LoadFn& load) {
    using namespace detail;
    begin(opt, /*producer=*/false);
    CurrentDeviceGuard g(device_);
    AbortOnThrow abort_on_throw(ctrl_, "ipc consumer failed");
    const auto t0 = Clock::now();
    // An unreadable plan leaves us unable to follow the hand-offs: the guard aborts the transport.
    Consume c(metas, opt, load, receive_plan());
    const auto t1 = Clock::now();
    accept_plan(c);
    const auto t2 = Clock::now();
    if (c.ok()) {
      pull_begin_.record(stream_.get());
      c.attempt([&] { pull(c, IpcWhere::region, 0); });
      pull_end_.record(stream_.get());
    }
    pull_staged(c);
    const auto t3 = Clock::now();
    if (c.ok())
      await_stream(stream_.get(), opt, "ipc pull");
    else
      drain(opt);  // nothing of ours may still run when the caller gets the error
    const auto t4 = Clock::now();
    channel().gather_outcomes(c.code, c.why);
    const auto t5 = Clock::now();
    abort_on_throw.disarm();  // in step with the producer: what follows leaves the channel usable
    record_phases({t0, t1, t2, t3, t4, t5}, c.ok());
    // Mappings the plan no longer names: the producer freed or replaced that memory.
    if (c.plan.error.empty()) mappings_.prune(c.plan, stats_);
    // Only a plan this side accepted and pulled from may be named again by "same plan".
    if (c.ok())
      plans_.received = c.plan;
    else
      plans_.received.reset();
    // Only the producer's failure (in the plan) and our own are ours to throw; another consumer's
    // failure is the producer's business.
    if (c.failure) std::rethrow_exception(c.failure);
    TransferStats st;
    st.tensors = metas.size();
    st.chunks = c.plan.num_chunks;
    st.bytes = c.plan.total_bytes;
    st.slot_bytes = c.plan.slot_stride;
    return st;
  }

 private:
  friend struct detail::IpcAccess;  // the sharded sync (cuda/ipc/sharded.hpp)
  using Clock = std::chrono::steady_clock;

  //! The producer's state of one transfer.
  struct Produce {
    detail::IpcPlan plan;
    std::vector<const std::byte*> src;
    std::vector<TensorMeta> staged_metas;
    std::vector<std::size_t> staged_index;
    std::vector<Chunk> chunks;
    std::size_t stride = 0;
  };

  //! A consumer's state of one transfer: the plan, and the first failure (ours or the producer's).
  struct Consume {
    Consume(std::span<const TensorMeta> m, const TransferOptions& o, const LoadFn& l,
            detail::IpcPlan p)
        : metas(m), opt(o), load(l), plan(std::move(p)) {}
    std::span<const TensorMeta> metas;
    const TransferOptions& opt;
    const LoadFn& load;
    detail::IpcPlan plan;
    std::vector<std::byte*> base;
    detail::FrameCode code = detail::FrameCode::ok;
    std::string why;
    std::exception_ptr failure;

    bool ok() const { return code == detail::FrameCode::ok; }
    void fail(detail::FrameCode c) {
      if (!ok()) return;
      code = c;
      failure = std::current_exception();
      why = detail::what_of(failure);
    }
    //! Runs `f`; an exception becomes this transfer's failure.
    template <class F>
    void attempt(F&& f) {
      try {
        f();
      } catch (const protocol_error&) {
        fail(detail::FrameCode::mismatch);
      } catch (...) {
        fail(detail::FrameCode::failed);
      }
    }
  };

  detail::ControlMessages channel() { return detail::ControlMessages(ctrl_); }

  //! Sends the plan, or, when it is byte for byte the plan of the last round and that round
  //! succeeded everywhere, a short "same plan as round N" message (checked by the consumers).
  void send_plan(const detail::IpcPlan& plan) {
    std::string bytes = plan.encode();
    if (plans_.sent_ok && bytes == plans_.sent) {
      stats_.plans_reused++;
      channel().send_blob(detail::encode_same_plan(plans_.round, detail::plan_hash(bytes)));
      return;
    }
    ++plans_.round;
    channel().send_blob(bytes);
    plans_.sent = std::move(bytes);
    plans_.sent_ok = false;
  }

  //! The producer's plan: decoded, or this side's copy of round N's when it says "same as N".
  detail::IpcPlan receive_plan() {
    const std::string blob = channel().receive_blob(std::uint64_t{1} << 30, "ipc plan");
    if (auto same = detail::decode_same_plan(blob)) {
      if (!plans_.received || same->round != plans_.round || same->hash != plans_.hash)
        throw protocol_error(
            0, detail::cat("ipc plan: the producer says \"same plan as round ", same->round,
                           "\", but this consumer holds ",
                           plans_.received ? "round " + std::to_string(plans_.round)
                                           : std::string("no accepted plan")));
      stats_.plans_reused++;
      return *plans_.received;
    }
    ++plans_.round;
    plans_.hash = detail::plan_hash(blob);
    plans_.received.reset();
    return detail::IpcPlan::decode(blob);
  }

  void begin(const TransferOptions& opt, bool producer) {
    opt.validate();
    if (producer && rank() != 0)
      throw config_error("root", detail::cat("the producer must be rank 0, this is rank ", rank()));
    if (!producer && rank() == 0)
      throw config_error("root", "the consumer must not run on rank 0 (the producer)");
    if (ctrl_.aborted())
      throw state_error(
          "ipc transport: aborted by an earlier error; create a new one (init again)");
    ctrl_.set_timeout(opt.timeout);
  }

  detail::IpcPlan plan_header(std::span<const TensorMeta> metas) const {
    detail::IpcPlan plan;
    plan.same_gpu = opt_.same_gpu ? 1 : 0;
    plan.boot_id = here_.boot_id;
    plan.host = here_.host;
    plan.uuid = here_.uuid;
    plan.pid = here_.pid;
    plan.digest = detail::metadata_digest(metas);
    plan.num_tensors = metas.size();
    return plan;
  }

  //! The items' bytes, each checked against its metadata; `total` gets their byte count.
  template <class R>
  static std::vector<const std::byte*> collect_sources(std::span<const TensorMeta> metas, R& items,
                                                       std::uint64_t& total) {
    std::vector<const std::byte*> src(metas.size(), nullptr);
    std::size_t i = 0;
    for (auto&& item : items) {
      if (i == metas.size()) throw detail::too_many_items(metas.size());
      src[i] = static_cast<const std::byte*>(detail::checked_source(item, metas[i], i));
      total += metas[i].nbytes();
      ++i;
    }
    if (i != metas.size()) throw detail::too_few_items(i, metas.size());
    return src;
  }

  //! Every tensor in an exported allocation, or else staged.
  void place_tensors(std::span<const TensorMeta> metas, Produce& p) {
    using detail::IpcWhere;
    p.plan.places.resize(metas.size());
    for (std::size_t i = 0; i < metas.size(); ++i) {
      const std::size_t nb = metas[i].nbytes();
      if (nb == 0) continue;
      std::optional<std::size_t> r;
      if (opt_.export_sources) r = exports_.region(p.src[i], nb, p.plan, stats_);
      auto& pl = p.plan.places[i];
      if (r) {
        pl.where = IpcWhere::region;
        pl.index = *r;
        pl.offset = static_cast<std::uint64_t>(p.src[i] - exports_.base(*r));
      } else {
        pl.where = IpcWhere::staged;
        p.staged_metas.push_back(metas[i]);
        p.staged_index.push_back(i);
      }
    }
  }

  //! Staged tensors: chunks of the strict-greater rule over B, K slots of the largest chunk in one
  //! exported allocation.
  void stage_ring(Produce& p, const TransferOptions& opt) {
    p.chunks = chunk_plan(p.staged_metas, opt.buffer_size_bytes);
    if (p.chunks.empty()) return;
    const auto K = static_cast<std::size_t>(opt.num_buffers);
    for (const auto& c : p.chunks) p.stride = std::max(p.stride, (c.bytes + 255) / 256 * 256);
    if (slots_.size() < p.stride * K) {
      // Whole 2 MiB pages: copy engines pull a mapping of another size about a quarter slower.
      const std::size_t page = std::size_t{2} << 20;
      slots_ = DeviceBuffer();
      slots_ = DeviceBuffer((p.stride * K + page - 1) / page * page, device_);
    }
    const auto r = exports_.region(slots_.data(), slots_.size(), p.plan, stats_);
    if (!r) throw error("[weightsync.ipc] the slot ring cannot be exported (cudaIpcGetMemHandle)");
    p.plan.slot_region = *r;
    p.plan.slot_stride = p.stride;
    p.plan.num_slots = static_cast<std::uint32_t>(K);
    p.plan.num_chunks = p.chunks.size();
    for (std::size_t c = 0; c < p.chunks.size(); ++c) {
      std::size_t off = 0;
      for (std::size_t j = p.chunks[c].begin; j < p.chunks[c].end; ++j) {
        auto& pl = p.plan.places[p.staged_index[j]];
        pl.index = c;
        pl.offset = off;
        off += p.staged_metas[j].nbytes();
      }
    }
  }

  //! Copies each staged chunk into its slot, announces it, and reuses a slot only once every
  //! consumer handed it back.
  void run_staging(Produce& p, const TransferOptions& opt) {
    const auto K = static_cast<std::size_t>(opt.num_buffers);
    auto ch = channel();
    for (std::size_t c = 0; c < p.chunks.size(); ++c) {
      if (c >= K) ch.gather_acks();  // slot c % K is free again
      std::vector<detail::CopyPiece> pieces;
      std::byte* slot = slots_.data() + (c % K) * p.stride;
      std::size_t off = 0;
      for (std::size_t j = p.chunks[c].begin; j < p.chunks[c].end; ++j) {
        const std::size_t nb = p.staged_metas[j].nbytes();
        detail::add_piece(pieces, slot + off, p.src[p.staged_index[j]], nb);
        off += nb;
      }
      for (const auto& piece : pieces)
        detail::check(
            cudaMemcpyAsync(piece.dst, piece.src, piece.bytes, cudaMemcpyDefault, stream_.get()),
            "cudaMemcpyAsync(stage)");
      await_stream(stream_.get(), opt, "ipc staging");
      std::uint64_t notice = c;
      ctrl_.broadcast(&notice, sizeof notice, 0);
    }
    for (std::size_t c = p.chunks.size() >= K ? p.chunks.size() - K : 0; c < p.chunks.size(); ++c)
      ch.gather_acks();
  }

  //! Checks the producer's plan against this consumer (placement, metadata, bounds) and maps it.
  void accept_plan(Consume& c) {
    c.attempt([&] {
      if (!c.plan.error.empty()) throw remote_error(0, c.plan.error);
      detail::check_placement(c.plan, here_, opt_.same_gpu, device_);
      const auto digest = detail::metadata_digest(c.metas);
      if (c.plan.digest != digest || c.plan.num_tensors != c.metas.size())
        throw protocol_error(
            0,
            detail::cat("ipc handshake: the producer's tensors (", c.plan.num_tensors, ", digest ",
                        c.plan.digest, ") differ from this consumer's (", c.metas.size(),
                        ", digest ", digest, "): names, dtypes or shapes do not match"));
      std::size_t total = 0;
      for (const auto& m : c.metas) total += m.nbytes();
      if (total != c.plan.total_bytes)
        throw protocol_error(0, detail::cat("ipc handshake: ", c.plan.total_bytes,
                                            " bytes offered, ", total, " expected"));
      c.base = mappings_.map(c.plan, stats_);
      stats_.staged = detail::check_places(c.plan, c.metas);
    });
  }

  //! The staged chunks, slot by slot, mirroring the producer's hand-offs. A slot is handed back
  //! only once nothing reads it any more: its pulls done, or (after a failure) everything this
  //! side enqueued drained.
  void pull_staged(Consume& c) {
    if (!c.plan.error.empty() || c.plan.num_chunks == 0) return;
    const auto K = static_cast<std::size_t>(std::max<std::uint32_t>(c.plan.num_slots, 1));
    auto hand_back = [&](std::size_t chunk) {
      if (c.ok())
        await_event(slot_done_[chunk % K], c.opt, "ipc slot pull");
      else
        drain(c.opt);
      channel().gather_acks();
    };
    for (std::size_t chunk = 0; chunk < c.plan.num_chunks; ++chunk) {
      if (chunk >= K) hand_back(chunk - K);
      std::uint64_t notice = 0;
      ctrl_.broadcast(&notice, sizeof notice, 0);
      if (notice != chunk)
        throw protocol_error(
            0, detail::cat("ipc hand-off: chunk ", notice, " announced where ", chunk, " was due"));
      if (!c.ok()) continue;
      c.attempt([&] {
        pull(c, detail::IpcWhere::staged, chunk);
        slot_done_[chunk % K].record(stream_.get());
      });
    }
    for (std::size_t chunk = c.plan.num_chunks >= K ? c.plan.num_chunks - K : 0;
         chunk < c.plan.num_chunks; ++chunk)
      hand_back(chunk);
  }

  //! Enqueues the copies (or load calls) of the tensors at `where` (chunk `chunk` when staged).
  void pull(Consume& c, detail::IpcWhere where, std::size_t chunk) {
    using namespace detail;
    const auto& plan = c.plan;
    std::vector<CopyPiece> pieces;
    std::vector<TensorView> views;
    for (std::size_t i = 0; i < c.metas.size(); ++i) {
      const auto& pl = plan.places[i];
      const auto& meta = c.metas[i];
      if (pl.where == IpcWhere::empty && where == IpcWhere::region) {
        // Zero-size tensors: nothing to copy; without a destination the loader still sees them.
        if (!(c.opt.destination && c.opt.destination(meta)))
          views.push_back(TensorView{&meta, nullptr, 0});
        continue;
      }
      if (pl.where != where || (where == IpcWhere::staged && pl.index != chunk)) continue;
      const std::size_t nb = meta.nbytes();
      const std::byte* from =
          where == IpcWhere::region
              ? c.base[pl.index] + pl.offset
              : c.base[plan.slot_region] + (chunk % plan.num_slots) * plan.slot_stride + pl.offset;
      void* to = c.opt.destination ? c.opt.destination(meta) : nullptr;
      if (to)
        add_piece(pieces, static_cast<std::byte*>(to), from, nb);
      else
        views.push_back(TensorView{&meta, const_cast<std::byte*>(from), nb});
    }
    puller_->enqueue(pieces, stream_.get(), opt_);
    if (!views.empty()) c.load(std::span<const TensorView>(views), stream_.get());
  }

  void record_phases(const std::array<Clock::time_point, 6>& t, bool ok) {
    auto us = [](Clock::time_point a, Clock::time_point b) {
      return std::chrono::duration<double, std::micro>(b - a).count();
    };
    stats_.plan_us = us(t[0], t[1]);
    stats_.prepare_us = us(t[1], t[2]);
    stats_.enqueue_us = us(t[2], t[3]);
    stats_.wait_us = us(t[3], t[4]);
    stats_.status_us = us(t[4], t[5]);
    stats_.pull_device_us = ok ? TimedEvent::elapsed(pull_begin_, pull_end_).count() : 0.0;
  }

  //! Waits (bounded) for everything this side enqueued: the copy streams and the main stream, where
  //! load_weights enqueued its work. Used after a failure, before anything is reported.
  void drain(const TransferOptions& opt) {
    for (auto& cs : puller_->streams()) await_stream(cs.get(), opt, "ipc drain");
    await_stream(stream_.get(), opt, "ipc drain");
  }

  //! Waits (bounded) for the work enqueued on `s` so far.
  void await_stream(cudaStream_t s, const TransferOptions& opt, const char* phase) {
    sync_.record(s);
    await_event(sync_, opt, phase);
  }

  //! Waits for `e` within opt.timeout, watching the control channel; aborts on either failure.
  void await_event(const CudaEvent& e, const TransferOptions& opt, const char* phase) {
    detail::bounded_wait(
        [&] { return e.ready(); }, opt.timeout, [&] { channel().guarded([&] { ctrl_.check(); }); },
        [&] {
          const std::string what = detail::cat("device work not done within ", opt.timeout.count(),
                                               " ms (rank ", rank(), "); transport aborted");
          ctrl_.abort(std::string(phase) + ": " + what);
          throw timeout_error(phase, -1, what);
        });
  }

  IpcOptions opt_;
  int device_ = -1;
  detail::Placement here_;
  HostCommunicator ctrl_;
  CudaStream stream_;
  std::optional<detail::Puller> puller_;
  std::vector<CudaEvent> slot_done_;
  CudaEvent sync_;  // what await_stream waits on
  TimedEvent pull_begin_, pull_end_;
  IpcStats stats_;
  //! The plans of earlier rounds, for "same plan as round N".
  struct PlanCache {
    std::uint64_t round = 0;                  //!< full plans sent (producer) or received (consumer)
    std::string sent;                         //!< producer: the last full plan's bytes
    bool sent_ok = false;                     //!< producer: every rank succeeded with it
    std::uint64_t hash = 0;                   //!< consumer: hash of the last full plan's bytes
    std::optional<detail::IpcPlan> received;  //!< consumer: that plan, if accepted and pulled
  } plans_;
  detail::ExportCache exports_;  // producer
  DeviceBuffer slots_;           // producer: the staging ring
  DeviceBuffer assembly_;        // consumer, sharded syncs: tensors assembled for load_weights
  // consumer: declared last, so the mappings are closed before the streams go.
  detail::MappingCache mappings_;
};

}  // namespace weightsync
