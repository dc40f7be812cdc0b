// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The schedule of a collective transfer, one class for every role and for whole-tensor and
//! sharded transfers alike (the plan of pieces, plan.hpp: a whole-tensor transfer is M = 1 root
//! with one piece per tensor).
//!
//! - A root (the producer; each trainer rank of a sharded transfer) checks its items, packs its
//!   chunk's region into its place in ring slot s % K on the slot's stream (or sends it from where
//!   it lies: a lone piece, or pieces that lie back to back), and sends its direct pieces from
//!   their memory. It runs at most K steps ahead: it takes step s's items only once step s - K has
//!   left. With M > 1 it also receives the other roots' bytes into its slot, and drops them.
//! - A consumer posts the receiving launches of up to K steps ahead: a region lands straight in
//!   the destinations when its pieces have destinations that lie back to back, else in the slot; a
//!   direct piece lands in its destination when it is contiguous. It then checks every root's status
//!   frame, copies what landed in the slot to its place (a piece of a split along dim d > 0 is
//!   `blocks` strided copies, one batch per step), and hands the tensors complete after the step
//!   that have no destination to load_weights: a one-piece tensor as a view of the slot, a split
//!   one assembled in the workspace.
//! - A transfer whose every root's bytes fit in the handshake's eager bytes travels inside the
//!   handshake (kFrameEager): one exchange per sync.
//! - After a failure (a wrong item, a load_weights that threw, a root's failed status frame) the
//!   wire stays in step to the end of the plan, without loading more, so every rank stops cleanly.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <ranges>
#include <span>
#include <string>
#include <vector>

#include "weightsync/detail/format.hpp"
#include "weightsync/detail/frame.hpp"
#include "weightsync/detail/batch_memo.hpp"
#include "weightsync/detail/digest.hpp"
#include "weightsync/pipeline/detail/handshake.hpp"
#include "weightsync/pipeline/detail/plan.hpp"
#include "weightsync/pipeline/detail/run.hpp"
#include "weightsync/error.hpp"
#include "weightsync/shard.hpp"

namespace weightsync::detail {

//! The load function of a producer: never called.
struct NoLoad {
  template <class S>
  void operator()(std::span<const TensorView>, S) const {}
};

//! What take_items does with an item besides checking it: nothing.
struct NoEach {
  void operator()(const ShardPiece&, const void*) const noexcept {}
};

//! checked_piece's other cases: metadata compared field by field, and the errors.
[[gnu::noinline]] inline const void* checked_piece_slow(const TensorMeta& got, const void* p,
                                                        const TensorMeta& want,
                                                        std::size_t piece_bytes,
                                                        std::size_t index) {
  if (&got != &want &&
      !(got.name == want.name && got.dtype == want.dtype && got.shape == want.shape))
    throw config_error("items", describe_item_mismatch(want, got, index));
  if (p == nullptr && piece_bytes > 0)
    throw config_error("items", cat("item ", index, " ('", want.name, "') has no data"));
  return p;
}

//! Checks one item (a piece of `want`, `piece_bytes` of it) against its declared metadata and
//! returns its bytes. @throws config_error("items", ...) naming the item and what differs.
template <class Item>
const void* checked_piece(const Item& item, const TensorMeta& want, std::size_t piece_bytes,
                          std::size_t index) {
  const TensorMeta& got = item.meta();
  const void* p = item.data();
  // An item that points at the declared metadata itself (the usual SourceTensorRef) matches it:
  // the common case, inline in the caller's loop.
  if (&got == &want && (p != nullptr || piece_bytes == 0)) [[likely]]
    return p;
  return checked_piece_slow(got, p, want, piece_bytes, index);
}

struct WholeTransfer {
  int root;
  //! The list's digest and byte count when the caller sealed it (SealedMetadata): the plan cache
  //! then skips its comparison of the list with the last one.
  const MetadataSummary* sealed = nullptr;
};

//! A digest cache that knows the answer already (WholeTransfer::sealed).
struct SealedSummary {
  MetadataSummary summary;
  MetadataSummary of(std::span<const TensorMeta>) const noexcept { return summary; }
};
struct ShardedTransfer {
  std::span<const ShardSpec> specs;
  int trainers;
};

template <class C, class R, class F>
class TransferRun {
 public:
  using Run = PipelineRun<C>;
  using stream_type = typename C::stream_type;

  //! A whole-tensor transfer from `w.root`: the producer (items set, load null) or a consumer
  //! (items null, load set).
  TransferRun(C& comm, WorkspaceState<policy_t<C>>& ws, const TransferOptions& opt,
              std::span<const TensorMeta> metas, WholeTransfer w, R* items, F* load)
      : run_(comm, ws, opt, metas, w.root, items ? Role::producer : Role::consumer,
             [&] {
               check_root(w.root, comm.rank(), comm.size(), items != nullptr);
               if (w.sealed != nullptr) {
                 SealedSummary known{*w.sealed};
                 return ws.plans.whole(metas, w.root, opt, known);
               }
               return ws.plans.whole(metas, w.root, opt, ws.digests);
             }),
        load_(load) {
    run_.metadata_digest = ws.plans.last_digest();
    start(items);
  }
  //! A sharded transfer from trainer ranks 0..t.trainers-1: a trainer (items set) or a worker.
  TransferRun(C& comm, WorkspaceState<policy_t<C>>& ws, const TransferOptions& opt,
              std::span<const TensorMeta> metas, ShardedTransfer t, R* items, F* load)
      : run_(comm, ws, opt, metas, items ? comm.rank() : 0,
             items ? Role::producer : Role::consumer,
             [&] {
               check_trainers(t.trainers, comm.rank(), comm.size(), items != nullptr, opt);
               return std::make_shared<const PiecePlan>(metas, t.specs, t.trainers, opt);
             }),
        load_(load) {
    start(items);
  }

