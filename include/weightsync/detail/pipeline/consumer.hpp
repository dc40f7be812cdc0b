// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The consumer's schedule: post the receiving launches of up to K chunks ahead (into ring slot
//! c % K, or straight into the destinations), check each chunk's status frame, unpack into the
//! destinations on the slot's stream, and hand the rest to load_weights. After a failure (its own
//! or the producer's) it keeps the wire in step to the end of the plan without loading more.

#include <cstddef>
#include <exception>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "weightsync/detail/format.hpp"
#include "weightsync/detail/frame.hpp"
#include "weightsync/detail/pipeline/handshake.hpp"
#include "weightsync/detail/pipeline/run.hpp"
#include "weightsync/error.hpp"

namespace weightsync::detail {

template <class C, class F>
class ConsumerRun {
 public:
  ConsumerRun(C& comm, WorkspaceState<policy_t<C>>& ws, const TransferOptions& opt,
              std::span<const TensorMeta> metas, int root, F& load)
      : run_(comm, ws, opt, metas, root, Role::consumer), load_(load), remote_rank_(root) {}

  TransferStats operator()() {
    auto& ws = run_.ws;
    const std::size_t n = run_.plan.size();
    const std::size_t K = run_.slots();
    check_checksum_support(run_);
    bool reused = ws.ensure_frames(run_.status0() + (run_.plan.framed ? K : 0));
    ws.ensure_streams(K);
    // The handshake runs before any destination is asked for: a mismatch touches nothing, and the
    // communicator stays usable.
    id_ = run_.plan.framed ? handshake(run_) : 0;
    try {
      place_destinations();
      if (!run_.eager) reused = ws.ensure_slots(slot_bytes_needed(), K) && reused;
      run_.begin_data();
      if (run_.eager) {
        receive_eager();
      } else {
        std::size_t posted = 0;
        for (std::size_t c = 0; c < n; ++c) {
          while (posted < n && posted < c + K) post(posted++);
          receive(c);
          if (ok()) run_.chunk_done(c);
        }
      }
      run_.end_data();
      std::vector<Frame> acks;
      if (run_.plan.framed) acks = conclude(run_, id_, failure_);
      if (!run_.eager)  // (the eager bytes were unpacked on the communication stream)
        for (std::size_t k = 0; k < K; ++k) run_.await(ws.unpacked[k], "unpack");
      run_.drain("broadcast");
      for (const auto& a : acks)
        if (a.head.rank == run_.root && !a.ok() && remote_.empty())
          note_remote(a.text(), run_.root);
      if (run_.opt.all_or_nothing && ok())  // another consumer's failure is this rank's too
        for (const auto& a : acks)
          if (!a.ok() && a.head.rank != run_.comm.rank()) {
            note_remote(a.text(), a.head.rank);
            break;
          }
    } catch (...) {
      run_.abort_comm(failure_.empty() ? "consumer failed" : failure_);
      throw;
    }
    if (failure_ptr_) std::rethrow_exception(failure_ptr_);
    if (!remote_.empty())
      throw remote_error(remote_rank_,
                         remote_rank_ == run_.root
                             ? cat("the producer (rank ", remote_rank_, ") failed: ", remote_)
                             : cat("rank ", remote_rank_, " failed (all_or_nothing): ", remote_));
    return run_.stats(reused);
  }

 private:
  using Run = PipelineRun<C>;
  using stream_type = typename C::stream_type;

  bool in_place(std::size_t c) const { return region_dest_[c] != nullptr; }
  bool ok() const { return failure_.empty() && remote_.empty(); }
  void note_remote(std::string text, int rank) {
    remote_ = std::move(text);
    remote_rank_ = rank;
  }

