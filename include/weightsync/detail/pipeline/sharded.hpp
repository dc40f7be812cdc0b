// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The schedule of a sharded transfer, one class for both roles. Step s is one launch holding, for
//! every trainer rank r that has a chunk s, r's status frame and r's packed region, broadcast from
//! r; every rank takes part in every broadcast. A trainer packs its own region into its place in
//! ring slot s % K (or sends a lone piece from its own memory) and receives the other roots'
//! regions into their places (and drops them). A worker receives every region into the slot (a
//! lone contiguous piece with a destination straight into it), then copies each piece to its place
//! in the full tensor (blocks x block_bytes every pitch, one entry per block in the policy's
//! batched copy), and hands tensors without a destination to load_weights once their last piece
//! has landed: a one-piece tensor as a view of the slot, a split one assembled in the workspace.
//! After a failure the wire stays in step to the end of the plan, as in the unsharded pipeline.

#include <cstddef>
#include <exception>
#include <functional>
#include <iterator>
#include <optional>
#include <ranges>
#include <span>
#include <string>
#include <vector>

#include "weightsync/detail/format.hpp"
#include "weightsync/detail/frame.hpp"
#include "weightsync/detail/pipeline/handshake.hpp"
#include "weightsync/detail/pipeline/run.hpp"
#include "weightsync/detail/pipeline/sharded_plan.hpp"
#include "weightsync/error.hpp"
#include "weightsync/shard.hpp"

namespace weightsync::detail {

//! The root PipelineRun is built with: this rank when it is a trainer, else 0. Checks the roles.
template <class C>
int sharded_root(const C& comm, int trainers, bool producer, const TransferOptions& opt) {
  if (opt.protocol != Protocol::weightsync)
    throw config_error("protocol",
                       "sharded transfers need Protocol::weightsync (vLLM's wire has "
                       "one sender)");
  if (trainers < 1 || trainers >= comm.size())
    throw config_error("trainers", cat("must be in 1..", comm.size() - 1, " (the group has ",
                                       comm.size(), " ranks), got ", trainers));
  const int rank = comm.rank();
  if (producer && rank >= trainers)
    throw config_error("trainers", cat("the producer runs on trainer ranks 0..", trainers - 1,
                                       "; this is rank ", rank));
  if (!producer && rank < trainers)
    throw config_error("trainers", cat("the consumer must not run on a trainer rank (0..",
                                       trainers - 1, "); this is rank ", rank));
  return producer ? rank : 0;
}

template <class C, class R, class F>
class ShardedRun {
 public:
  using Run = PipelineRun<C>;
  using stream_type = typename C::stream_type;

  //! A producer (items set, load null) or a consumer (items null, load set).
  ShardedRun(C& comm, WorkspaceState<policy_t<C>>& ws, const TransferOptions& opt,
             std::span<const TensorMeta> metas, std::span<const ShardSpec> specs, int trainers,
             R* items, F* load)
      : run_(comm, ws, opt, metas, sharded_root(comm, trainers, items != nullptr, opt),
             items ? Role::producer : Role::consumer),
        plan_(metas, specs, trainers, opt),
        me_(comm.rank()),
        load_(load) {
    if (items) {
      it_.emplace(std::ranges::begin(*items));
      end_.emplace(std::ranges::end(*items));
    }
    ws.reserve_lists(plan_.max_chunk_pieces());
    sources_.reserve(plan_.max_chunk_pieces());
    if (opt.checksum)
      throw config_error("checksum", "sharded transfers do not carry checksums yet (TODO)");
  }