  TransferStats operator()() {
    auto& ws = run_.ws;
    const std::size_t S = plan().steps, K = run_.slots();
    check_checksum_support(run_);
    bool reused = ws.ensure_frames(own0() + (root() ? S : 0));
    ws.ensure_streams(K);
    bool eager = false;
    if (run_.opt.checksum) ws.ensure_digests(root() ? S : S * static_cast<std::size_t>(m()));
    hashed_.assign(run_.opt.checksum && !root() ? S * static_cast<std::size_t>(m()) : 0, 0);
    expected_.assign(hashed_.size(), 0);
    if (root()) {
      // One root packs only (a region of several pieces); with M > 1 it also receives the others'.
      const std::size_t slot = receives() ? plan().slot_bytes : plan().packing_bytes(mine_);
      reused = ws.ensure_slots(slot, K) && reused;
      try {
        run_.order_after_source();
        eager = pack_eager();
        if (!eager) run_.order_slots_after_source();
        if (!eager && S > 0 && plan().chunk(mine_, 0)) prepare(0);  // overlaps the handshake
      } catch (const std::exception& e) {
        run_.abort_comm(e.what());
        throw;
      }
    }
    if (!root()) ask_destinations();
    // A mismatch throws the same protocol_error on every rank; the communicator stays usable. It
    // runs before any byte is written or loaded: a refused transfer touches nothing.
    id_ = plan().framed ? handshake(run_, eager ? kFrameEager : 0) : 0;
    std::vector<Frame> acks;
    try {
      // This root packed eagerly but another did not (sharded): the data phase packs after all.
      if (eager && !run_.eager) run_.order_slots_after_source();
      if (receives()) lay_out(root() ? nullptr : &run_.opt.destination);
      run_.trace.mark("laid-out");
      if (!root() && !run_.eager) reused = ws.ensure_slots(slot_need_, K) && reused;
      run_.begin_data();
      if (run_.eager) {
        if (!root()) receive_eager();
        if (ok())
          for (std::size_t s = 0; s < S; ++s) run_.step_done(s);
      } else {
        if (root()) write_status_frames();
        std::size_t posted = 0;
        for (std::size_t s = 0; s < S; ++s) {
          while (posted < S && posted < s + K) post(posted++);
          finish(s);
          if (ok()) run_.step_done(s);
        }
        if (root()) take_items(Chunk{0, owned().size(), 0});  // trailing empty chunks had no launch
        if (root() && failure_.empty() && *it_ != *end_)
          fail(std::make_exception_ptr(too_many_items(owned().size())));
      }
      run_.end_data();
      if (!hashed_.empty() && !Policy::synchronous) {
        // The digests ran on the device behind the data: compare them before acknowledging.
        for (std::size_t k = 0; k < K; ++k) run_.await(ws.unpacked[k], "checksum");
        for (std::size_t s = 0; s < S; ++s) compare_digests(s);
      }
      if (plan().framed) acks = conclude(run_, id_, failure_);
      if (!root() && !run_.eager)
        for (std::size_t k = 0; k < K; ++k) run_.await(ws.unpacked[k], "unpack");
      // (An eager root that receives nothing enqueued nothing since the exchanges' own drains.)
      if (!(run_.eager && root() && !receives())) run_.drain("broadcast");
      run_.trace.mark("drained");
    } catch (const std::exception& e) {
      // Operations may be in flight or a peer may be waiting on us: fail fast on every rank.
      run_.abort_comm(failure_.empty() ? e.what() : failure_);
      throw;
    }
    run_.trace.report(run_.comm.rank(), root() ? "producer" : "consumer");
    if constexpr (requires { ws.policy.copy_table(); })
      if (run_.trace.on())
        if (const auto* t = ws.policy.copy_table()) {
          const auto c = t->counts();
          std::fprintf(stderr,
                       "weightsync trace rank %d copy tables: uploaded %llu, reused %llu, full %llu, "
                       "repeated %llu\n",
                       run_.comm.rank(), static_cast<unsigned long long>(c.uploaded),
                       static_cast<unsigned long long>(c.reused), static_cast<unsigned long long>(c.full),
                       static_cast<unsigned long long>(c.repeated));
        }
    settle(acks);
    return run_.stats(reused);
  }

 private:
  using byte = std::byte;
  using Policy = typename Run::Policy;
  static constexpr std::size_t npos = PiecePlan::npos;
  //! Where a status frame holds its chunk's digest (written there on the device).
  static constexpr std::size_t kChecksumAt = sizeof(FrameHeader) + offsetof(StatusBody, checksum);

  void start(R* items) {
    mine_ = items ? plan().root_of(run_.comm.rank()) : -1;
    if (items) {
      it_.emplace(std::ranges::begin(*items));
      end_.emplace(std::ranges::end(*items));
      src_.assign(owned().size(), nullptr);
    }
    const std::size_t K = run_.slots();
    region_src_.assign(K, nullptr);
    packed_.assign(K, 0);
    launched_.assign(K, 0);
  }

  const PiecePlan& plan() const { return run_.plan; }
  bool root() const { return mine_ >= 0; }
  //! Whether this rank receives: every consumer, and every root of a sharded transfer of M > 1.
  bool receives() const { return !root() || plan().trainers > 1; }
  int m() const { return plan().trainers; }
  const std::vector<std::size_t>& owned() const {
    return plan().owned[static_cast<std::size_t>(mine_)];
  }
  bool ok() const { return failure_.empty() && remote_.empty(); }
  const char* unit() const { return plan().sharded ? "step" : "chunk"; }

