// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The producer's schedule: check each chunk's items, pack its region into ring slot c % K on the
//! slot's stream (or send it from where it lies), and launch the chunk on the communication
//! stream, running at most K chunks ahead. After a wrong item the wire stays in step to the end of
//! the plan (the chunks carry junk and a failed status frame) so that every consumer stops
//! cleanly.

#include <cstddef>
#include <exception>
#include <iterator>
#include <ranges>
#include <string>
#include <vector>

#include "weightsync/detail/format.hpp"
#include "weightsync/detail/frame.hpp"
#include "weightsync/detail/pipeline/handshake.hpp"
#include "weightsync/detail/pipeline/run.hpp"
#include "weightsync/error.hpp"

namespace weightsync::detail {

template <class C, class R>
class ProducerRun {
 public:
  ProducerRun(C& comm, WorkspaceState<policy_t<C>>& ws, const TransferOptions& opt,
              std::span<const TensorMeta> metas, int root, R& items)
      : run_(comm, ws, opt, metas, root, Role::producer),
        it_(std::ranges::begin(items)),
        end_(std::ranges::end(items)) {}

  TransferStats operator()() {
    auto& ws = run_.ws;
    const std::size_t n = run_.plan.size();
    const std::size_t K = run_.slots();
    check_checksum_support(run_);
    digests_.assign(n, 0);
    bool reused = ws.ensure_frames(run_.status0() + (run_.plan.framed ? n : 0));
    bool eager = false;
    // Only a region of several tensors needs a slot; a lone tensor is sent from its own memory.
    reused = ws.ensure_slots(run_.plan.packing_slot_bytes(), K) && reused;
    try {
      run_.order_after_source();
      eager = pack_eager();
      if (!eager && n > 0) prepare(0);  // the first packing overlaps the handshake
    } catch (const std::exception& e) {
      run_.abort_comm(e.what());
      throw;
    }
    // A mismatch throws the same protocol_error on every rank; the communicator stays usable.
    const std::uint64_t id = run_.plan.framed ? handshake(run_, {}, eager ? kFrameEager : 0) : 0;
    std::vector<Frame> acks;
    try {
      run_.begin_data();
      if (run_.eager) {  // the bytes went with the handshake
        for (std::size_t c = 0; c < n; ++c) run_.chunk_done(c);
      } else {
        write_status_frames(id);
        for (std::size_t c = 0; c < n; ++c) {
          send(c);
          if (failure_.empty()) run_.chunk_done(c);
          if (c + 1 == n) break;
          // Bound the run-ahead to K chunks, and give the deadline a chance to fire.
          if (c + 1 >= K) run_.await(ws.slot_free[(c + 1) % K], "broadcast");
          prepare(c + 1);
        }
        if (failure_.empty() && it_ != end_)
          fail(std::make_exception_ptr(too_many_items(run_.metas.size())));
      }
      run_.end_data();
      if (run_.plan.framed) acks = conclude(run_, id, failure_);
      run_.drain("broadcast");
    } catch (const std::exception& e) {
      // Operations may be in flight or a peer may be waiting on us: fail fast on every rank.
      run_.abort_comm(e.what());
      throw;
    }
    if (failure_ptr_) std::rethrow_exception(failure_ptr_);
    for (const auto& a : acks)
      if (!a.ok())
        throw remote_error(a.head.rank, cat("rank ", a.head.rank,
                                            " failed to receive the weights: ", a.text()));
    return run_.stats(reused);
  }

 private:
  using Run = PipelineRun<C>;

  void fail(std::exception_ptr p) {
    failure_ptr_ = p;
    failure_ = what_of(p);
  }

  //! The status frames of every chunk, copied to the device once.
  void write_status_frames(std::uint64_t id) {
    const std::size_t n = run_.plan.size();
    if (!run_.plan.framed || n == 0) return;
    for (std::size_t c = 0; c < n; ++c) {
      Frame f(FrameKind::status, Role::producer, run_.comm.rank(), id);
      f.status.chunk = c;
      f.status.checksum = digests_[c];
      *run_.frame_host(run_.status0() + c) = f;
    }
    run_.ws.policy.copy_from_host(run_.frame_dev(run_.status0()), run_.frame_host(run_.status0()),
                                  n * kFrameBytes, run_.comm_stream());
    frames_written_ = true;
  }