  TransferStats operator()() {
    auto& ws = run_.ws;
    const std::size_t S = plan_.steps, K = run_.slots();
    bool reused = ws.ensure_frames(run_.status0() + K * m());
    reused = ws.ensure_slots(plan_.slot_bytes, K) && reused;
    if (producer()) run_.order_after_source();
    // A mismatch throws the same protocol_error on every rank; the communicator stays usable.
    id_ = handshake(run_, Sharding{plan_.trainers, plan_.digest});
    std::vector<Frame> acks;
    try {
      run_.begin_data(false);
      if (!producer()) place_destinations();
      std::size_t posted = 0;
      for (std::size_t s = 0; s < S; ++s) {
        while (posted < S && posted < s + K) post(posted++);
        finish(s);
      }
      if (producer() && failure_.empty() && *it_ != *end_)
        fail(std::make_exception_ptr(too_many_items(consumed_)));
      run_.end_data_quietly();
      acks = conclude(run_, id_, failure_);
      for (std::size_t k = 0; k < K; ++k) run_.await(ws.unpacked[k], "unpack");
      run_.drain("broadcast");
    } catch (const std::exception& e) {
      run_.abort_comm(e.what());  // a peer may be waiting on us: fail fast on every rank
      throw;
    }
    if (failure_ptr_) std::rethrow_exception(failure_ptr_);
    if (!remote_.empty())
      throw remote_error(remote_rank_, cat("trainer rank ", remote_rank_, " failed: ", remote_));
    for (const auto& a : acks)
      if (!a.ok() && a.head.rank != me_ &&
          (producer() || a.head.rank < m() || run_.opt.all_or_nothing))
        throw remote_error(a.head.rank, cat("rank ", a.head.rank, " failed: ", a.text()));
    auto st = run_.stats(reused);
    st.chunks = plan_.total_chunks;
    return st;
  }

 private:
  using byte = std::byte;
  static constexpr std::size_t npos = ShardedPlan::npos;

  bool producer() const { return run_.role == Role::producer; }
  int m() const { return plan_.trainers; }
  bool ok() const { return failure_.empty() && remote_.empty(); }
  std::size_t status_index(std::size_t k, int r) const {
    return run_.status0() + k * static_cast<std::size_t>(m()) + static_cast<std::size_t>(r);
  }
  byte* slot(std::size_t s) {
    return run_.ws.slots.empty() ? nullptr : run_.ws.slots[s % run_.slots()].data();
  }
  stream_type unpack_stream() { return run_.slot_stream(0); }

  void fail(std::exception_ptr p) {
    failure_ptr_ = p;
    failure_ = what_of(p);
  }

  //! Consumer: every destination, and the workspace offsets of split tensors without one.
  void place_destinations() {
    const auto& metas = run_.metas;
    dest_.assign(metas.size(), nullptr);
    if (run_.opt.destination)
      for (std::size_t i = 0; i < metas.size(); ++i)
        dest_[i] = static_cast<byte*>(run_.opt.destination(metas[i]));
    const std::size_t need = place_assembly(plan_, metas, dest_, assembly_);
    if (run_.ws.scratch.size() < need) run_.ws.scratch = run_.ws.policy.alloc(need);
  }

  //! Producer: takes chunk s's items (one per owned piece, the full tensor's metadata and the
  //! piece's bytes), checking each.
  void take_items(const Chunk& c) {
    sources_.clear();
    if (!failure_.empty()) return;
    try {
      for (std::size_t p = c.begin; p < c.end; ++p) {
        const ShardPiece& piece = plan_.piece_at(me_, p);
        const TensorMeta& want = run_.metas[piece.tensor];
        if (*it_ == *end_)
          throw too_few_items(consumed_, plan_.owned[static_cast<std::size_t>(me_)].size());
        const auto& item = **it_;
        const TensorMeta& got = item.meta();
        if (!(got.name == want.name && got.dtype == want.dtype && got.shape == want.shape))
          throw config_error("items", describe_item_mismatch(want, got, consumed_));
        const void* data = item.data();
        if (data == nullptr && piece.bytes() > 0)
          throw config_error("items", cat("item ", consumed_, " ('", want.name, "') has no data"));
        sources_.push_back(data);
        ++*it_;
        ++consumed_;
      }
    } catch (const std::exception&) {
      fail(std::current_exception());
    }
  }