  // Frames: [0, world) the gather area; then, when this rank receives, K x M (slot k, root r);
  // then, on a root, one per step for its own status frames (written once, before the data).
  std::size_t recv_frame(std::size_t k, int r) const {
    return run_.status0() + k * static_cast<std::size_t>(m()) + static_cast<std::size_t>(r);
  }
  std::size_t own0() const {
    return run_.status0() + (receives() ? run_.slots() * static_cast<std::size_t>(m()) : 0);
  }
  std::size_t frame_of(std::size_t s, int r) const {
    return r == mine_ ? own0() + s : recv_frame(s % run_.slots(), r);
  }
  byte* slot(std::size_t s) {
    return run_.ws.slots.empty() ? nullptr : run_.ws.slots[s % run_.slots()].data();
  }
  stream_type unpack_stream(std::size_t s) {
    // Workspace places for split tensors are reused in step order: one stream then.
    return run_.slot_stream(one_unpack_stream_ ? 0 : s % run_.slots());
  }

  void fail(std::exception_ptr p) {
    failure_ptr_ = p;
    failure_ = what_of(p);
  }
  void note_remote(int rank, std::string message) {
    if (!remote_.empty()) return;
    remote_ = std::move(message);
    remote_rank_ = rank;
  }

  // ---- where things land ------------------------------------------------------------------

  //! Asks for every destination (a consumer; `destination` null on a root), unless
  //! ask_destinations did before the handshake, and lays out the slot of every step: a root's
  //! region lands in place when its non-empty pieces all have destinations and lie back to back
  //! there, a direct piece when it is contiguous and has one; everything else in the slot (land_:
  //! its offset there, npos when in place). Split tensors without a destination get a workspace
  //! place (assembly_).
  void lay_out(const std::function<void*(const TensorMeta&)>* destination) {
    const auto& p = plan();
    const auto& metas = run_.metas;
    if (!asked_) {
      dest_.assign(metas.size(), nullptr);
      if (destination && *destination)
        for (std::size_t i = 0; i < metas.size(); ++i)
          dest_[i] = static_cast<byte*>((*destination)(metas[i]));
    }
    slot_need_ = 0;
    // (An eager transfer's bytes came with the handshake: they land in no slot and in no place.)
    const std::size_t steps = run_.eager ? 0 : p.steps;
    if (steps > 0) {
      land_.assign(p.pieces.size(), npos);
      region_at_.assign(steps * static_cast<std::size_t>(m()), nullptr);
      region_off_.assign(steps * static_cast<std::size_t>(m()), 0);
    }
    for (std::size_t s = 0; s < steps; ++s) {
      std::size_t off = 0;
      for (int r = 0; r < m(); ++r) {
        const Chunk* c = p.chunk(r, s);
        if (!c) continue;
        const std::size_t at = s * static_cast<std::size_t>(m()) + static_cast<std::size_t>(r);
        region_at_[at] = in_place_region(r, s, *c);
        if (!region_at_[at]) {
          region_off_[at] = off;
          for (std::size_t q = c->begin; q < c->end; ++q) {
            const std::size_t idx = p.piece_index(r, q);
            if (p.direct[idx]) continue;
            land_[idx] = off;
            off += p.pieces[idx].bytes();
          }
        }
        for (std::size_t q = c->begin; q < c->end; ++q) {
          const std::size_t idx = p.piece_index(r, q);
          const ShardPiece& piece = p.pieces[idx];
          if (!p.direct[idx] || (dest_[piece.tensor] && piece.contiguous())) continue;
          land_[idx] = off;
          off += piece.bytes();
        }
      }
      slot_need_ = std::max(slot_need_, off);
    }
    if (root()) return;
    const std::size_t need = place_assembly(p, metas, dest_, assembly_, run_.eager);
    if (run_.ws.scratch.size() < need) run_.ws.scratch = run_.ws.policy.alloc(need);
    one_unpack_stream_ = need > 0;
  }

  //! A consumer asks for its destinations before the handshake, while it would only wait for
  //! the producer, rather than after it, on the way from the producer's bytes to load_weights.
  //! TransferOptions::destination allows it (asking writes nothing; a refused transfer still
  //! writes nothing). A throw is left to lay_out, which asks again once the transfer is accepted
  //! and fails there as it always did (a refused transfer does not report it).
  void ask_destinations() {
    asked_ = false;
    const auto& d = run_.opt.destination;
    if (!d) return;
    const auto& metas = run_.metas;
    try {
      dest_.resize(metas.size());
      for (std::size_t i = 0; i < metas.size(); ++i) dest_[i] = static_cast<byte*>(d(metas[i]));
      asked_ = true;
    } catch (...) {  // (asked again, and thrown, after the handshake)
    }
    run_.trace.mark("destinations");
  }

  //! Where root r's region of step s lands in place, or nullptr.
  byte* in_place_region(int r, std::size_t s, const Chunk& c) const {
    const auto& p = plan();
    if (p.region(r, s).bytes == 0) return nullptr;
    byte* first = nullptr;
    byte* next = nullptr;
    for (std::size_t q = c.begin; q < c.end; ++q) {
      const std::size_t idx = p.piece_index(r, q);
      const ShardPiece& piece = p.pieces[idx];
      if (p.direct[idx] || piece.bytes() == 0) continue;
      byte* d = dest_[piece.tensor];
      if (!d || !piece.contiguous()) return nullptr;
      d += piece.offset;
      if (next && d != next) return nullptr;
      if (!first) first = d;
      next = d + piece.bytes();
    }
    return first;
  }

  //! Where piece `idx` (of step s) is received.
  byte* landing(std::size_t s, std::size_t idx) {
    const ShardPiece& piece = plan().pieces[idx];
    if (land_[idx] == npos) return dest_[piece.tensor] + piece.offset;  // in place
    return slot(s) + land_[idx];
  }
  byte* region_target(std::size_t s, int r) {
    const std::size_t at = s * static_cast<std::size_t>(m()) + static_cast<std::size_t>(r);
    return region_at_[at] ? region_at_[at] : slot(s) + region_off_[at];
  }

