// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! IpcTransport: one end of an IPC transfer group (rank 0 produces, ranks 1.. consume). The
//! producer exports the allocations behind its tensors (ExportCache) and sends a plan (or "same
//! plan as round N", PlanSender); each consumer maps them once (MappingCache) and pulls with copy
//! engines (Puller). Memory that cannot be exported is staged (StagingRing). Control messages go
//! over a HostCommunicator (ControlMessages); every wait is one of the library's bounded waits
//! (IpcEndpoint).

#include "weightsync/config.hpp"
#if !WEIGHTSYNC_HAS_CUDA
#error "<weightsync/ipc/transport.hpp> needs the CUDA runtime (WEIGHTSYNC_HAS_CUDA=0)"
#endif

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "weightsync/concepts.hpp"
#include "weightsync/cuda/check.hpp"
#include "weightsync/cuda/event.hpp"
#include "weightsync/detail/format.hpp"
#include "weightsync/detail/frame.hpp"
#include "weightsync/error.hpp"
#include "weightsync/host/communicator.hpp"
#include "weightsync/ipc/detail/checksum.hpp"
#include "weightsync/ipc/detail/control_messages.hpp"
#include "weightsync/ipc/detail/endpoint.hpp"
#include "weightsync/ipc/detail/plan.hpp"
#include "weightsync/ipc/detail/plan_cache.hpp"
#include "weightsync/ipc/detail/sharded_sync.hpp"
#include "weightsync/ipc/detail/staging.hpp"
#include "weightsync/sealed_metadata.hpp"
#include "weightsync/shard.hpp"
#include "weightsync/tensor_meta.hpp"
#include "weightsync/transfer_options.hpp"
#include "weightsync/tuning.hpp"

namespace weightsync {

//! One end of an IPC transfer group: rank 0 produces, ranks 1.. consume (or, sharded, trainer
//! ranks 0..M-1 produce). Move-only; owns its control connections, streams, slots and mappings.
//! Models ShardedTransport (engine/transport.hpp): the "ipc" and "p2p" backends are
//! TransportBackend<IpcTransport> (ipc/backend.hpp).
class IpcTransport {
 public:
  using stream_type = cudaStream_t;
  using LoadFn = detail::IpcLoadFn;

  //! Joins the group (the rendezvous of HostCommunicator) on CUDA device `device` (-1: current).
  IpcTransport(const RendezvousOptions& rv, int device, IpcOptions opt,
               std::chrono::milliseconds op_timeout)
      : ep_(rv, device, opt, op_timeout),
        follower_(ep_.device),
        digests_(ep_.device),
        pull_begin_(ep_.device),
        pull_end_(ep_.device) {}
  IpcTransport(IpcTransport&&) noexcept = default;
  //! Waits for this end's copies before its slots, events and mappings go.
  ~IpcTransport() {
    ep_.quiesce();
    digests_.quiesce();
  }
  //! Not assignable: replacing a transport must drain its streams first (destroy it, then make
  //! one).
  IpcTransport& operator=(IpcTransport&&) = delete;
  //! Closes every mapping (each exactly once). Also done by the destructor.
  void close_mappings() noexcept { ep_.mappings.clear(ep_.stats); }

  int rank() const noexcept { return ep_.rank(); }
  int size() const noexcept { return ep_.size(); }
  int device() const noexcept { return ep_.device; }
  bool healthy() const noexcept { return !ep_.ctrl.aborted(); }
  void check() { ep_.ctrl.check(); }
  void abort(const std::string& why) noexcept { ep_.ctrl.abort(why); }
  const IpcStats& stats() const noexcept { return ep_.stats; }
  //! Whether the per-sync messages go through the shared-memory mailbox (decided at the first
  //! whole-tensor sync; see IpcOptions::shared_memory_control).
  bool shared_memory_control_active() const noexcept { return ep_.mailbox_active(); }
  //! The settings; may be changed between transfers (same_gpu only before the first).
  IpcOptions& options() noexcept { return ep_.opt; }
  HostCommunicator& control() noexcept { return ep_.ctrl; }
  //! What this end holds, for the sharded syncs (ipc/sharded.hpp). Internal.
  detail::IpcEndpoint& endpoint() noexcept { return ep_; }