  //! Producer: enqueues the packing of this rank's region of step s; sets region_src_.
  void prepare(std::size_t s, const Chunk& c) {
    auto& ws = run_.ws;
    take_items(c);
    packed_ = false;
    byte* dst = slot(s) ? slot(s) + plan_.offset(s, me_) : nullptr;
    region_src_ = dst;  // after a failure: junk of the right size
    if (!failure_.empty() || c.bytes == 0) return;
    if (const auto solo = plan_.solo(me_, c); solo != npos) {
      region_src_ = const_cast<void*>(sources_[solo - c.begin]);
      return;
    }
    const auto k = s % run_.slots();
    ws.clear_copies();
    std::size_t off = 0;
    for (std::size_t p = c.begin; p < c.end; ++p) {
      const std::size_t nb = plan_.piece_at(me_, p).bytes();
      if (nb) ws.add_copy(dst + off, sources_[p - c.begin], nb);
      off += nb;
    }
    const auto st = run_.slot_stream(k);
    ws.policy.wait(st, ws.unpacked[k]);
    ws.flush_copies(st);
    ws.policy.record(ws.packed[k], st);
    packed_ = true;
  }

  //! This rank's status frame of step s, copied to the device on the communication stream.
  void write_status(std::size_t s) {
    const std::size_t st = status_index(s % run_.slots(), me_);
    Frame f(FrameKind::status, Role::producer, me_, id_);
    f.status.chunk = s;
    if (!failure_.empty()) f.fail(FrameCode::failed, failure_);
    *run_.frame_host(st) = f;
    run_.ws.policy.copy_from_host(run_.frame_dev(st), run_.frame_host(st), kFrameBytes,
                                  run_.comm_stream());
  }

  //! Where root r's region of step s lands on this rank: a consumer's lone contiguous piece with a
  //! destination lands there, everything else in the slot.
  byte* target(std::size_t s, int r, const Chunk& c) {
    if (!producer()) {
      if (const auto solo = plan_.solo(r, c); solo != npos) {
        const ShardPiece& piece = plan_.piece_at(r, solo);
        if (dest_[piece.tensor] && piece.contiguous()) return dest_[piece.tensor] + piece.offset;
      }
    }
    return slot(s) + plan_.offset(s, r);
  }

  //! Enqueues step s: every root's status frame and region in one launch, then the frames' copy
  //! to the host.
  void post(std::size_t s) {
    auto& ws = run_.ws;
    auto& comm = run_.comm;
    const auto k = s % run_.slots();
    const auto cs = run_.comm_stream();
    ws.policy.wait(cs, ws.unpacked[k]);  // the slot's previous step is unpacked
    if (producer()) {
      if (const Chunk* mine = plan_.chunk(me_, s)) {
        prepare(s, *mine);
        write_status(s);
        if (packed_) ws.policy.wait(cs, ws.packed[k]);
      }
    }
    run_.group([&] {
      for (int r = 0; r < m(); ++r) {
        const Chunk* c = plan_.chunk(r, s);
        if (!c) continue;
        comm.broadcast(run_.frame_dev(status_index(k, r)), kFrameBytes, r, cs);
        if (c->bytes > 0)
          comm.broadcast(r == me_ ? region_src_ : target(s, r, *c), c->bytes, r, cs);
      }
    });
    ws.policy.copy_to_host(run_.frame_host(status_index(k, 0)), run_.frame_dev(status_index(k, 0)),
                           static_cast<std::size_t>(m()) * kFrameBytes, cs);
    ws.policy.record(ws.received[k], cs);
  }

  //! Checks step s's status frames: a root's failure is noted, a foreign frame is fatal.
  void check_status(std::size_t s) {
    const auto k = s % run_.slots();
    for (int r = 0; r < m(); ++r) {
      if (!plan_.chunk(r, s)) continue;
      const Frame f = *run_.frame_host(status_index(k, r));
      if (f.head.magic != kFrameMagic || f.kind() != FrameKind::status ||
          f.head.transfer_id != id_ || f.head.rank != r)
        throw protocol_error(r, cat("step ", s, ": the status frame from rank ", r,
                                    " is not this transfer's (desynchronised peers)"));
      if (!f.ok()) {
        if (remote_.empty() && r != me_) {
          remote_ = f.text();
          remote_rank_ = r;
        }
      } else if (f.status.chunk != s) {
        throw protocol_error(r, cat("expected chunk ", s, " from rank ", r, ", got chunk ",
                                    f.status.chunk,
                                    " (desynchronised peers)"));
      }
    }
  }