  //! Adds the copies that put `piece`'s bytes (contiguous at `src`) at its place in `base`.
  void copy_piece(byte* base, const ShardPiece& piece, const byte* src) {
    auto& ws = run_.ws;
    if (piece.contiguous()) {
      ws.add_copy(base + piece.offset, src, piece.bytes());
      return;
    }
    for (std::size_t b = 0; b < piece.blocks; ++b)
      ws.add_copy(base + piece.offset + b * piece.pitch, src + b * piece.block_bytes,
                  piece.block_bytes);
  }
  //! Where tensor t is assembled (its destination or its workspace place), or nullptr.
  byte* assembled(std::size_t t) {
    if (dest_[t]) return dest_[t];
    if (assembly_[t] != npos) return run_.ws.scratch.data() + assembly_[t];
    return nullptr;
  }

  // ---- the root's side --------------------------------------------------------------------

  //! Takes the items up to the end of chunk `c` that were not taken yet (also those of earlier
  //! chunks that had no launch: their pieces are empty), checking each.
  //! `each(piece, bytes)` runs on every item taken, once it is checked.
  template <class Each = NoEach>
  void take_items(const Chunk& c, Each each = {}) {
    if (!failure_.empty()) return;
    const PiecePlan& p = plan();
    const auto& owned = p.owned[static_cast<std::size_t>(mine_)];
    auto& it = *it_;
    const auto& end = *end_;
    std::size_t q = taken_;
    try {
      for (; q < c.end; ++q) {
        const ShardPiece& piece = p.pieces[owned[q]];
        if (it == end) throw too_few_items(q, owned.size());
        const void* src = checked_piece(*it, run_.metas[piece.tensor], piece.bytes(), q);
        src_[q] = src;
        each(piece, src);
        ++it;
      }
      taken_ = q;
    } catch (const std::exception&) {
      taken_ = q;
      fail(std::current_exception());
      // vLLM's wire has no way to say so: abort, so that no consumer waits on us.
      if (!plan().framed) throw;
    }
  }

  //! A framed transfer whose bytes fit in this root's eager bytes (run.eager_capacity) is packed there
  //! now, on the communication stream, every item checked first: the handshake then carries it
  //! (when every root's does), and no data phase follows. @returns whether it was; after a wrong
  //! item it was not, and the data phase says so on the wire as usual (one item too many is not a
  //! wrong item: see below).
  bool pack_eager() {
    if (!plan().framed || run_.opt.checksum || run_.metas.empty() ||
        plan().root_bytes(mine_) > run_.eager_capacity(static_cast<std::size_t>(run_.comm.rank())))
      return false;
    auto& ws = run_.ws;
    if constexpr (Policy::synchronous) {
      // Host memory: the items are copied as they are checked, in one pass over them, items that
      // lie back to back as one copy (the run so far: `from`, `run` bytes, to go at `to`). (A
      // wrong item leaves a partial pack that nothing reads: the transfer is not eager then.)
      run_.ensure_handshake_area();
      byte* to = run_.eager_at(static_cast<std::size_t>(run_.comm.rank()));
      const auto s = run_.comm_stream();
      const byte* from = nullptr;
      std::size_t run = 0;
      for (const Chunk& c : plan().chunks[static_cast<std::size_t>(mine_)])
        take_items(c, [&](const ShardPiece& piece, const void* src) {
          const std::size_t nb = piece.bytes();
          if (nb == 0) return;
          if (run > 0 && continues(to, from, run, to + run, src)) {
            run += nb;
            return;
          }
          if (run > 0) ws.policy.copy(to, from, run, s);
          to += run;
          from = static_cast<const byte*>(src);
          run = nb;
        });
      if (run > 0 && failure_.empty()) ws.policy.copy(to, from, run, s);
      run_.trace.mark("packed");
      if (!failure_.empty()) return false;
    } else {
      for (const Chunk& c : plan().chunks[static_cast<std::size_t>(mine_)]) take_items(c);
      run_.trace.mark("items-taken");
      if (!failure_.empty()) return false;
      pack_eager_listed();
    }
    // One item too many: every declared tensor was good and goes out; the failure is this
    // caller's alone, as when the data phase finds it after its last chunk.
    if (*it_ != *end_) fail(std::make_exception_ptr(too_many_items(owned().size())));
    return true;
  }

  //! The eager pack on an asynchronous policy: one batch of copies from the taken items, or the
  //! last one relaunched when its plan, sources and place are the same.
  void pack_eager_listed() {
    auto& ws = run_.ws;
    run_.ensure_handshake_area();
    byte* to = run_.eager_at(static_cast<std::size_t>(run_.comm.rank()));
    // The same plan, sources and place as the last eager pack: the same copies, relaunched.
    RepeatedBatch& last = ws.eager_pack;
    keys_.assign(1, to);
    keys_.insert(keys_.end(), src_.begin(), src_.end());
    if (last.same(run_.plan_holder.get(), keys_) && ws.repeat(last, run_.comm_stream())) {
      run_.trace.mark("packed-again");
    } else {
      last.forget();
      ws.clear_copies();
      std::size_t off = 0;
      for (std::size_t q = 0; q < owned().size(); ++q) {
        const std::size_t nb = plan().piece_at(mine_, q).bytes();
        if (nb > 0) ws.add_copy(to + off, src_[q], nb);
        off += nb;
      }
      run_.trace.mark("pack-listed");
      ws.flush_copies_kept(run_.comm_stream(), last, run_.plan_holder, keys_);
      run_.trace.mark("packed");
    }
  }

  //! This root's status frames of every step it has a chunk in, copied to the device once.
  void write_status_frames() {
    const std::size_t S = plan().steps;
    if (!plan().framed || S == 0) return;
    for (std::size_t s = 0; s < S; ++s) {
      Frame f(FrameKind::status, Role::producer, run_.comm.rank(), id_);
      f.status.chunk = s;
      *run_.frame_host(own0() + s) = f;  // (the digest is written on the device: post)
    }
    run_.ws.policy.copy_from_host(run_.frame_dev(own0()), run_.frame_host(own0()),
                                  S * kFrameBytes, run_.comm_stream());
  }

