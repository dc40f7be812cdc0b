// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! PipelineRun: the context of one collective transfer (producer or consumer) — the group, the
//! workspace, the options, the plan — and the three things every step of it needs: bounded waits
//! that watch the group, fused launches, and the frames area.

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "weightsync/concepts.hpp"
#include "weightsync/detail/format.hpp"
#include "weightsync/detail/frame.hpp"
#include "weightsync/pipeline/detail/plan.hpp"
#include "weightsync/pipeline/detail/wait.hpp"
#include "weightsync/error.hpp"
#include "weightsync/tensor_meta.hpp"
#include "weightsync/transfer_options.hpp"
#include "weightsync/workspace.hpp"

namespace weightsync::detail {

//! Whether the framed wire's exchanges of communicator C run in pinned host memory: C opts in
//! (PinnedHostCommunicator) and WEIGHTSYNC_EXCHANGE is not "device" (read once).
template <class C>
bool exchange_in_host_memory() {
  if constexpr (PinnedHostCommunicator<C>) {
    static const bool on = [] {
      const char* v = std::getenv("WEIGHTSYNC_EXCHANGE");
      return v == nullptr || std::string_view(v) != "device";
    }();
    return on;
  } else {
    return false;
  }
}

//! The layout of the next handshake on `c`: the roots of the last transfer every rank agreed on
//! have wide blocks when it said so (WireState), every other block is the base size.
template <class C>
HandshakeLayout next_handshake_layout(C& c) {
  const auto world = static_cast<std::size_t>(c.size());
  if constexpr (WireStateCommunicator<C>) {
    const WireState& w = c.wire_state();
    return HandshakeLayout::of(world, w.wide_first, w.wide_count);
  }
  return HandshakeLayout::of(world, 0, 0);
}

//! The points of one transfer (see PipelineRun::trace), kept only when WEIGHTSYNC_TRACE=phases
//! (read once); a transfer that completes writes them to stderr as one line (see line()).
class PhaseTrace {
 public:
  //! Keeps points when `on` (by default: WEIGHTSYNC_TRACE=phases).
  explicit PhaseTrace(std::chrono::steady_clock::time_point t0, bool on = enabled())
      : on_(on), t0_(t0) {}
  static bool enabled() {
    static const bool on = [] {
      const char* v = std::getenv("WEIGHTSYNC_TRACE");
      return v != nullptr && std::string_view(v) == "phases";
    }();
    return on;
  }
  //! Notes `point` (a string literal) now.
  void mark(const char* point) {
    if (!on_ || count_ == kMax) return;
    points_[count_++] = {point, std::chrono::steady_clock::now()};
  }
  //! The points as one line: "weightsync trace rank R ROLE: point US, point US, ..." (US:
  //! microseconds since the transfer began, to a tenth); "" when off or empty.
  std::string line(int rank, const char* role) const {
    if (!on_ || count_ == 0) return "";
    std::string out = cat("weightsync trace rank ", rank, " ", role, ":");
    for (std::size_t i = 0; i < count_; ++i) {
      const double us = std::chrono::duration<double, std::micro>(points_[i].at - t0_).count();
      char num[32];
      std::snprintf(num, sizeof num, "%.1f", us);
      out += cat(" ", points_[i].name, " ", num, i + 1 < count_ ? "," : "");
    }
    return out;
  }
  //! Whether points are kept.
  bool on() const noexcept { return on_; }
  //! Writes line() to stderr, when on.
  void report(int rank, const char* role) const {
    const std::string l = line(rank, role);
    if (!l.empty()) std::fprintf(stderr, "%s\n", l.c_str());
  }
  //! At most this many points are kept; later marks are dropped.
  static constexpr std::size_t kMax = 24;

 private:
  struct Point {
    const char* name;
    std::chrono::steady_clock::time_point at;
  };
  bool on_;
  std::chrono::steady_clock::time_point t0_;
  std::array<Point, kMax> points_{};
  std::size_t count_ = 0;
};

template <class C>
struct PipelineRun {
  using Policy = policy_t<C>;
  using State = WorkspaceState<Policy>;
  using Event = typename Policy::Event;
  using stream_type = typename C::stream_type;