  //! Asks for every destination; a region lands in place when its only tensor has one, or when
  //! every tensor of it has one and they lie back to back in the declared order.
  void place_destinations() {
    const auto& metas = run_.metas;
    const auto& plan = run_.plan;
    dest_.assign(metas.size(), nullptr);
    if (run_.opt.destination)
      for (std::size_t i = 0; i < metas.size(); ++i) dest_[i] = run_.opt.destination(metas[i]);
    region_dest_.assign(plan.size(), nullptr);
    for (std::size_t c = 0; c < plan.size(); ++c) {
      if (const auto solo = plan.regions[c].solo; solo != TransferPlan::npos) {
        region_dest_[c] = static_cast<std::byte*>(dest_[solo]);
        continue;
      }
      std::byte* first = nullptr;
      std::byte* next = nullptr;
      bool fits = plan.regions[c].bytes > 0;
      for (std::size_t i = plan.chunks[c].begin; i < plan.chunks[c].end && fits; ++i) {
        const std::size_t nb = metas[i].nbytes();
        if (plan.direct[i] || nb == 0) continue;
        auto* d = static_cast<std::byte*>(dest_[i]);
        fits = d != nullptr && (next == nullptr || d == next);
        if (!first) first = d;
        next = d + nb;
      }
      if (fits) region_dest_[c] = first;
    }
  }

  //! Slot layout of a chunk: the packed region first (unless in place), then the direct tensors
  //! that have no destination.
  std::size_t slot_bytes_needed() const {
    const auto& plan = run_.plan;
    std::size_t slot = 0;
    for (std::size_t c = 0; c < plan.size(); ++c) {
      std::size_t need = in_place(c) ? 0 : plan.regions[c].bytes;
      for (std::size_t i = plan.chunks[c].begin; i < plan.chunks[c].end; ++i)
        if (plan.direct[i] && !dest_[i]) need += run_.metas[i].nbytes();
      slot = std::max(slot, need);
    }
    return slot;
  }

  //! Enqueues the receiving launches of chunk c (the same launches the producer makes).
  void post(std::size_t c) {
    const Chunk& ch = run_.plan.chunks[c];
    if (ch.bytes == 0) return;
    auto& ws = run_.ws;
    auto& comm = run_.comm;
    const auto k = c % run_.slots();
    const auto cs = run_.comm_stream();
    const int root = run_.root;
    const auto& region = run_.plan.regions[c];
    auto* slot = ws.slots[k].data();
    const std::size_t st = run_.status0() + k;
    ws.policy.wait(cs, ws.unpacked[k]);  // the slot's previous chunk is loaded
    launch_chunk(
        run_, c,
        [&] {
          if (run_.plan.framed) comm.broadcast(run_.frame_dev(st), kFrameBytes, root, cs);
        },
        [&] {
          if (region.bytes > 0)
            comm.broadcast(in_place(c) ? region_dest_[c] : slot, region.bytes, root, cs);
        },
        [&] {
          std::size_t off = in_place(c) ? 0 : region.bytes;
          for (std::size_t i = ch.begin; i < ch.end; ++i) {
            if (!run_.plan.direct[i]) continue;
            const std::size_t nb = run_.metas[i].nbytes();
            comm.broadcast(dest_[i] ? dest_[i] : slot + off, nb, root, cs);
            if (!dest_[i]) off += nb;
          }
        },
        [&] {
          if (run_.plan.framed)
            ws.policy.copy_to_host(run_.frame_host(st), run_.frame_dev(st), kFrameBytes, cs);
          ws.policy.record(ws.received[k], cs);
        },
        [&] { ws.policy.record(ws.received2[k], cs); });
  }

  //! Checks chunk c's status frame: the producer's failure is noted, a foreign frame is fatal.
  void check_status(std::size_t c) {
    if (!run_.plan.framed) return;
    const Frame f = *run_.frame_host(run_.status0() + c % run_.slots());
    const int root = run_.root;
    if (f.head.magic != kFrameMagic || f.kind() != FrameKind::status || f.head.transfer_id != id_)
      throw protocol_error(root, cat("chunk ", c, ": the status frame from rank ", root,
                                     " is not this transfer's (desynchronised peers)"));
    if (!f.ok()) {
      if (remote_.empty()) note_remote(f.text(), f.head.rank);
    } else if (f.status.chunk != c) {
      throw protocol_error(root, cat("expected chunk ", c, " from rank ", root, ", got chunk ",
                                     f.status.chunk, " (desynchronised peers)"));
    }
  }