  //! Where this root's region of chunk `c` already lies back to back in its sources, or nullptr.
  const void* contiguous_region(const Chunk& c) const {
    const byte* first = nullptr;
    const byte* next = nullptr;
    for (std::size_t q = c.begin; q < c.end; ++q) {
      const std::size_t idx = plan().piece_index(mine_, q);
      const std::size_t nb = plan().pieces[idx].bytes();
      if (plan().direct[idx] || nb == 0) continue;
      const auto* p = static_cast<const byte*>(src_[q]);
      if (next != nullptr && p != next) return nullptr;
      if (first == nullptr) first = p;
      next = p + nb;
    }
    return first;
  }

  //! Checks step s's items of this root and enqueues the packing of its region into its place in
  //! slot s % K (or notes where it lies already).
  void prepare(std::size_t s) {
    const Chunk& c = *plan().chunk(mine_, s);
    take_items(c);
    checksum(s, c);
    const std::size_t k = s % run_.slots();
    region_src_[k] = nullptr;
    packed_[k] = 0;
    prepared_ = s;
    const auto& g = plan().region(mine_, s);
    auto& ws = run_.ws;
    if (!failure_.empty() || g.bytes == 0) return;
    if (g.solo != npos) {
      region_src_[k] = src_[g.solo];
      return;
    }
    if ((region_src_[k] = contiguous_region(c)) != nullptr) {
      ws.contiguous_regions++;  // sent from where it is: the wire is the same
      return;
    }
    byte* dst = slot(s) + (receives() ? plan().offset(s, mine_) : 0);
    ws.clear_copies();
    std::size_t off = 0;
    for (std::size_t q = c.begin; q < c.end; ++q) {
      const std::size_t idx = plan().piece_index(mine_, q);
      const std::size_t nb = plan().pieces[idx].bytes();
      if (plan().direct[idx] || nb == 0) continue;
      ws.add_copy(dst + off, src_[q], nb);
      off += nb;
    }
    const auto st = run_.slot_stream(k);
    ws.policy.wait(st, ws.slot_free[k]);
    ws.flush_copies(st);
    ws.policy.record(ws.packed[k], st);
    region_src_[k] = dst;
    packed_[k] = 1;
  }

  //! TransferOptions::checksum: the digest (detail/digest.hpp) of this root's chunk, its pieces
  //! at their positions in the chunk, computed on slot s % K's stream from where the pieces lie
  //! (it overlaps the earlier steps' transfers) into the step's digest on the device; post()
  //! copies it into the status frame there before the frame is sent (no host round trip).
  void checksum(std::size_t s, const Chunk& c) {
    if (!run_.opt.checksum || !failure_.empty()) return;
    auto& ws = run_.ws;
    ws.digest_spans.clear();
    for (std::size_t q = c.begin; q < c.end; ++q)
      if (const std::size_t nb = plan().piece_at(mine_, q).bytes())
        ws.digest_spans.push_back(DigestSpan{src_[q], nb, static_cast<std::uint32_t>(q - c.begin), 0});
    const std::size_t k = s % run_.slots();
    const auto st = run_.slot_stream(k);
    ws.policy.digest(ws.digest_spans.data(), ws.digest_spans.size(), ws.digest_dev(s), 1, st);
    ws.policy.record(ws.hashed[k], st);
  }
  //! The digest of step s, done on the device, into this root's status frame (on the
  //! communication stream, before the step's launch).
  void write_digest(std::size_t s) {
    auto& ws = run_.ws;
    const auto cs = run_.comm_stream();
    ws.policy.wait(cs, ws.hashed[s % run_.slots()]);
    void* dst = run_.frame_dev(own0() + s) + kChecksumAt;
    const void* src = ws.digest_dev(s);
    const std::size_t n = sizeof(std::uint64_t);
    ws.policy.copy_batch(&dst, &src, &n, 1, cs);
  }

  //! After a failure the wire still carries this root's bytes of step s: junk of the right size
  //! (its region, then its direct pieces), and a failed status frame.
  byte* junk_for(std::size_t s) {
    auto& ws = run_.ws;
    const std::size_t f = own0() + s;
    Frame* ef = run_.frame_host(f);
    ef->fail(FrameCode::failed, failure_);
    ws.policy.copy_from_host(run_.frame_dev(f), ef, kFrameBytes, run_.comm_stream());
    const std::size_t at = receives() ? plan().offset(s, mine_) : 0;
    const std::size_t bytes = plan().chunk(mine_, s)->bytes;
    if (ws.slot_bytes >= at + bytes) return slot(s) + at;
    std::size_t most = 0;
    for (const Chunk& c : plan().chunks[static_cast<std::size_t>(mine_)]) most = std::max(most, c.bytes);
    if (ws.scratch.size() < most) ws.scratch = ws.policy.alloc(most);
    return ws.scratch.data();
  }

  // ---- the steps --------------------------------------------------------------------------