  //! Rank 0: offers `metas.size()` tensors from `items` (device memory of this process, in the
  //! declared order) to every consumer, and returns once every consumer has pulled them. The
  //! bytes must stay unchanged until then. Every wait is bounded by opt.timeout, consumers'
  //! load_weights included. Same errors as packed_broadcast_producer: a wrong item is a
  //! config_error here and a remote_error on every consumer, and the transport stays usable; a
  //! consumer's failure is a remote_error (protocol_error for a mismatch) naming its rank; any
  //! other failure aborts the transport so that no peer waits for us.
  template <TensorIterator R>
  TransferStats send(std::span<const TensorMeta> metas, R&& items, const TransferOptions& opt) {
    return send_on(metas, nullptr, items, opt);
  }
  //! As above, for a list that cannot change: its digest is not computed again (SealedMetadata).
  template <TensorIterator R>
  TransferStats send(const SealedMetadata& metas, R&& items, const TransferOptions& opt) {
    return send_on(metas.metas(), &metas, items, opt);
  }

  //! Trainer rank (0..trainers-1) of a sharded sync: offers this rank's pieces (see
  //! <weightsync/ipc/sharded.hpp> for what `items` yields) and returns once every consumer
  //! has pulled everything. Same errors as send.
  template <TensorIterator R>
  TransferStats send_shards(std::span<const TensorMeta> metas, std::span<const ShardSpec> specs,
                            int trainers, R&& items, const TransferOptions& opt) {
    return detail::send_shards_on(ep_, metas, specs, trainers, std::forward<R>(items), opt);
  }
  //! Inference rank (trainers..) of a sharded sync: pulls every piece from the trainer rank
  //! holding it (see <weightsync/ipc/sharded.hpp>). Same errors as receive.
  TransferStats receive_shards(std::span<const TensorMeta> metas, std::span<const ShardSpec> specs,
                               int trainers, const TransferOptions& opt, const LoadFn& load) {
    return detail::receive_shards_on(ep_, metas, specs, trainers, opt, load);
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
    return receive_on(metas, nullptr, opt, load);
  }
  //! As above, for a list that cannot change: its digest is not computed again (SealedMetadata).
  TransferStats receive(const SealedMetadata& metas, const TransferOptions& opt,
                        const LoadFn& load) {
    return receive_on(metas.metas(), &metas, opt, load);
  }