  //! When the transfer began, before its plan (the phase trace's origin).
  const std::chrono::steady_clock::time_point begun = std::chrono::steady_clock::now();
  C& comm;
  State& ws;
  const TransferOptions& opt;
  std::span<const TensorMeta> metas;
  //! The reference rank: the root of a whole-tensor transfer, this rank for a trainer of a sharded
  //! one, else 0 (what timeouts name; the handshake compares every rank with plan's reference).
  int root;
  Role role;
  //! The plan (shared with the workspace's PlanCache when it came from there) and a name for it.
  std::shared_ptr<const PiecePlan> plan_holder;
  const PiecePlan& plan;
  //! The metadata digest, when the plan's making computed it (PlanCache::whole): the handshake
  //! then does not compare the list with the digest cache's a second time.
  std::optional<std::uint64_t> metadata_digest;
  //! Where each rank's block lies in this transfer's handshake (its frame, then its eager bytes),
  //! fixed when the transfer begins (the handshake decides the next one's: WireState).
  const HandshakeLayout layout;

  //! `plan` is built (or taken from the workspace's cache) after the options are validated and the
  //! roles checked (make_plan returns a shared_ptr<const PiecePlan>).
  template <class MakePlan>
  PipelineRun(C& c, State& w, const TransferOptions& o, std::span<const TensorMeta> m, int r,
              Role ro, MakePlan&& make_plan)
      : comm(c),
        ws(w),
        opt((o.validate(), o)),
        metas(m),
        root(r),
        role(ro),
        plan_holder(make_plan()),
        plan(*plan_holder),
        layout(next_handshake_layout(c)) {
    ws.reserve_lists(plan.max_chunk_pieces());
    trace.mark("planned");
  }

  // Frames: [0, world) is the gather area of the handshake and the acknowledgement; status frames
  // follow (one per chunk on the producer, one per slot on the consumer).
  std::size_t world() const { return static_cast<std::size_t>(comm.size()); }
  std::size_t status0() const { return world(); }
  std::byte* frame_dev(std::size_t i) { return ws.frames.data() + i * kFrameBytes; }
  Frame* frame_host(std::size_t i) {
    return reinterpret_cast<Frame*>(ws.frames_host.data() + i * kFrameBytes);
  }
  //! The handshake and the acknowledgement exchange their blocks in pinned host memory (see
  //! PinnedHostCommunicator), unless WEIGHTSYNC_EXCHANGE=device: then on the device, copied to the
  //! host after each exchange.
  const bool host_exchange = exchange_in_host_memory<C>();
  //! The workspace's handshake area, sized for wide blocks from the first transfer on: blocks that
  //! widen later allocate nothing.
  void ensure_handshake_area() { ws.ensure_handshake(HandshakeLayout::largest(world())); }
  //! How many bytes rank r can send with this transfer's handshake.
  std::size_t eager_capacity(std::size_t r) const { return layout.capacity(r); }
  //! Rank r's eager bytes where the handshake exchanges them (eager_capacity(r) of them):
  //! in ws.handshake_host when host_exchange, else in ws.handshake.
  std::byte* eager_at(std::size_t r) {
    return (host_exchange ? ws.handshake_host.data() : ws.handshake.data()) + eager_offset(r);
  }
  //! The same bytes' place in the device area ws.handshake (where a consumer's views of them
  //! lie when host_exchange: load_weights gets device memory).
  std::byte* eager_dev(std::size_t r) { return ws.handshake.data() + eager_offset(r); }
  std::size_t eager_offset(std::size_t r) const {
    return layout.offset(r) + kFrameBytes;
  }
  //! This transfer's bytes travel inside the handshake (see kFrameEager); set by the handshake.
  bool eager = false;
  stream_type comm_stream() { return ws.comm_stream->get(); }
  stream_type slot_stream(std::size_t k) { return ws.slot_streams[k].get(); }
  std::size_t slots() const { return static_cast<std::size_t>(opt.num_buffers); }

  //! Producer: orders every read of the weights on the communication stream after the work
  //! already enqueued on the producing stream (TransferOptions::source_stream).
  void order_after_source() {
    if (!opt.source_stream) return;
    ws.policy.record(*ws.source_ready, ws.policy.external_stream(opt.source_stream));
    ws.policy.wait(comm_stream(), *ws.source_ready);
  }
  //! The same for the slot streams (after order_after_source), where a data phase packs; an eager
  //! transfer reads the weights on the communication stream only.
  void order_slots_after_source() {
    if (!opt.source_stream) return;
    for (std::size_t k = 0; k < slots(); ++k) ws.policy.wait(slot_stream(k), *ws.source_ready);
  }

  //! Aborts the communicator (if it can) so that no peer waits on us; never throws.
  void abort_comm(const std::string& why) noexcept {
    if constexpr (MonitoredCommunicator<C>) comm.abort(why);
  }