  //! Enqueues step s's launches (see Split) on the communication stream.
  void post(std::size_t s) {
    auto& ws = run_.ws;
    auto& comm = run_.comm;
    const std::size_t k = s % run_.slots();
    const auto cs = run_.comm_stream();
    launched_[k] = plan().step_bytes[s] > 0;
    if (!launched_[k]) return;  // a step of empty pieces has no wire operation
    const Chunk* own = root() ? plan().chunk(mine_, s) : nullptr;
    if (own && prepared_ != s) prepare(s);
    byte* junk = own && !failure_.empty() ? junk_for(s) : nullptr;
    if (own && !junk && own->bytes > 0 && plan().framed && run_.opt.checksum) write_digest(s);
    const bool was_packed = own && !junk && packed_[k];
    const Split split = plan().splits[s];
    if (!root()) ws.policy.wait(cs, ws.unpacked[k]);  // the slot's previous step is unloaded
    // The stream waits for packing outside the group: a group is one launch on one stream order.
    if (was_packed && split != Split::directs_first) ws.policy.wait(cs, ws.packed[k]);
    launch_step(
        run_, s,
        [&] {
          if (!plan().framed) return;
          for (int r = 0; r < m(); ++r)
            if (const Chunk* c = plan().chunk(r, s); c && c->bytes > 0)
              comm.broadcast(run_.frame_dev(frame_of(s, r)), kFrameBytes, plan().root_rank[r], cs);
        },
        [&] {
          for (int r = 0; r < m(); ++r) {
            const Chunk* c = plan().chunk(r, s);
            const std::size_t bytes = c ? plan().region(r, s).bytes : 0;
            if (bytes == 0) continue;
            void* buf = r != mine_ ? region_target(s, r)
                                   : (junk ? junk : const_cast<void*>(region_src_[k]));
            comm.broadcast(buf, bytes, plan().root_rank[r], cs);
          }
        },
        [&] {
          for (int r = 0; r < m(); ++r) {
            const Chunk* c = plan().chunk(r, s);
            if (!c) continue;
            std::size_t junk_at = plan().region(r, s).bytes;
            for (std::size_t q = c->begin; q < c->end; ++q) {
              const std::size_t idx = plan().piece_index(r, q);
              if (!plan().direct[idx]) continue;
              const std::size_t nb = plan().pieces[idx].bytes();
              void* buf = r != mine_ ? landing(s, idx)
                                     : (junk ? junk + junk_at : const_cast<void*>(src_[q]));
              comm.broadcast(buf, nb, plan().root_rank[r], cs);
              junk_at += nb;
            }
          }
        },
        [&] {
          if (was_packed && split == Split::directs_first) ws.policy.wait(cs, ws.packed[k]);
        },
        [&] {
          if (receives() && plan().framed)
            ws.policy.copy_to_host(run_.frame_host(recv_frame(k, 0)),
                                   run_.frame_dev(recv_frame(k, 0)),
                                   static_cast<std::size_t>(m()) * kFrameBytes, cs);
          ws.policy.record(ws.received[k], cs);
        },
        [&] { ws.policy.record(ws.received2[k], cs); });
    if (root()) ws.policy.record(ws.slot_free[k], cs);
  }

  //! Checks step s's status frames (but this root's own): a root's failure is noted, a foreign
  //! frame is fatal.
  void check_status(std::size_t s) {
    if (!plan().framed) return;
    const std::size_t k = s % run_.slots();
    for (int r = 0; r < m(); ++r) {
      const Chunk* c = plan().chunk(r, s);
      if (!c || c->bytes == 0 || r == mine_) continue;
      const int rank = plan().root_rank[r];
      const Frame f = *run_.frame_host(recv_frame(k, r));
      if (f.head.magic != kFrameMagic || f.kind() != FrameKind::status ||
          f.head.transfer_id != id_ || f.head.rank != rank)
        throw protocol_error(rank, cat(unit(), " ", s, ": the status frame from rank ", rank,
                                       " is not this transfer's (desynchronised peers)"));
      if (!f.ok()) {
        note_remote(rank, plan().sharded
                              ? cat("trainer rank ", rank, " failed: ", f.text())
                              : cat("the producer (rank ", rank, ") failed: ", f.text()));
      } else if (f.status.chunk != s) {
        throw protocol_error(rank, cat("expected ", unit(), " ", s, " from rank ", rank, ", got ",
                                       unit(), " ", f.status.chunk, " (desynchronised peers)"));
      }
    }
  }

  //! Consumer: copies step s's pieces that landed in the slot to their place (their destination,
  //! or the workspace place of a split tensor), the regions' and/or the direct pieces'.
  void unpack(std::size_t s, bool regions, bool directs) {
    auto& ws = run_.ws;
    ws.clear_copies();
    for (int r = 0; r < m(); ++r) {
      const Chunk* c = plan().chunk(r, s);
      if (!c || c->bytes == 0) continue;
      for (std::size_t q = c->begin; q < c->end; ++q) {
        const std::size_t idx = plan().piece_index(r, q);
        const ShardPiece& piece = plan().pieces[idx];
        if (piece.bytes() == 0 || land_[idx] == npos) continue;
        if (plan().direct[idx] ? !directs : !regions) continue;
        if (byte* base = assembled(piece.tensor)) copy_piece(base, piece, slot(s) + land_[idx]);
        // else: a one-piece tensor without a destination, handed over as a view of the slot
      }
    }
    ws.flush_copies(unpack_stream(s));
  }