  //! Writes the region's tensors that have a destination (slot -> destination), on stream s.
  void scatter_region(std::size_t c, stream_type s) {
    const Chunk& ch = run_.plan.chunks[c];
    auto& ws = run_.ws;
    if (in_place(c) || run_.plan.regions[c].bytes == 0) return;
    auto* slot = ws.slots[c % run_.slots()].data();
    ws.clear_copies();
    std::size_t off = 0;
    for (std::size_t i = ch.begin; i < ch.end; ++i) {
      const std::size_t nb = run_.metas[i].nbytes();
      if (run_.plan.direct[i] || nb == 0) continue;
      if (dest_[i]) ws.add_copy(dest_[i], slot + off, nb);
      off += nb;
    }
    ws.flush_copies(s);
  }

  //! The views handed to load_weights: tensors without a destination.
  void build_views(std::size_t c) {
    const Chunk& ch = run_.plan.chunks[c];
    auto& ws = run_.ws;
    ws.views.clear();
    const bool placed = in_place(c);
    auto* slot = ws.slots[c % run_.slots()].data();
    std::size_t off = 0;
    std::size_t direct_off = placed ? 0 : run_.plan.regions[c].bytes;
    for (std::size_t i = ch.begin; i < ch.end; ++i) {
      const auto& meta = run_.metas[i];
      const std::size_t nb = meta.nbytes();
      if (run_.plan.direct[i]) {
        if (!dest_[i]) {
          ws.views.push_back(TensorView{&meta, slot + direct_off, nb});
          direct_off += nb;
        }
        continue;
      }
      if (!placed && nb) off += nb;
      if (dest_[i] || (placed && i == run_.plan.regions[c].solo)) continue;
      ws.views.push_back(TensorView{&meta, nb && !placed ? slot + off - nb : nullptr, nb});
    }
  }

  //! TransferOptions::checksum: hashes chunk c's tensors where they lie now (destination, slot) in
  //! the producer's order and compares with its status frame. Host memory only (see
  //! check_checksum_support). A mismatch is this rank's failure, reported in the acknowledgement.
  void verify(std::size_t c) {
    const Chunk& ch = run_.plan.chunks[c];
    const bool placed = in_place(c);
    const std::byte* slot = run_.ws.slots[c % run_.slots()].data();
    std::size_t off = 0, direct_off = placed ? 0 : run_.plan.regions[c].bytes;
    Hash64 h;
    for (std::size_t i = ch.begin; i < ch.end; ++i) {
      const std::size_t nb = run_.metas[i].nbytes();
      const auto* dest = static_cast<const std::byte*>(dest_[i]);
      const std::byte* p = nullptr;
      if (run_.plan.direct[i]) {
        p = dest ? dest : slot + direct_off;
        if (!dest) direct_off += nb;
      } else if (nb > 0) {
        p = dest ? dest : slot + off;
        if (!placed) off += nb;
      }
      if (nb > 0) h.bytes(p, nb);
    }
    const Frame f = *run_.frame_host(run_.status0() + c % run_.slots());
    if (h.value() == f.status.checksum) return;
    failure_ = cat("chunk ", c, " (tensors ", ch.begin, "..", ch.end - 1,
                   "): checksum mismatch: rank ", run_.root, " sent digest 0x", hex(f.status.checksum),
                   ", received bytes hash to 0x", hex(h.value()));
    failure_ptr_ = std::make_exception_ptr(protocol_error(run_.root, failure_));
  }
  static std::string hex(std::uint64_t v) {
    static const char* d = "0123456789abcdef";
    std::string s(16, '0');
    for (int i = 15; i >= 0; --i, v >>= 4) s[static_cast<std::size_t>(i)] = d[v & 15];
    return s;
  }