  //! Consumer: the 2-D copies that put step s's pieces at their place in the full tensors.
  void unpack(std::size_t s) {
    auto& ws = run_.ws;
    ws.clear_copies();
    for (int r = 0; r < m(); ++r) {
      const Chunk* c = plan_.chunk(r, s);
      if (!c || c->bytes == 0 || target(s, r, *c) != slot(s) + plan_.offset(s, r)) continue;
      for (std::size_t p = c->begin; p < c->end; ++p) {
        const std::size_t idx = plan_.owned[static_cast<std::size_t>(r)][p];
        const ShardPiece& piece = plan_.pieces[idx];
        if (piece.bytes() == 0) continue;
        byte* dst = dest_[piece.tensor];
        if (!dst && assembly_[piece.tensor] != npos)
          dst = ws.scratch.data() + assembly_[piece.tensor];
        if (!dst) continue;  // a one-piece tensor without a destination: a view of the slot
        const byte* src = slot(s) + plan_.piece_slot[idx];
        if (piece.contiguous()) {
          ws.add_copy(dst + piece.offset, src, piece.bytes());
          continue;
        }
        for (std::size_t b = 0; b < piece.blocks; ++b)
          ws.add_copy(dst + piece.offset + b * piece.pitch, src + b * piece.block_bytes,
                      piece.block_bytes);
      }
    }
    ws.flush_copies(unpack_stream());
  }

  //! Consumer: hands the tensors complete after step s (and without a destination) to
  //! load_weights; a failure is kept and reported in the acknowledgement.
  void load(std::size_t s) {
    auto& ws = run_.ws;
    ws.views.clear();
    for (const std::size_t t : plan_.completes[s]) {
      if (dest_[t]) continue;
      const auto& meta = run_.metas[t];
      const std::size_t nb = meta.nbytes();
      byte* data = nullptr;
      if (nb && assembly_[t] != npos)
        data = ws.scratch.data() + assembly_[t];
      else if (nb)
        data = slot(s) + plan_.piece_slot[plan_.first_piece[t]];
      ws.views.push_back(TensorView{&meta, data, nb});
    }
    if (ws.views.empty()) return;
    try {
      std::invoke(*load_, std::span<const TensorView>(ws.views), unpack_stream());
    } catch (const std::exception& e) {
      failure_ = cat("load_weights failed on step ", s, ": ", e.what());
      failure_ptr_ = std::current_exception();
    } catch (...) {
      failure_ = cat("load_weights failed on step ", s, " (not a std::exception)");
      failure_ptr_ = std::current_exception();
    }
  }

  //! Waits for step s, checks it, unpacks and loads it (consumer); then frees its slot.
  void finish(std::size_t s) {
    auto& ws = run_.ws;
    const auto k = s % run_.slots();
    run_.await(ws.received[k], "broadcast");
    check_status(s);
    const auto us = unpack_stream();
    ws.policy.wait(us, ws.received[k]);
    if (!producer() && ok()) {
      unpack(s);
      load(s);
    }
    ws.policy.record(ws.unpacked[k], us);
  }

  Run run_;
  ShardedPlan plan_;
  int me_;
  F* load_;
  std::optional<std::ranges::iterator_t<R>> it_;
  std::optional<std::ranges::sentinel_t<R>> end_;
  std::vector<const void*> sources_;
  std::size_t consumed_ = 0;
  void* region_src_ = nullptr;
  bool packed_ = false;
  std::uint64_t id_ = 0;
  std::vector<byte*> dest_;
  std::vector<std::size_t> assembly_;
  std::string failure_;  // our own failure (a wrong item, or load_weights threw)
  std::exception_ptr failure_ptr_;
  std::string remote_;  // a trainer's failure, from a status frame
  int remote_rank_ = 0;
};

}  // namespace weightsync::detail