  //! TransferOptions::checksum: digests each root's chunk where its pieces landed (the slot, or
  //! in place), at their positions in the root's chunk, on the unpack stream (behind the step's
  //! data, overlapping the next steps' transfers), and mirrors the digests to the host. The host
  //! policy has them at once and compares before load_weights; on a device they are compared
  //! once the data is complete, before the acknowledgement (compare_digests). A mismatch is this
  //! rank's failure, reported in the acknowledgement.
  void verify(std::size_t s, stream_type us) {
    auto& ws = run_.ws;
    const std::size_t M = static_cast<std::size_t>(m());
    const std::size_t k = s % run_.slots();
    ws.digest_spans.clear();
    for (int r = 0; r < m(); ++r) {
      const Chunk* c = plan().chunk(r, s);
      if (!c || c->bytes == 0) continue;  // (no status frame: nothing to compare)
      for (std::size_t q = c->begin; q < c->end; ++q) {
        const std::size_t idx = plan().piece_index(r, q);
        if (const std::size_t nb = plan().pieces[idx].bytes())
          ws.digest_spans.push_back(DigestSpan{landing(s, idx), nb,
                                               static_cast<std::uint32_t>(q - c->begin),
                                               static_cast<std::uint32_t>(r)});
      }
      const std::size_t at = s * M + static_cast<std::size_t>(r);
      expected_[at] = run_.frame_host(recv_frame(k, r))->status.checksum;
      hashed_[at] = 1;
    }
    // One launch for every root's chunk of the step: root r's digest lands in sum r.
    ws.policy.digest(ws.digest_spans.data(), ws.digest_spans.size(), ws.digest_dev(s * M), M, us);
    ws.policy.copy_to_host(ws.digest_mirror(s * M), ws.digest_dev(s * M), M * sizeof(std::uint64_t),
                           us);
    if constexpr (Policy::synchronous) compare_digests(s);
  }
  //! Compares step s's digests (ready on the host) with the roots' status frames; the first
  //! mismatch becomes this rank's failure.
  void compare_digests(std::size_t s) {
    const std::size_t M = static_cast<std::size_t>(m());
    for (int r = 0; r < m(); ++r) {
      const std::size_t at = s * M + static_cast<std::size_t>(r);
      if (!hashed_[at] || !failure_.empty()) continue;
      hashed_[at] = 0;
      const std::uint64_t got = *run_.ws.digest_mirror(at);
      if (got == expected_[at]) continue;
      const Chunk* c = plan().chunk(r, s);
      std::size_t lo = npos, hi = 0;
      for (std::size_t q = c->begin; q < c->end; ++q) {
        const std::size_t t = plan().pieces[plan().piece_index(r, q)].tensor;
        lo = std::min(lo, t);
        hi = std::max(hi, t);
      }
      const int rank = plan().root_rank[r];
      failure_ = cat(unit(), " ", s, " (tensors ", lo, "..", hi, "): checksum mismatch: rank ",
                     rank, " sent digest 0x", hex(expected_[at]),
                     ", received bytes hash to 0x", hex(got));
      failure_ptr_ = std::make_exception_ptr(protocol_error(rank, failure_));
    }
  }

  //! Consumer: hands the tensors complete after step s that have no destination to load_weights.
  void load(std::size_t s, stream_type st) {
    auto& ws = run_.ws;
    ws.views.clear();
    for (const std::size_t t : plan().completes[s]) {
      if (dest_[t]) continue;
      const auto& meta = run_.metas[t];
      const std::size_t nb = meta.nbytes();
      byte* data = nullptr;
      if (nb && assembly_[t] != npos)
        data = ws.scratch.data() + assembly_[t];
      else if (nb)
        data = landing(s, plan().first_piece[t]);
      ws.views.push_back(TensorView{&meta, data, nb});
    }
    call_load(s, st);
  }

  //! Hands ws.views (step s's) to load_weights; a failure is kept and reported in the
  //! acknowledgement.
  void call_load(std::size_t s, stream_type st) {
    if (run_.ws.views.empty()) return;
    const auto t0 = Run::Clock::now();
    struct Timed {  // counts the time inside load_weights, also when it throws
      Run& run;
      typename Run::Clock::time_point t0;
      ~Timed() { run.load_time += Run::Clock::now() - t0; }
    } timed{run_, t0};
    try {
      std::invoke(*load_, std::span<const TensorView>(run_.ws.views), st);
    } catch (const std::exception& e) {
      failure_ = cat("load_weights failed on ", unit(), " ", s, ": ", e.what());
      failure_ptr_ = std::current_exception();
    } catch (...) {
      failure_ = cat("load_weights failed on ", unit(), " ", s, " (not a std::exception)");
      failure_ptr_ = std::current_exception();
    }
    // vLLM's wire has no way to say so: abort, so that the producer does not wait on us.
    if (failure_ptr_ && !plan().framed) std::rethrow_exception(failure_ptr_);
  }

  //! Waits for step s; a consumer checks it, unpacks and loads it, then frees its slot.
  void finish(std::size_t s) {
    auto& ws = run_.ws;
    const std::size_t k = s % run_.slots();
    const bool launched = launched_[k] != 0;
    if (!receives()) {  // one root: bound the run-ahead to K steps
      if (launched) run_.await(ws.slot_free[k], "broadcast");
      return;
    }
    if (launched) {
      run_.await(ws.received[k], "broadcast");
      check_status(s);
    }
    if (root()) return;  // the other roots' bytes are dropped
    const auto us = unpack_stream(s);
    const Split split = plan().splits[s];
    if (launched) {
      const bool good = ok();
      ws.policy.wait(us, ws.received[k]);
      // The regions arrived with the first launch: unpack them while the direct pieces arrive.
      if (good && split == Split::region_first) unpack(s, true, false);
      if (split != Split::none) {
        run_.await(ws.received2[k], "broadcast");
        ws.policy.wait(us, ws.received2[k]);
      }
      if (good) unpack(s, split != Split::region_first, true);
      if (ok() && run_.opt.checksum) verify(s, us);
    }
    if (ok()) load(s, us);
    ws.policy.record(ws.unpacked[k], us);
  }