 private:
  template <class R>
  TransferStats send_on(std::span<const TensorMeta> metas, const SealedMetadata* sealed, R& items,
                        const TransferOptions& opt) {
    using namespace detail;
    if (rank() != 0)
      throw config_error("root", cat("the producer must be rank 0, this is rank ", rank()));
    ep_.begin(opt);
    CurrentDeviceGuard g(ep_.device);
    AbortOnThrow abort_on_throw(ep_.ctrl, "ipc producer failed");
    ep_.begin_round();
    Phases t;
    IpcPlan plan = ep_.plan_header(
        metas.size(), sealed ? MetadataSummary{sealed->digest(), sealed->total_bytes()}
                             : ep_.digests.of(metas));
    plan.flags = plan_flags(opt);
    std::vector<const std::byte*>& src = sources_;
    std::exception_ptr failure;  // the items were wrong: said in the plan, rethrown at the end
    bool same_src = false;       // the last plan's sources again
    try {
      same_src = collect_sources(metas, items, src, last_.src);
    } catch (...) {
      failure = std::current_exception();
      plan.error = what_of(failure).substr(0, IpcPlan::kErrorBytes);
      // The consumers tell a failed producer by a non-empty error: never send an empty one.
      if (plan.error.empty()) plan.error = "the producer's items failed (no message)";
    }
    t.mark();
    // The producer's earlier work on the weights must be complete before a consumer reads them.
    ep_.await_source(opt);
    t.mark();
    // The last round's plan again: the same tensors at the same addresses in the same allocations,
    // with the same options and flags (checksums included), after a round that succeeded.
    const bool same_sources = !failure && sent_.reusable() &&
                              last_.same(plan.digest, same_src, ep_.opt, opt) &&
                              last_.flags == plan.flags;
    // Checksums: the sources' digests run beside the consumers' pulls (they read the same memory).
    // A failure to start them (no kernel, no memory, a source the kernel cannot read) fails this
    // sync for every rank through the plan, like a wrong item. Sources of the last round's plan
    // were found readable then (checksums were on: the flags are the same) and are not asked again
    // (a driver query per tensor: ~200 us for dense8b's 399, run 67).
    if (!failure && (plan.flags & kIpcPlanChecksum)) {
      try {
        digests_.start_sources(metas, src, /*checked=*/same_sources);
      } catch (...) {
        failure = std::current_exception();
        plan.error = cat("ipc checksums: ", what_of(failure)).substr(0, IpcPlan::kErrorBytes);
        digests_.quiesce();
      }
    }
    const bool same = same_sources && !failure;
    if (!failure && !same) {
      place_tensors(metas, src, plan, opt);
      ep_.stats.regions = plan.regions.size();
      ep_.exports.prune(plan);
      last_.remember(plan, src, ep_, opt);
      last_.flags = plan.flags;
    }
    t.mark();
    if (same)
      sent_.resend(ep_);
    else
      sent_.send(ep_, plan);
    t.mark();
    if (!failure) staging_.run(ep_, src, opt);
    if (!failure && (plan.flags & kIpcPlanChecksum)) {
      ep_.await_event(digests_.done(), opt, "ipc checksum");
      ep_.channel().guarded([&] { ep_.channel().send_blob(digests_.blob()); });
    }
    t.mark();
    const auto outcomes = ep_.gather_outcomes(FrameCode::ok, "");
    if (!failure && (plan.flags & kIpcPlanVote)) send_verdict(outcomes);
    t.mark();
    sent_.outcome(!failure && std::all_of(outcomes.begin(), outcomes.end(),
                                          [](const auto& o) { return o.ok(); }));
    abort_on_throw.disarm();  // in step with every consumer: what follows leaves the channel usable
    t.store(ep_.stats.check_us, ep_.stats.source_us, ep_.stats.place_us, ep_.stats.send_plan_us,
            ep_.stats.staging_us, ep_.stats.outcomes_us);
    if (failure) std::rethrow_exception(failure);
    ep_.channel().raise_first(outcomes);
    TransferStats st;
    st.tensors = metas.size();
    st.chunks = staging_.chunks();
    st.bytes = plan.total_bytes;
    st.slot_bytes = staging_.stride();
    st.ring_bytes = staging_.bytes_held();
    return st;
  }