  //! Takes chunk c's items from the iterator, checking each against its metadata.
  void take_items(std::size_t c) {
    const Chunk& ch = run_.plan.chunks[c];
    auto& ws = run_.ws;
    ws.sources.clear();
    if (!failure_.empty()) return;
    try {
      for (std::size_t i = ch.begin; i < ch.end; ++i) {
        if (it_ == end_) throw too_few_items(i, run_.metas.size());
        ws.sources.push_back(checked_source(*it_, run_.metas[i], i));
        ++it_;
        ++consumed_;
      }
    } catch (const std::exception&) {
      fail(std::current_exception());
      // vLLM's wire has no way to say so: abort, so that no consumer waits on us.
      if (!run_.plan.framed) throw;
    }
  }

  //! A framed transfer whose bytes fit in the handshake's eager bytes (eager_capacity) is packed
  //! there now, on the communication stream, every item checked first: the handshake then carries
  //! it, and no data phase follows. @returns whether it was; after a wrong item it was not, and
  //! the data phase says so on the wire as usual (take_items has noted the failure).
  bool pack_eager() {
    const auto& plan = run_.plan;
    const std::size_t world = run_.world();
    if (!plan.framed || run_.opt.checksum || run_.metas.empty() ||
        plan.total_bytes > eager_capacity(world))
      return false;
    auto& ws = run_.ws;
    ws.ensure_handshake(world * handshake_block_bytes(world));
    std::byte* to = run_.eager_dev(static_cast<std::size_t>(run_.comm.rank()));
    ws.clear_copies();
    std::size_t off = 0;
    for (std::size_t c = 0; c < plan.size() && failure_.empty(); ++c) {
      take_items(c);
      const Chunk& ch = plan.chunks[c];
      for (std::size_t i = ch.begin; i < ch.end && failure_.empty(); ++i) {
        const std::size_t nb = run_.metas[i].nbytes();
        if (nb > 0) ws.add_copy(to + off, ws.sources[i - ch.begin], nb);
        off += nb;
      }
    }
    if (failure_.empty() && it_ != end_)
      fail(std::make_exception_ptr(too_many_items(run_.metas.size())));
    if (!failure_.empty()) return false;
    ws.flush_copies(run_.comm_stream());
    return true;
  }

  //! Where chunk c's region already lies back to back in the declared order (a flat parameter
  //! buffer), or nullptr.
  const void* contiguous_region(std::size_t c) const {
    const Chunk& ch = run_.plan.chunks[c];
    const std::byte* first = nullptr;
    const std::byte* next = nullptr;
    for (std::size_t i = ch.begin; i < ch.end; ++i) {
      const std::size_t nb = run_.metas[i].nbytes();
      if (run_.plan.direct[i] || nb == 0) continue;
      const auto* p = static_cast<const std::byte*>(run_.ws.sources[i - ch.begin]);
      if (next != nullptr && p != next) return nullptr;
      if (first == nullptr) first = p;
      next = p + nb;
    }
    return first;
  }

  //! Checks chunk c's items and enqueues the packing of its region into slot c % K.
  void prepare(std::size_t c) {
    take_items(c);
    checksum(c);
    region_src_ = nullptr;
    const Chunk& ch = run_.plan.chunks[c];
    const auto& region = run_.plan.regions[c];
    auto& ws = run_.ws;
    if (!failure_.empty() || region.bytes == 0) return;
    if (region.solo != TransferPlan::npos) {
      region_src_ = ws.sources[region.solo - ch.begin];
      return;
    }
    if ((region_src_ = contiguous_region(c)) != nullptr) {
      ws.contiguous_regions++;  // sent from where it is: the wire is the same
      return;
    }
    const auto k = c % run_.slots();
    auto* slot = ws.slots[k].data();
    ws.clear_copies();
    std::size_t off = 0;
    for (std::size_t i = ch.begin; i < ch.end; ++i) {
      const std::size_t nb = run_.metas[i].nbytes();
      if (run_.plan.direct[i] || nb == 0) continue;
      ws.add_copy(slot + off, ws.sources[i - ch.begin], nb);
      off += nb;
    }
    const auto s = run_.slot_stream(k);
    ws.policy.wait(s, ws.slot_free[k]);
    ws.flush_copies(s);
    ws.policy.record(ws.packed[k], s);
    region_src_ = slot;
  }