  //! The roots' bytes came with the handshake (kFrameEager), each root's pieces back to back in
  //! its eager bytes: copies them to their places and hands the rest to load_weights, on the
  //! communication stream (whose final drain then covers them: one wait for the whole sync). When
  //! they were exchanged in pinned host memory, a tensor handed to load_weights is copied to the
  //! device area first (in the same batch): a view is device memory.
  void receive_eager() {
    auto& ws = run_.ws;
    const auto s = run_.comm_stream();
    std::vector<byte*>& at = eager_at_;
    // The same plan, eager places, destinations and workspace as the last eager copy out: the
    // same copies, relaunched.
    RepeatedBatch& last = ws.eager_unpack;
    keys_.clear();
    for (int r = 0; r < m(); ++r) {
      const auto rank = static_cast<std::size_t>(plan().root_rank[r]);
      const std::size_t cap = run_.eager_capacity(rank);
      if (plan().root_bytes(r) > cap)
        throw protocol_error(static_cast<int>(rank),
                             cat("rank ", rank, " sent ", plan().root_bytes(r),
                                 " bytes with the handshake, where ", cap, " fit"));
      keys_.push_back(run_.eager_at(rank));
      keys_.push_back(run_.eager_dev(rank));
    }
    keys_.push_back(ws.scratch.data());
    // (the keys end with the destinations: compared where they are, copied only into a new list)
    const std::vector<byte*>* views = &at;
    if (last.same(run_.plan_holder.get(), keys_, dest_) && ws.repeat(last, s)) {
      views = &last.views;
      run_.trace.mark("copies-again");
    } else {
      last.forget();
      list_eager_copies(at);
      run_.trace.mark("copies-listed");
      last.views = at;  // (kept only if the batch is: `last` names no plan until then)
      keys_.insert(keys_.end(), dest_.begin(), dest_.end());
      ws.flush_copies_kept(s, last, run_.plan_holder, keys_);
      run_.trace.mark("copies-enqueued");
    }
    ws.views.clear();
    for (std::size_t t = 0; t < run_.metas.size(); ++t) {
      if (dest_[t]) continue;
      const std::size_t nb = run_.metas[t].nbytes();
      byte* data = nb == 0 ? nullptr : (assembly_[t] != npos ? assembled(t) : (*views)[t]);
      ws.views.push_back(TensorView{&run_.metas[t], data, nb});
    }
    call_load(0, s);
    run_.trace.mark("loaded");
  }

  //! Lists the copies of every root's eager bytes (each within its capacity: receive_eager
  //! checked) to their places, into ws's copy list; `at` gets where each one-piece tensor without
  //! a destination lies (a view of the eager bytes).
  void list_eager_copies(std::vector<byte*>& at) {
    auto& ws = run_.ws;
    at.assign(run_.metas.size(), nullptr);
    ws.clear_copies();
    for (int r = 0; r < m(); ++r) {
      const int rank = plan().root_rank[r];
      byte* from = run_.eager_at(static_cast<std::size_t>(rank));
      byte* dev = run_.eager_dev(static_cast<std::size_t>(rank));
      std::size_t off = 0;
      for (std::size_t q = 0; q < plan().owned[static_cast<std::size_t>(r)].size(); ++q) {
        const ShardPiece& piece = plan().piece_at(r, q);
        if (piece.bytes() == 0) continue;
        if (byte* base = assembled(piece.tensor)) {
          copy_piece(base, piece, from + off);
        } else {
          // A one-piece tensor: a view of the eager bytes (on the device).
          if (from != dev) ws.add_copy(dev + off, from + off, piece.bytes());
          at[piece.tensor] = dev + off;
        }
        off += piece.bytes();
      }
    }
  }

  //! The verdict: this rank's own failure, a root's failure (its status frames), or what the
  //! acknowledgement says (every rank's outcome, Acknowledge::each_transfer).
  void settle(const std::vector<Frame>& acks) {
    const int me = run_.comm.rank();
    for (const auto& a : acks) {
      if (a.ok() || a.head.rank == me) continue;
      const bool from_root = plan().root_of(a.head.rank) >= 0;
      if (root()) {
        if (failure_ptr_ || !remote_.empty()) break;
        throw remote_error(a.head.rank,
                           plan().sharded
                               ? cat("rank ", a.head.rank, " failed: ", a.text())
                               : cat("rank ", a.head.rank, " failed to receive the weights: ",
                                     a.text()));
      }
      if (from_root) {
        note_remote(a.head.rank, plan().sharded
                                     ? cat("rank ", a.head.rank, " failed: ", a.text())
                                     : cat("the producer (rank ", a.head.rank,
                                           ") failed: ", a.text()));
      } else if (run_.opt.all_or_nothing && ok()) {
        // another consumer's failure is this rank's too
        note_remote(a.head.rank, plan().sharded
                                     ? cat("rank ", a.head.rank, " failed: ", a.text())
                                     : cat("rank ", a.head.rank, " failed (all_or_nothing): ",
                                           a.text()));
      }
    }
    if (failure_ptr_) std::rethrow_exception(failure_ptr_);
    if (!remote_.empty()) throw remote_error(remote_rank_, remote_);
  }

  Run run_;
  F* load_;
  int mine_ = -1;  // this rank's root index, -1 on a consumer
  std::optional<std::ranges::iterator_t<R>> it_;
  std::optional<std::ranges::sentinel_t<R>> end_;
  std::vector<const void*> src_;  // root: per owned piece, once taken
  bool asked_ = false;            // consumer: dest_ was filled before the handshake
  std::size_t taken_ = 0;
  std::size_t prepared_ = npos;
  std::vector<const void*> region_src_;  // root: per slot, where its region is sent from
  std::vector<char> packed_;             // root: per slot, the region was packed there
  std::vector<char> launched_;           // per slot: its step had a launch
  // consumer, TransferOptions::checksum: per step and root, whether its digest was enqueued and
  // not compared yet, and the digest its root sent
  std::vector<char> hashed_;
  std::vector<std::uint64_t> expected_;
  std::uint64_t id_ = 0;
  std::vector<byte*> dest_;
  std::vector<std::size_t> land_;  // per piece: its offset in its step's slot, npos in place
  std::vector<byte*> region_at_;   // per step and root: where the region lands in place
  std::vector<std::size_t> region_off_;  // per step and root: else its offset in the slot
  std::size_t slot_need_ = 0;
  std::vector<std::size_t> assembly_;
  std::vector<byte*> eager_at_;
  std::vector<const void*> keys_;  // what an eager pack or copy out is made from (RepeatedBatch)
  bool one_unpack_stream_ = false;
  std::string failure_;  // this rank's failure (a wrong item, load_weights threw, a checksum)
  std::exception_ptr failure_ptr_;
  std::string remote_;  // another rank's failure, as thrown (remote_error)
  int remote_rank_ = 0;
};

}  // namespace weightsync::detail