  TransferStats receive_on(std::span<const TensorMeta> metas, const SealedMetadata* sealed,
                           const TransferOptions& opt, const LoadFn& load) {
    using namespace detail;
    if (rank() == 0)
      throw config_error("root", "the consumer must not run on rank 0 (the producer)");
    ep_.begin(opt);
    CurrentDeviceGuard g(ep_.device);
    AbortOnThrow abort_on_throw(ep_.ctrl, "ipc consumer failed");
    ep_.begin_round();
    Phases t;
    // Our side of the check, while the producer prepares its plan (off the critical path).
    const std::uint64_t digest = sealed ? sealed->digest() : ep_.digests.of(metas).digest;
    // Each tensor's byte count, asked of the metadata only when it changes (the copies below
    // would read every shape again, cold, on every sync).
    if (!sizes_of_ || *sizes_of_ != digest || sizes_.size() != metas.size()) {
      sizes_of_.reset();
      sizes_.resize(metas.size());
      for (std::size_t i = 0; i < metas.size(); ++i) sizes_[i] = metas[i].nbytes();
      sizes_of_ = digest;
    }
    // And the copies as last round's plan makes them: a plan is usually the same from round to
    // round, and they are used only if the producer names that very plan again.
    Prebuilt pre;
    if (const auto* last = received_.last(); last && last->metas_digest == digest) {
      try {
        collect(last->plan, last->base, metas, sizes_, opt, IpcWhere::region, 0, pre.pieces,
                pre.views, pre.spans, ep_.opt.checksum_copy);
        pre.of = last;
        pre.valid = true;
        pre.again = ep_.puller->same_as_last(pre.pieces, ep_.opt);
      } catch (...) {  // pull() meets it again, where it becomes this transfer's failure
      }
    }
    t.mark();
    // An unreadable plan leaves us unable to follow the hand-offs: the guard aborts the transport.
    const PlanReceiver::Accepted* reused = nullptr;
    Consume c(metas, opt, load, received_.receive(ep_, reused));
    c.digest = digest;
    t.mark();
    accept_plan(c, reused);
    t.mark();
    c.checks = c.plan.error.empty() && (c.plan.flags & kIpcPlanChecksum) != 0;
    if (c.ok() && c.checks) c.attempt([&] { digests_.begin(metas.size(), ep_.stream.get()); });
    // (The device time of the pulls: on one sync in Tuning::Ipc::time_pulls_every.)
    const bool timed = c.ok() && pulls_++ % Tuning::Ipc::time_pulls_every == 0;
    if (c.ok()) {
      if (timed) pull_begin_.record(ep_.stream.get());
      c.attempt([&] {
        if (pre.valid && reused != nullptr && reused == pre.of)
          issue(c, pre.pieces, pre.views, pre.spans, pre.again);
        else
          pull(c, IpcWhere::region, 0);
      });
      pull_end_.record(ep_.stream.get());
    }
    follower_.run(
        ep_, c.plan, opt, [&] { return c.ok(); },
        [&](std::size_t chunk) { c.attempt([&] { pull(c, IpcWhere::staged, chunk); }); });
    if (c.ok() && c.checks) c.attempt([&] { digests_.end(ep_.stream.get()); });
    t.mark();
    if (c.ok() && c.plan.num_chunks == 0 && !c.checks && !ep_.opt.blocking_waits)
      ep_.await_event(pull_end_, opt, "ipc pull");  // the last work on the stream: one record less
    else if (c.ok())
      ep_.await_stream(ep_.stream.get(), opt, "ipc pull");
    else
      ep_.drain(opt);  // nothing of ours may still run when the caller gets the error
    if (c.checks) {
      // The producer's digests follow the pulls whatever happened here (the channel stays in
      // step); compared before this side reports its outcome.
      std::string theirs;
      ep_.channel().guarded([&] {
        const std::uint64_t n = std::max<std::uint64_t>(
            metas.size(), std::min<std::uint64_t>(c.plan.num_tensors, std::uint64_t{1} << 24));
        theirs = ep_.channel().receive_blob(n * sizeof(std::uint64_t), "ipc checksums");
      });
      if (c.ok()) c.attempt([&] { digests_.compare(theirs, metas); });
    }
    t.mark();
    const auto outcomes = ep_.gather_outcomes(c.code, c.why);
    if (c.plan.error.empty() && (c.plan.flags & kIpcPlanVote)) receive_verdict(c, opt);
    (void)outcomes;
    t.mark();
    abort_on_throw.disarm();  // in step with the producer: what follows leaves the channel usable
    finish(c);  // (first: the plan lent for this round goes back before anything can throw)
    auto& s = ep_.stats;
    t.store(s.ahead_us, s.plan_us, s.prepare_us, s.enqueue_us, s.wait_us, s.status_us);
    if (!c.ok())
      s.pull_device_us = 0.0;
    else if (timed)
      s.pull_device_us = TimedEvent::elapsed(pull_begin_, pull_end_).count();
    // Only the producer's failure (in the plan) and our own are ours to throw; another consumer's
    // failure is the producer's business.
    if (c.failure) std::rethrow_exception(c.failure);
    if (c.remote) std::rethrow_exception(c.remote);
    TransferStats st;
    st.tensors = metas.size();
    st.chunks = c.plan.num_chunks;
    st.bytes = c.plan.total_bytes;
    st.slot_bytes = c.plan.slot_stride;
    return st;
  }

  using Clock = std::chrono::steady_clock;

  //! Host time between the marks of one transfer, in microseconds.
  struct Phases {
    std::array<Clock::time_point, 7> at{Clock::now()};
    std::size_t n = 1;
    void mark() { at[n++] = Clock::now(); }
    template <class... D>
    void store(D&... out) const {
      std::size_t i = 0;
      ((out = std::chrono::duration<double, std::micro>(at[i + 1] - at[i]).count(), ++i), ...);
    }
  };

  //! Producer: what the last plan was made from. The same tensors at the same addresses, in the
  //! same allocations, with the same options make the same plan: it is neither rebuilt nor encoded.
  struct LastSources {
    std::uint64_t digest = 0;
    std::uint8_t flags = 0;  // IpcPlan::flags
    std::vector<const std::byte*> src;
    bool export_sources = true;
    std::size_t buffer_size = 0;
    int num_buffers = 0;
    std::vector<std::pair<const std::byte*, std::uint64_t>> allocations;  // base, buffer id