  //! The producer's bytes came with the handshake (kFrameEager), back to back in the declared order
  //! in its eager bytes: copies them to the destinations and hands the rest to load_weights, on
  //! the communication stream (whose final drain then covers them: one wait for the whole sync).
  void receive_eager() {
    const std::size_t cap = eager_capacity(run_.world());
    if (run_.plan.total_bytes > cap)
      throw protocol_error(run_.root, cat("rank ", run_.root, " sent ", run_.plan.total_bytes,
                                          " bytes with the handshake, where ", cap, " fit"));
    auto& ws = run_.ws;
    const auto s = run_.comm_stream();
    std::byte* from = run_.eager_dev(static_cast<std::size_t>(run_.root));
    ws.clear_copies();
    ws.views.clear();
    std::size_t off = 0;
    for (std::size_t i = 0; i < run_.metas.size(); ++i) {
      const std::size_t nb = run_.metas[i].nbytes();
      if (dest_[i]) {
        if (nb > 0) ws.add_copy(dest_[i], from + off, nb);
      } else {
        ws.views.push_back(TensorView{&run_.metas[i], nb > 0 ? from + off : nullptr, nb});
      }
      off += nb;
    }
    ws.flush_copies(s);
    call_load(0, s);
    if (ok())
      for (std::size_t c = 0; c < run_.plan.size(); ++c) run_.chunk_done(c);
  }

  //! Hands chunk c's views to load_weights; a failure is kept and reported in the acknowledgement.
  void load(std::size_t c, stream_type s) {
    build_views(c);
    call_load(c, s);
  }
  //! Hands the views in ws.views (chunk c's) to load_weights; a failure is kept and reported in
  //! the acknowledgement.
  void call_load(std::size_t c, stream_type s) {
    if (run_.ws.views.empty()) return;
    const auto t0 = Run::Clock::now();
    struct Timed {  // counts the time inside load_weights, also when it throws
      Run& run;
      typename Run::Clock::time_point t0;
      ~Timed() { run.load_time += Run::Clock::now() - t0; }
    } timed{run_, t0};
    try {
      std::invoke(load_, std::span<const TensorView>(run_.ws.views), s);
    } catch (const std::exception& e) {
      failure_ = cat("load_weights failed on chunk ", c, ": ", e.what());
      failure_ptr_ = std::current_exception();
    } catch (...) {
      failure_ = cat("load_weights failed on chunk ", c, " (not a std::exception)");
      failure_ptr_ = std::current_exception();
    }
    // vLLM's wire has no way to say so: abort, so that the producer does not wait on us.
    if (failure_ptr_ && !run_.plan.framed) std::rethrow_exception(failure_ptr_);
  }

  //! Waits for chunk c, unpacks it and loads it; then frees its slot.
  void receive(std::size_t c) {
    auto& ws = run_.ws;
    const auto k = c % run_.slots();
    const auto s = run_.slot_stream(k);
    const Split split = run_.plan.splits[c];
    if (run_.plan.chunks[c].bytes > 0) {
      run_.await(ws.received[k], "broadcast");
      check_status(c);
      const bool good = ok();
      ws.policy.wait(s, ws.received[k]);
      // The region arrived with the first launch: unpack it while the direct tensors arrive.
      if (good && split == Split::region_first) scatter_region(c, s);
      if (split != Split::none) {
        run_.await(ws.received2[k], "broadcast");
        ws.policy.wait(s, ws.received2[k]);
      }
      if (good && split != Split::region_first) scatter_region(c, s);
    }
    if (ok() && run_.opt.checksum && run_.plan.chunks[c].bytes > 0) verify(c);
    if (ok()) load(c, s);
    ws.policy.record(ws.unpacked[k], s);
  }

  Run run_;
  F& load_;
  std::uint64_t id_ = 0;
  std::vector<void*> dest_;
  std::vector<std::byte*> region_dest_;
  std::string failure_;  // our own failure (load_weights threw)
  std::exception_ptr failure_ptr_;
  std::string remote_;  // the producer's failure, from a status frame or its acknowledgement
  int remote_rank_;
};

}  // namespace weightsync::detail