  //! TransferOptions::checksum: chunk c's digest, in its status frame (before the chunk is sent).
  void checksum(std::size_t c) {
    if (!run_.opt.checksum || !failure_.empty()) return;
    const Chunk& ch = run_.plan.chunks[c];
    Hash64 h;
    for (std::size_t i = ch.begin; i < ch.end; ++i)
      if (const std::size_t nb = run_.metas[i].nbytes()) h.bytes(run_.ws.sources[i - ch.begin], nb);
    digests_[c] = h.value();
    if (!frames_written_) return;  // write_status_frames puts it there
    const std::size_t st = run_.status0() + c;
    run_.frame_host(st)->status.checksum = digests_[c];
    run_.ws.policy.copy_from_host(run_.frame_dev(st), run_.frame_host(st), kFrameBytes,
                                  run_.comm_stream());
  }

  //! After a failure the wire still carries the chunk's bytes: junk of the right size.
  void* junk_for(std::size_t c) {
    auto& ws = run_.ws;
    const std::size_t st = run_.status0() + c;
    Frame* ef = run_.frame_host(st);
    ef->fail(FrameCode::failed, failure_);
    ws.policy.copy_from_host(run_.frame_dev(st), ef, kFrameBytes, run_.comm_stream());
    const std::size_t bytes = run_.plan.chunks[c].bytes;
    if (ws.slot_bytes >= bytes) return ws.slots[c % run_.slots()].data();
    if (ws.scratch.size() < bytes) ws.scratch = ws.policy.alloc(max_chunk_bytes(run_.plan.chunks));
    return ws.scratch.data();
  }

  //! Enqueues chunk c's launches (see Split).
  void send(std::size_t c) {
    const Chunk& ch = run_.plan.chunks[c];
    if (ch.bytes == 0) return;  // a chunk of empty tensors has no wire operation
    auto& ws = run_.ws;
    auto& comm = run_.comm;
    const auto k = c % run_.slots();
    const auto& region = run_.plan.regions[c];
    void* junk = failure_.empty() ? nullptr : junk_for(c);
    const bool was_packed = region.bytes > 0 && !junk && region_src_ == ws.slots[k].data();
    const int root = run_.root;
    const auto cs = run_.comm_stream();
    const bool wait_in_region = run_.plan.splits[c] == Split::directs_first;
    // The stream waits for packing outside the group: a group is one launch on one stream order.
    if (was_packed && !wait_in_region) ws.policy.wait(cs, ws.packed[k]);
    launch_chunk(
        run_, c,
        [&] {
          if (run_.plan.framed)
            comm.broadcast(run_.frame_dev(run_.status0() + c), kFrameBytes, root, cs);
        },
        [&] {
          if (region.bytes == 0) return;
          if (was_packed && wait_in_region) ws.policy.wait(cs, ws.packed[k]);
          comm.broadcast(junk ? junk : const_cast<void*>(region_src_), region.bytes, root, cs);
        },
        [&] {
          for (std::size_t i = ch.begin; i < ch.end; ++i)
            if (run_.plan.direct[i])
              comm.broadcast(junk ? junk : const_cast<void*>(ws.sources[i - ch.begin]),
                             run_.metas[i].nbytes(), root, cs);
        },
        [] {}, [] {});
    ws.policy.record(ws.slot_free[k], cs);
  }

  Run run_;
  std::ranges::iterator_t<R> it_;
  std::ranges::sentinel_t<R> end_;
  std::size_t consumed_ = 0;
  const void* region_src_ = nullptr;
  std::string failure_;  // set once an item is wrong; every later frame and the ack carry it
  std::exception_ptr failure_ptr_;
  std::vector<std::uint64_t> digests_;  // TransferOptions::checksum: one per chunk
  bool frames_written_ = false;
};

}  // namespace weightsync::detail