    void remember(const detail::IpcPlan& plan, const std::vector<const std::byte*>& s,
                  const detail::IpcEndpoint& ep, const TransferOptions& opt) {
      digest = plan.digest;
      src = s;
      export_sources = ep.opt.export_sources;
      buffer_size = opt.buffer_size_bytes;
      num_buffers = opt.num_buffers;
      allocations.clear();
      for (std::size_t r = 0; r < plan.regions.size(); ++r)
        allocations.emplace_back(ep.exports.base(r), plan.regions[r].buffer_id);
    }
    //! `same_src`: this sync's sources are `src` (collect_sources compared them). One driver query
    //! per allocation: memory freed and allocated again at the same address is another allocation
    //! (another buffer id; ids are not reused, so the id alone tells).
    bool same(std::uint64_t d, bool same_src, const IpcOptions& io,
              const TransferOptions& opt) const {
      if (d != digest || !same_src || io.export_sources != export_sources ||
          opt.buffer_size_bytes != buffer_size || opt.num_buffers != num_buffers)
        return false;
      for (const auto& [base, id] : allocations)
        if (detail::buffer_id_at(base) != id) return false;
      return true;
    }
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
    std::uint64_t digest = 0;
    std::vector<std::byte*> base;
    std::size_t staged = 0;
    detail::FrameCode code = detail::FrameCode::ok;
    std::string why;
    std::exception_ptr failure;
    bool checks = false;         // the plan's kIpcPlanChecksum (and no producer error)
    std::exception_ptr remote;  // all_or_nothing: another consumer's failure (the verdict)

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

  //! The items' bytes into `src`, each checked against its metadata; whether they are `last`'s
  //! (found in the same pass).
  template <class R>
  static bool collect_sources(std::span<const TensorMeta> metas, R& items,
                              std::vector<const std::byte*>& src,
                              const std::vector<const std::byte*>& last) {
    src.assign(metas.size(), nullptr);
    bool same = last.size() == metas.size();
    std::size_t i = 0;
    for (auto&& item : items) {
      if (i == metas.size()) throw detail::too_many_items(metas.size());
      src[i] = static_cast<const std::byte*>(detail::checked_source(item, metas[i], i));
      same = same && src[i] == last[i];
      ++i;
    }
    if (i != metas.size()) throw detail::too_few_items(i, metas.size());
    return same;
  }

  //! Every tensor in an exported allocation, or else staged (laid out in the ring).
  void place_tensors(std::span<const TensorMeta> metas, std::span<const std::byte* const> src,
                     detail::IpcPlan& plan, const TransferOptions& opt) {
    using detail::IpcWhere;
    ep_.exports.begin();
    plan.places.resize(metas.size());
    std::vector<std::size_t> staged;
    for (std::size_t i = 0; i < metas.size(); ++i) {
      const std::size_t nb = metas[i].nbytes();
      if (nb == 0) continue;
      std::optional<std::size_t> r;
      if (ep_.opt.export_sources) r = ep_.exports.region(src[i], nb, plan, ep_.stats);
      auto& pl = plan.places[i];
      if (r) {
        pl.where = IpcWhere::region;
        pl.index = *r;
        pl.offset = static_cast<std::uint64_t>(src[i] - ep_.exports.base(*r));
      } else {
        pl.where = IpcWhere::staged;
        staged.push_back(i);
      }
    }
    staging_.layout(ep_, plan, metas, staged, opt);
    ep_.stats.staged = staged.size();
  }