  //! Waits for `ev` within opt.timeout, watching the communicator; aborts it on failure.
  void await(const Event& ev, const std::string& phase) {
    bounded_wait([&] { return ws.policy.ready(ev); }, opt.timeout,
                 [&] {
                   if constexpr (MonitoredCommunicator<C>) {
                     try {
                       comm.check();
                     } catch (const std::exception& e) {
                       abort_comm(e.what());
                       throw;
                     }
                   }
                 },
                 [&] {
                   const std::string what =
                       cat("no progress within ", opt.timeout.count(), " ms (rank ", comm.rank(),
                           " of ", comm.size(), ", root ", root,
                           "); a peer is stuck or gone; communicator aborted");
                   abort_comm(phase + ": " + what);
                   throw timeout_error(phase, -1, what);
                 });
  }
  //! Enqueues a completion marker on the communication stream and waits for it.
  void drain(const std::string& phase) {
    ws.policy.record(*ws.done, comm_stream());
    await(*ws.done, phase);
  }

  //! Runs `f`'s operations as one launch when the communicator can fuse them.
  template <class F>
  void group(F&& f) {
    if constexpr (GroupedCommunicator<C>) {
      comm.group_start();
      try {
        f();
      } catch (...) {
        comm.group_end();
        throw;
      }
      comm.group_end();
    } else {
      f();
    }
  }

  // Phase clock (see TransferStats) and progress (see TransferProgress).
  using Clock = std::chrono::steady_clock;
  Clock::time_point started = Clock::now(), data_started = started, data_ended = started;
  //! WEIGHTSYNC_TRACE=phases: the points a transfer passed, with their times, written to stderr
  //! (one line per transfer) when it ends. For taking a sync's fixed cost apart; off by default,
  //! when a mark costs one test of a bool.
  PhaseTrace trace{begun};
  std::chrono::nanoseconds load_time{0};
  std::size_t bytes_done = 0, chunks_done = 0;

  //! The handshake is over: the data phase begins (and progress reports 0 bytes).
  void begin_data() {
    data_started = data_ended = Clock::now();
    report();
  }
  //! Step s is done on this rank.
  void step_done(std::size_t s) {
    bytes_done += plan.step_bytes[s];
    ++chunks_done;
    data_ended = Clock::now();
    report();
  }
  //! This rank's data is complete (after the last step; also for a plan without steps).
  void end_data() {
    data_ended = Clock::now();
    if (plan.steps == 0) report();
  }
  void report() const {
    if (!opt.progress) return;
    TransferProgress p;
    p.bytes_done = bytes_done;
    p.bytes_total = plan.total_bytes;
    p.chunk = chunks_done;
    p.chunks = plan.steps;
    p.elapsed = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - data_started);
    opt.progress(p);
  }

  TransferStats stats(bool reused) const {
    TransferStats s;
    const auto now = Clock::now();
    using ns = std::chrono::nanoseconds;
    s.handshake = std::chrono::duration_cast<ns>(data_started - started);
    s.data = std::chrono::duration_cast<ns>(data_ended - data_started);
    s.load = load_time;
    s.finish = std::chrono::duration_cast<ns>(now - data_ended);
    s.total = std::chrono::duration_cast<ns>(now - started);
    s.tensors = metas.size();
    s.chunks = plan.total_chunks;
    s.bytes = plan.total_bytes;
    s.slot_bytes = ws.slot_bytes;
    s.ring_bytes = ws.bytes_held();
    s.reused_ring = reused;
    s.contiguous_regions = ws.contiguous_regions;
    return s;
  }
};

//! Enqueues step `s`'s operations in the order every rank agrees on (see Split): `status`,
//! `regions` and `directs` enqueue the step's status frames, packed regions and direct pieces;
//! `between` runs between the two launches of a split step (the producer's wait for its packing),
//! `first_done` after the first launch (the one that holds the status frames), `second_done` after
//! the second, when there is one.
template <class Run, class Status, class Regions, class Directs, class Between, class FirstDone,
          class SecondDone>
void launch_step(Run& run, std::size_t s, Status&& status, Regions&& regions, Directs&& directs,
                 Between&& between, FirstDone&& first_done, SecondDone&& second_done) {
  switch (run.plan.splits[s]) {
    case Split::none:
      run.group([&] {
        status();
        regions();
        directs();
      });
      first_done();
      break;
    case Split::directs_first:
      run.group([&] {
        status();
        directs();
      });
      first_done();
      between();
      run.group(regions);
      second_done();
      break;
    case Split::region_first:
      run.group([&] {
        status();
        regions();
      });
      first_done();
      between();
      run.group(directs);
      second_done();
      break;
  }
}

}  // namespace weightsync::detail