  //! Checks the producer's plan against this consumer (placement, metadata, bounds) and maps it;
  //! a plan accepted in the last round (`reused`) against the same metadata needs neither again.
  void accept_plan(Consume& c, const detail::PlanReceiver::Accepted* reused) {
    c.attempt([&] {
      using namespace detail;
      if (!c.plan.error.empty()) throw remote_error(0, c.plan.error);
      if (((c.plan.flags & kIpcPlanChecksum) != 0) != c.opt.checksum)
        throw protocol_error(0, cat("ipc handshake: checksum differs: rank 0 has ",
                                    c.plan.flags & kIpcPlanChecksum ? "on" : "off", ", rank ",
                                    rank(), " has ", c.opt.checksum ? "on" : "off"));
      if (c.opt.all_or_nothing && size() > 2 && !(c.plan.flags & kIpcPlanVote))
        throw protocol_error(0, cat("ipc handshake: all_or_nothing with ", size() - 1,
                                    " consumers needs the producer's verdict: give the trainer "
                                    "Acknowledge::each_transfer"));
      if (reused && reused->metas_digest == c.digest) {
        c.base = reused->base;
        c.staged = reused->staged;
        ep_.stats.staged = c.staged;
        return;
      }
      check_placement(c.plan, ep_.here, ep_.opt.same_gpu, ep_.device);
      if (c.plan.digest != c.digest || c.plan.num_tensors != c.metas.size())
        throw protocol_error(
            0, cat("ipc handshake: the producer's tensors (", c.plan.num_tensors, ", digest ",
                   c.plan.digest, ") differ from this consumer's (", c.metas.size(), ", digest ",
                   c.digest, "): names, dtypes or shapes do not match"));
      std::size_t total = 0;
      for (const auto& m : c.metas) total += m.nbytes();
      if (total != c.plan.total_bytes)
        throw protocol_error(
            0, cat("ipc handshake: ", c.plan.total_bytes, " bytes offered, ", total, " expected"));
      c.base = ep_.mappings.map(c.plan, ep_.stats);
      c.staged = check_places(c.plan, c.metas);
      ep_.stats.staged = c.staged;
    });
  }

  //! After the outcomes: mappings the plan no longer names are closed (memory the producer freed
  //! or replaced), and only a plan this side accepted and pulled from may be named again.
  void finish(Consume& c) {
    if (c.plan.error.empty() && c.ok()) ep_.mappings.prune(c.plan, ep_.stats);
    if (c.ok())
      received_.keep({std::move(c.plan), c.digest, std::move(c.base), c.staged});
    else
      received_.forget();
  }

  //! The copies prepared while the plan was on its way (see receive).
  struct Prebuilt {
    bool valid = false;
    const detail::PlanReceiver::Accepted* of = nullptr;  // the plan they were made from
    std::vector<detail::CopyPiece> pieces;
    std::vector<TensorView> views;
    std::vector<detail::DigestSpan> spans;
    std::uint64_t again = 0;  // `pieces` are the puller's last batch (its number): run it again
  };

  //! The copies and the views of the tensors at `where` (chunk `chunk` when staged), for `plan`
  //! mapped at `base`; `sizes`: each tensor's nbytes(). Asks opt.destination for each tensor.
  static void collect(const detail::IpcPlan& plan, const std::vector<std::byte*>& base,
                      std::span<const TensorMeta> metas, std::span<const std::size_t> sizes,
                      const TransferOptions& opt,
                      detail::IpcWhere where, std::size_t chunk,
                      std::vector<detail::CopyPiece>& pieces, std::vector<TensorView>& views,
                      std::vector<detail::DigestSpan>& spans, bool checksum_copy) {
    // Checksums on one GPU: the digest kernel copies what it digests (IpcOptions::checksum_copy).
    const bool fuse = (plan.flags & detail::kIpcPlanChecksum) && plan.same_gpu && checksum_copy;
    using namespace detail;
    for (std::size_t i = 0; i < metas.size(); ++i) {
      const auto& pl = plan.places[i];
      const auto& meta = metas[i];
      if (pl.where == IpcWhere::empty && where == IpcWhere::region) {
        // Zero-size tensors: nothing to copy; without a destination the loader still sees them.
        if (!(opt.destination && opt.destination(meta)))
          views.push_back(TensorView{&meta, nullptr, 0});
        continue;
      }
      if (pl.where != where || (where == IpcWhere::staged && pl.index != chunk)) continue;
      const std::size_t nb = sizes[i];
      const std::byte* from =
          where == IpcWhere::region
              ? base[pl.index] + pl.offset
              : base[plan.slot_region] + (chunk % plan.num_slots) * plan.slot_stride + pl.offset;
      void* to = opt.destination ? opt.destination(meta) : nullptr;
      if (to && fuse) {  // copied and digested in one read
        spans.push_back(DigestSpan{from, nb, 0, static_cast<std::uint32_t>(i), to});
        continue;
      }
      if (to)
        add_piece(pieces, static_cast<std::byte*>(to), from, nb);
      else
        views.push_back(TensorView{&meta, const_cast<std::byte*>(from), nb});
      // where the tensor ends up on this side, for the checksums (plan.flags)
      if (plan.flags & kIpcPlanChecksum)
        spans.push_back(DigestSpan{to ? static_cast<const void*>(to) : from, nb, 0,
                                   static_cast<std::uint32_t>(i)});
    }
  }

  //! Enqueues the copies (or load calls) of the tensors at `where` (chunk `chunk` when staged).
  void pull(Consume& c, detail::IpcWhere where, std::size_t chunk) {
    std::vector<detail::CopyPiece> pieces;
    std::vector<TensorView> views;
    std::vector<detail::DigestSpan> spans;
    collect(c.plan, c.base, c.metas, sizes_, c.opt, where, chunk, pieces, views, spans,
            ep_.opt.checksum_copy);
    issue(c, pieces, views, spans);
  }
  //! Enqueues the copies, hands the views to load_weights, then (checksums) digests every tensor
  //! where it ended up, behind both on the stream (a staged view before its slot is handed back).
  //! `again`: the pieces are the puller's last batch (Puller::same_as_last's number for it),
  //! which it relaunches without a list while it can.
  void issue(Consume& c, const std::vector<detail::CopyPiece>& pieces,
             const std::vector<TensorView>& views, const std::vector<detail::DigestSpan>& spans,
             std::uint64_t again = 0) {
    if (ep_.puller->enqueue_again(again, ep_.stream.get()))
      ++ep_.stats.pulls_repeated;
    else
      ep_.puller->enqueue(pieces, ep_.stream.get(), ep_.opt);
    if (!views.empty()) c.load(std::span<const TensorView>(views), ep_.stream.get());
    // (some spans also copy into their destination: IpcOptions::checksum_copy)
    if (c.checks && c.ok()) digests_.add(spans, ep_.stream.get());
  }

  //! The plan's flags for these options: checksums, and the verdict after the outcomes when
  //! several consumers must learn each other's (Acknowledge::each_transfer).
  std::uint8_t plan_flags(const TransferOptions& opt) const {
    std::uint8_t f = 0;
    if (opt.checksum) f |= detail::kIpcPlanChecksum;
    if (opt.acknowledge == Acknowledge::each_transfer && size() > 2) f |= detail::kIpcPlanVote;
    return f;
  }
  //! Producer (kIpcPlanVote): every consumer learns the first consumer that failed, if any.
  void send_verdict(const std::vector<detail::ControlMessages::Outcome>& outcomes) {
    detail::IpcVerdict v;
    for (int r = 1; r < size() && v.first < 0; ++r)
      if (!outcomes[static_cast<std::size_t>(r)].ok()) {
        v.first = r;
        v.text = outcomes[static_cast<std::size_t>(r)].text;
      }
    ep_.channel().guarded([&] { ep_.channel().send_blob(v.encode()); });
  }
  //! Consumer (kIpcPlanVote): the producer's verdict; with all_or_nothing, another consumer's
  //! failure is this one's too.
  void receive_verdict(Consume& c, const TransferOptions& opt) {
    std::string v;
    ep_.channel().guarded([&] { v = ep_.channel().receive_blob(detail::IpcVerdict::kMaxBytes, "ipc verdict"); });
    const auto verdict = detail::IpcVerdict::decode(v, size());
    const int first = verdict.first;
    if (first < 0 || first == rank() || !c.ok() || !opt.all_or_nothing) return;
    c.remote = std::make_exception_ptr(
        remote_error(first, detail::cat("rank ", first, " failed (all_or_nothing): ", verdict.text)));
  }

  detail::IpcEndpoint ep_;
  detail::PlanSender sent_;           // producer
  LastSources last_;                  // producer
  std::vector<const std::byte*> sources_;  // producer: this sync's items' bytes
  detail::StagingRing staging_;       // producer
  detail::PlanReceiver received_;     // consumer
  std::vector<std::size_t> sizes_;    // consumer: each tensor's nbytes(), of metadata *sizes_of_
  std::optional<std::uint64_t> sizes_of_;
  detail::StagingFollower follower_;  // consumer
  detail::IpcDigests digests_;        // TransferOptions::checksum
  TimedEvent pull_begin_, pull_end_;  // consumer: the device time of the pulls
  std::uint64_t pulls_ = 0;           // consumer: syncs that pulled (pull_end_ ends each)
};

}  // namespace weightsync
