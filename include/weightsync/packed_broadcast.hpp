// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! packed_broadcast_producer / packed_broadcast_consumer: move an ordered list of named tensors from
//! the root to every other rank of a Communicator, generic over the device policy (CUDA or host).
//!
//! Wire (Protocol::weightsync, between this library's peers):
//!   1. handshake: every rank contributes a 256-byte frame (protocol version, role, packed, B, K,
//!      tensor count, total bytes, metadata digest) and every rank compares all of them; any
//!      difference throws protocol_error on every rank before a byte of weights moves;
//!   2. one operation per chunk of chunk_plan() (or per tensor when unpacked), fused with a 256-byte
//!      status frame (ok, or the producer's error and its message): a consumer never loads bytes
//!      of a failed chunk, and both sides keep the wire in step to the end of the plan;
//!   3. acknowledgement: every rank contributes a status frame again, so the producer learns that
//!      a consumer failed (and why), and a consumer learns that the producer did.
//! Protocol::vllm sends exactly what vLLM's packed/unpacked producer sends: one broadcast per
//! chunk, no handshake, no frames, no acknowledgement.
//!
//! Pipeline: K ring slots sized from the plan (the largest chunk that needs one), allocated once
//! and reused while the plan is unchanged; one communication stream; packing and unpacking on a
//! stream per slot, ordered with events, so chunk i+1's copy overlaps chunk i's broadcast. A chunk
//! that is a single tensor is sent from the tensor's own memory and, when the consumer gives a
//! destination, received straight into it. No device-wide synchronization; every host wait polls
//! with a progress deadline and aborts the communicator when it passes.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <iterator>
#include <optional>
#include <random>
#include <ranges>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "weightsync/chunk_plan.hpp"
#include "weightsync/concepts.hpp"
#include "weightsync/detail/format.hpp"
#include "weightsync/detail/wire.hpp"
#include "weightsync/dtype.hpp"
#include "weightsync/error.hpp"
#include "weightsync/info.hpp"
#include "weightsync/tensor_meta.hpp"

namespace weightsync {

//! What goes on the wire around the data.
enum class Protocol : std::uint8_t {
  weightsync,  //!< handshake, per-chunk status frames, acknowledgement (this library's peers)
  vllm,        //!< exactly vLLM's wire: the data broadcasts only
};

//! Options shared by producer and consumer. Both sides must agree on packed, B and K (the
//! handshake checks it).
struct TransferOptions {
  //! Chunk size B of the packed plan (vLLM's packed_buffer_size_bytes).
  std::size_t buffer_size_bytes = static_cast<std::size_t>(kDefaultPackedBufferSizeBytes);
  //! Ring slots K (vLLM's packed_num_buffers), 1..8.
  int num_buffers = kDefaultPackedNumBuffers;
  //! false: one broadcast per tensor (vLLM's unpacked path).
  bool packed = true;
  Protocol protocol = Protocol::weightsync;
  //! Bound on every wait for progress (one chunk, the handshake, the acknowledgement).
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
  //! Producer: the stream that produced the weights (cudaStream_t on the CUDA path); the producer
  //! orders its reads after the work already enqueued there. nullptr: none to wait for.
  void* source_stream = nullptr;
  //! Protocol::weightsync only, 0 = off: within a packed chunk, tensors of at least this many
  //! bytes travel as operations of their own (fused into the chunk's group) straight from their
  //! memory into their destination, instead of being copied into and out of a ring slot. The
  //! chunk plan (and so the memory bound) is unchanged. Both sides must agree (handshake).
  std::size_t direct_threshold_bytes = 0;
  //! Protocol::weightsync only: a chunk whose packed region is at least this large and which also
  //! has direct tensors goes out as two launches, so that the region's copy overlaps the direct
  //! tensors' transfer (the first chunk's packing, the last chunk's unpacking). Both sides must
  //! agree (handshake).
  std::size_t split_min_region_bytes = std::size_t{64} << 20;
  //! Consumer, optional: where a tensor should land (device memory of meta.nbytes() bytes), or
  //! nullptr to be handed a view instead. Tensors with a destination are written there directly
  //! (single-tensor chunks are received in place) and are not passed to load_weights.
  std::function<void*(const TensorMeta&)> destination;

  void validate() const {
    if (buffer_size_bytes == 0) throw config_error("buffer_size_bytes", "must be >= 1, got 0");
    if (num_buffers < 1 || num_buffers > kMaxPackedNumBuffers)
      throw config_error("num_buffers", detail::cat("must be in 1..", kMaxPackedNumBuffers, ", got ",
                                                    num_buffers));
    if (timeout.count() <= 0) throw config_error("timeout", "must be > 0");
  }
};

//! What a transfer did.
struct TransferStats {
  std::size_t tensors = 0;
  std::size_t chunks = 0;
  std::size_t bytes = 0;           //!< payload bytes (sum of tensor sizes)
  std::size_t slot_bytes = 0;      //!< capacity of one ring slot (0: none needed)
  std::size_t ring_bytes = 0;      //!< memory the ring holds (slots and frames)
  bool reused_ring = false;        //!< the ring of an earlier call was reused
  std::uint64_t contiguous_regions = 0;  //!< producer: regions sent without packing (cumulative)
};

namespace detail {

using Clock = std::chrono::steady_clock;

inline constexpr std::uint32_t kFrameMagic = 0x46535357u;  // "WSSF"
inline constexpr std::size_t kFrameBytes = 256;
enum class FrameKind : std::uint16_t { handshake = 1, status = 2, ack = 3 };
enum class FrameCode : std::uint16_t { ok = 0, failed = 1 };
enum class Role : std::uint8_t { producer = 1, consumer = 2 };

//! The fixed-size frame of the handshake, the status and the acknowledgement.
struct Frame {
  std::uint32_t magic = kFrameMagic;
  std::uint16_t version = kProtocolVersion;
  std::uint16_t kind = 0;
  std::uint16_t code = 0;
  std::uint8_t role = 0;
  std::uint8_t packed = 0;
  std::int32_t rank = -1;
  std::uint64_t transfer_id = 0;
  std::uint64_t chunk = 0;
  std::uint64_t tensor = 0;
  std::uint64_t buffer_size = 0;
  std::uint32_t num_buffers = 0;
  std::uint32_t chunk_rule = 0;
  std::uint64_t num_tensors = 0;
  std::uint64_t total_bytes = 0;
  std::uint64_t digest = 0;
  char message[kFrameBytes - 80] = {};

  void set_message(std::string_view m) {
    const std::size_t n = std::min(m.size(), sizeof message - 1);
    std::memcpy(message, m.data(), n);
    message[n] = '\0';
  }
  std::string text() const { return std::string(message, strnlen(message, sizeof message)); }
};
static_assert(sizeof(Frame) == kFrameBytes);
static_assert(std::is_trivially_copyable_v<Frame>);

//! FNV-1a over the ordered metadata: names, dtypes, shapes.
inline std::uint64_t metadata_digest(std::span<const TensorMeta> metas) {
  std::uint64_t h = 1469598103934665603ull;
  auto mix = [&](const void* p, std::size_t n) {
    auto* b = static_cast<const unsigned char*>(p);
    for (std::size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  };
  for (const auto& m : metas) {
    const std::uint64_t len = m.name.size();
    mix(&len, sizeof len);
    mix(m.name.data(), m.name.size());
    const auto dt = static_cast<std::uint8_t>(m.dtype);
    mix(&dt, 1);
    const std::uint64_t nd = m.shape.size();
    mix(&nd, sizeof nd);
    mix(m.shape.data(), m.shape.size() * sizeof(std::int64_t));
  }
  return h;
}

template <class C>
using policy_t = typename device_policy_for<typename C::stream_type>::type;

template <class Policy, class C>
Policy make_policy(C& comm) {
  if constexpr (requires { Policy(comm.device()); })
    return Policy(comm.device());
  else
    return Policy{};
}

}  // namespace detail

namespace detail {

//! Everything a Workspace holds; the pipeline works on this directly.
template <class Policy>
struct WorkspaceState {
  explicit WorkspaceState(Policy p) : policy(std::move(p)) {}

  //! Streams and events, created once per slot index.
  void ensure_streams(std::size_t count) {
    if (!comm_stream) comm_stream.emplace(policy.make_comm_stream());
    if (!done) done.emplace(policy.make_event());
    if (!source_ready) source_ready.emplace(policy.make_event());
    while (slot_streams.size() < count) {
      slot_streams.push_back(policy.make_stream());
      slot_free.push_back(policy.make_event());
      packed.push_back(policy.make_event());
      received.push_back(policy.make_event());
      received2.push_back(policy.make_event());
      unpacked.push_back(policy.make_event());
    }
  }
  //! @returns true when nothing had to be allocated.
  bool ensure_frames(std::size_t count) {
    if (frames_count == count) return true;
    frames = policy.alloc(count * kFrameBytes);
    frames_host = policy.alloc_host(count * kFrameBytes);
    frames_count = count;
    return false;
  }
  //! Slots only grow (a plan that needs less reuses them): a consumer that alternates between
  //! destinations and views does not reallocate every round. @returns true when nothing had to
  //! be allocated.
  bool ensure_slots(std::size_t bytes, std::size_t count) {
    ensure_streams(count);
    if (slots.size() == count && slot_bytes >= bytes) return true;
    bytes = std::max(bytes, slots.size() == count ? slot_bytes : 0);
    slots.clear();
    slot_bytes = 0;
    for (std::size_t i = 0; i < count; ++i) slots.push_back(policy.alloc(bytes));
    slot_bytes = bytes;
    return false;
  }

  Policy policy;
  std::optional<typename Policy::Stream> comm_stream;
  std::vector<typename Policy::Stream> slot_streams;
  std::vector<typename Policy::Event> slot_free, packed, received, received2, unpacked;
  std::optional<typename Policy::Event> done, source_ready;
  std::vector<typename Policy::Buffer> slots;
  std::size_t slot_bytes = 0;
  typename Policy::Buffer frames;
  typename Policy::HostBuffer frames_host;
  std::size_t frames_count = 0;
  typename Policy::Buffer scratch;
  std::uint64_t transfers = 0;
  std::uint64_t contiguous_regions = 0;  //!< regions sent or received in place (statistics)
  // Per-chunk lists, reserved once so that the chunk loop does not allocate.
  std::vector<const void*> sources;  // producer: the current chunk's item pointers
  std::vector<void*> copy_dst;
  std::vector<const void*> copy_src;
  std::vector<std::size_t> copy_size;
  std::vector<TensorView> views;
};

struct WorkspaceAccess;

}  // namespace detail

//! The ring and the other buffers a transfer needs, kept between calls. Slots are reallocated only
//! when the plan needs other slots (size or count), frames only when their count changes;
//! otherwise a transfer allocates nothing. Streams and events are created once. One workspace
//! serves one transfer at a time; it must not outlive the device it was made for.
template <class Policy>
class Workspace {
 public:
  using policy_type = Policy;
  using stream_type = typename Policy::stream_type;

  explicit Workspace(Policy policy = Policy{}) : st_(std::move(policy)) {}
  Workspace(Workspace&&) noexcept = default;
  Workspace& operator=(Workspace&&) noexcept = default;
  ~Workspace() = default;

  const Policy& policy() const noexcept { return st_.policy; }
  //! Capacity of one ring slot (0 when no chunk needs one).
  std::size_t slot_bytes() const noexcept { return st_.slot_bytes; }
  int num_slots() const noexcept { return static_cast<int>(st_.slots.size()); }
  //! Device (host, on the host policy) bytes held: slots, frames, and the error-path scratch.
  std::size_t device_bytes() const noexcept {
    return st_.slot_bytes * st_.slots.size() + st_.frames.size() + st_.scratch.size();
  }

 private:
  friend struct detail::WorkspaceAccess;
  detail::WorkspaceState<Policy> st_;
};

namespace detail {
struct WorkspaceAccess {
  template <class P>
  static WorkspaceState<P>& state(Workspace<P>& w) noexcept {
    return w.st_;
  }
};
}  // namespace detail

//! The workspace type for a communicator.
template <Communicator C>
using workspace_for = Workspace<detail::policy_t<C>>;

namespace detail {

//! One producer or consumer call: the plan, the frames, the waits.
template <class C>
struct PipelineRun {
  using Policy = policy_t<C>;
  using State = WorkspaceState<Policy>;
  using Event = typename Policy::Event;
  using stream_type = typename C::stream_type;

  C& comm;
  State& ws;
  const TransferOptions& opt;
  std::span<const TensorMeta> metas;
  int root;
  Role role;
  std::vector<Chunk> plan;
  bool framed;
  std::size_t total_bytes = 0;
  //! Per tensor: travels as an operation of its own (direct_threshold_bytes).
  std::vector<char> direct;
  //! Per chunk: bytes of the packed region (the tensors that are not direct), and the region's
  //! only non-empty tensor when it has exactly one (sent from and received into its own memory).
  struct Region {
    std::size_t bytes = 0;
    std::size_t solo = npos;
  };
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);
  std::vector<Region> regions;
  //! How a chunk goes out: one launch, or two so that a large region's copy hides behind the
  //! direct tensors (the first chunk's packing, the last chunk's unpacking). The status frame is
  //! always in the first launch. Decided from the plan alone, so both sides agree.
  enum class Split : std::uint8_t { none, directs_first, region_first };
  std::vector<Split> splits;

  PipelineRun(C& c, State& w, const TransferOptions& o, std::span<const TensorMeta> m, int r,
              Role ro)
      : comm(c), ws(w), opt(o), metas(m), root(r), role(ro) {
    opt.validate();
    if (root < 0 || root >= comm.size())
      throw config_error("root", cat("must be in 0..", comm.size() - 1, ", got ", root));
    if (role == Role::producer && comm.rank() != root)
      throw config_error("root", cat("the producer must run on the root rank ", root,
                                     ", this is rank ", comm.rank()));
    if (role == Role::consumer && comm.rank() == root)
      throw config_error("root", cat("the consumer must not run on the root rank ", root));
    for (const auto& meta : metas) total_bytes += meta.nbytes();  // validates every shape
    plan = opt.packed ? chunk_plan(metas, opt.buffer_size_bytes) : unpacked_plan(metas);
    framed = opt.protocol == Protocol::weightsync;
    if (!framed && opt.direct_threshold_bytes > 0)
      throw config_error("direct_threshold_bytes", "is not part of vLLM's wire (Protocol::vllm)");
    direct.assign(metas.size(), 0);
    regions.resize(plan.size());
    for (std::size_t ci = 0; ci < plan.size(); ++ci) {
      std::size_t nonzero = 0;
      for (std::size_t i = plan[ci].begin; i < plan[ci].end; ++i) {
        const std::size_t nb = metas[i].nbytes();
        direct[i] = framed && opt.direct_threshold_bytes > 0 && nb >= opt.direct_threshold_bytes;
        if (direct[i] || nb == 0) continue;
        regions[ci].bytes += nb;
        regions[ci].solo = i;
        ++nonzero;
      }
      if (nonzero != 1) regions[ci].solo = npos;
    }
    splits.assign(plan.size(), Split::none);
    for (std::size_t ci = 0; ci < plan.size(); ++ci) {
      bool has_direct = false;
      for (std::size_t i = plan[ci].begin; i < plan[ci].end; ++i) has_direct = has_direct || direct[i];
      if (!has_direct || regions[ci].bytes < opt.split_min_region_bytes ||
          regions[ci].solo != npos)
        continue;
      if (ci == 0) splits[ci] = Split::directs_first;
      else if (ci + 1 == plan.size()) splits[ci] = Split::region_first;
    }
  }

  // Frames: [0, world) is the gather area of the handshake and the acknowledgement; status frames
  // follow (one per chunk on the producer, one per slot on the consumer).
  std::size_t world() const { return static_cast<std::size_t>(comm.size()); }
  std::byte* frame_dev(std::size_t i) { return ws.frames.data() + i * kFrameBytes; }
  Frame* frame_host(std::size_t i) {
    return reinterpret_cast<Frame*>(ws.frames_host.data() + i * kFrameBytes);
  }
  stream_type comm_stream() { return ws.comm_stream->get(); }
  stream_type slot_stream(std::size_t k) { return ws.slot_streams[k].get(); }

  //! Aborts the communicator (if it can) so that no peer waits on us; never throws.
  void abort_comm(const std::string& why) noexcept {
    if constexpr (MonitoredCommunicator<C>) comm.abort(why);
  }

  //! Polls `ev` until it completes, checking the communicator, within opt.timeout.
  void await(const Event& ev, const std::string& phase) {
    if (ws.policy.ready(ev)) return;
    const auto deadline = Clock::now() + opt.timeout;
    auto next_check = Clock::now();
    // Spin (yielding) for the first 2 ms so that short waits end within microseconds, then poll
    // every 20 us.
    const auto spin_until = Clock::now() + std::chrono::milliseconds(2);
    while (!ws.policy.ready(ev)) {
      const auto now = Clock::now();
      if constexpr (MonitoredCommunicator<C>) {
        if (now >= next_check) {
          try {
            comm.check();
          } catch (const std::exception& e) {
            abort_comm(e.what());
            throw;
          }
          next_check = now + std::chrono::milliseconds(2);
        }
      }
      if (now >= deadline) {
        const std::string what = cat("no progress within ", opt.timeout.count(), " ms (rank ",
                                     comm.rank(), " of ", comm.size(), ", root ", root,
                                     "); a peer is stuck or gone; communicator aborted");
        abort_comm(phase + ": " + what);
        throw timeout_error(phase, -1, what);
      }
      if (now < spin_until)
        std::this_thread::yield();
      else
        std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

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

  //! Every rank contributes `mine`; returns all frames, indexed by rank.
  std::vector<Frame> allgather(Frame mine, const std::string& phase) {
    const std::size_t n = world();
    const auto me = static_cast<std::size_t>(comm.rank());
    *frame_host(me) = mine;
    ws.policy.copy_from_host(frame_dev(me), frame_host(me), kFrameBytes, comm_stream());
    group([&] {
      for (std::size_t r = 0; r < n; ++r)
        comm.broadcast(frame_dev(r), kFrameBytes, static_cast<int>(r), comm_stream());
    });
    ws.policy.copy_to_host(frame_host(0), frame_dev(0), n * kFrameBytes, comm_stream());
    ws.policy.record(*ws.done, comm_stream());
    await(*ws.done, phase);
    std::vector<Frame> out(frame_host(0), frame_host(0) + n);
    for (std::size_t r = 0; r < n; ++r)
      if (out[r].magic != kFrameMagic || out[r].rank != static_cast<std::int32_t>(r)) {
        abort_comm(phase + ": a peer sent garbage");
        throw protocol_error(static_cast<int>(r),
                             cat(phase, ": rank ", r, " sent no valid weightsync frame (is it a "
                                 "weightsync peer of protocol ", kProtocolVersion, "?)"));
      }
    return out;
  }

  //! Compares every rank's view of the transfer; throws the same protocol_error on every rank.
  //! @returns the transfer id chosen by the root.
  std::uint64_t handshake() {
    Frame f;
    f.kind = static_cast<std::uint16_t>(FrameKind::handshake);
    f.role = static_cast<std::uint8_t>(role);
    f.rank = comm.rank();
    f.packed = opt.packed ? 1 : 0;
    f.buffer_size = opt.buffer_size_bytes;
    f.num_buffers = static_cast<std::uint32_t>(opt.num_buffers);
    f.chunk_rule = static_cast<std::uint32_t>(std::min<std::size_t>(opt.direct_threshold_bytes, 0xffffffffu));
    f.chunk = opt.split_min_region_bytes;  // the handshake frame carries the split threshold here
    f.num_tensors = metas.size();
    f.total_bytes = total_bytes;
    f.digest = metadata_digest(metas);
    if (role == Role::producer) {
      // Unique per transfer; no need for /dev/urandom on every call.
      static const std::uint64_t seed = (std::uint64_t(std::random_device{}()) << 32) ^
                                        std::random_device{}();
      f.transfer_id = seed + 0x9e3779b97f4a7c15ull * ++ws.transfers;
    }
    const auto all = allgather(f, "handshake");
    const Frame& r0 = all[static_cast<std::size_t>(root)];
    std::string diffs;
    int first_bad = -1;
    auto note = [&](std::size_t r, const std::string& what) {
      if (first_bad < 0) first_bad = static_cast<int>(r);
      diffs += (diffs.empty() ? "" : "; ") + what;
    };
    auto diff = [&](std::size_t r, const char* field, auto root_value, auto value) {
      if (!(root_value == value))
        note(r, cat(field, " differs: rank ", root, " has ", root_value, ", rank ", r, " has ", value));
    };
    for (std::size_t r = 0; r < all.size(); ++r) {
      const Frame& x = all[r];
      const auto want = static_cast<int>(r) == root ? Role::producer : Role::consumer;
      if (x.role != static_cast<std::uint8_t>(want))
        note(r, cat("rank ", r, " runs as ", x.role == 1 ? "producer" : "consumer", " but the root is rank ",
                    root));
      if (static_cast<int>(r) == root) continue;
      diff(r, "protocol version", r0.version, x.version);
      diff(r, "packed", r0.packed ? "true" : "false", x.packed ? "true" : "false");
      if (r0.packed && x.packed) diff(r, "packed_buffer_size_bytes", r0.buffer_size, x.buffer_size);
      diff(r, "packed_num_buffers", r0.num_buffers, x.num_buffers);
      diff(r, "direct_threshold_bytes", r0.chunk_rule, x.chunk_rule);
      diff(r, "split_min_region_bytes", r0.chunk, x.chunk);
      diff(r, "tensor count", r0.num_tensors, x.num_tensors);
      diff(r, "total bytes", r0.total_bytes, x.total_bytes);
      if (r0.digest != x.digest)
        note(r, cat("metadata (names, dtypes, shapes) differs: rank ", root, " digest 0x", std::hex,
                    r0.digest, ", rank ", std::dec, r, " digest 0x", std::hex, x.digest));
    }
    if (!diffs.empty()) throw protocol_error(first_bad, "handshake: " + diffs);
    return r0.transfer_id;
  }

  //! Exchanges every rank's outcome of the transfer.
  std::vector<Frame> acknowledge(std::uint64_t id, const std::string& failure) {
    Frame f;
    f.kind = static_cast<std::uint16_t>(FrameKind::ack);
    f.role = static_cast<std::uint8_t>(role);
    f.rank = comm.rank();
    f.transfer_id = id;
    f.code = static_cast<std::uint16_t>(failure.empty() ? FrameCode::ok : FrameCode::failed);
    f.set_message(failure);
    return allgather(f, "acknowledgement");
  }

  void reserve_lists() {
    std::size_t m = 0;
    for (const auto& c : plan) m = std::max(m, c.size());
    ws.sources.reserve(m);
    ws.copy_dst.reserve(m);
    ws.copy_src.reserve(m);
    ws.copy_size.reserve(m);
    ws.views.reserve(m);
  }

  TransferStats stats(bool reused) const {
    TransferStats s;
    s.tensors = metas.size();
    s.chunks = plan.size();
    s.bytes = total_bytes;
    s.slot_bytes = ws.slot_bytes;
    s.ring_bytes = ws.slot_bytes * ws.slots.size() + ws.frames.size() + ws.scratch.size();
    s.reused_ring = reused;
    s.contiguous_regions = ws.contiguous_regions;
    return s;
  }
};

inline std::string describe_item_mismatch(const TensorMeta& want, const TensorMeta& got,
                                          std::size_t index) {
  std::string d;
  if (got.name != want.name) d += cat("name '", got.name, "' where '", want.name, "' was declared");
  if (got.dtype != want.dtype)
    d += cat(d.empty() ? "" : ", ", "dtype ", dtype_name(got.dtype), " where ",
             dtype_name(want.dtype), " was declared");
  if (got.shape != want.shape)
    d += cat(d.empty() ? "" : ", ", "shape ", shape_string(got.shape), " where ",
             shape_string(want.shape), " was declared");
  return cat("item ", index, " ('", want.name, "') does not match the declared metadata: ", d);
}

}  // namespace detail

//! Sends `metas.size()` tensors from `items` (in the declared order) to every other rank of `comm`.
//!
//! @param metas  the declared metadata, identical to what every consumer passes
//! @param items  a TensorIterator yielding exactly those tensors; each is checked (name, dtype,
//!               shape) before it is sent, and the count must match. Bytes must stay valid and
//!               unchanged until this returns.
//! @param comm   the group; this rank must be `root`
//! @param opt    see TransferOptions (source_stream: the stream that produced the weights)
//! @param ws     ring kept between calls (see Workspace)
//! @returns what was sent, once every operation it enqueued has completed.
//! @throws config_error for a bad option, or for an item that does not match its metadata (also
//!   delivered to every consumer, which throws remote_error; the communicator stays usable);
//!   remote_error when a consumer reports failure; protocol_error when the handshake finds a
//!   mismatch; timeout_error or peer_error when a peer is stuck or gone (the communicator is then
//!   aborted).
template <Communicator C, TensorIterator R>
TransferStats packed_broadcast_producer(std::span<const TensorMeta> metas, R&& items, C& comm,
                                        int root, const TransferOptions& opt,
                                        workspace_for<C>& workspace) {
  using namespace detail;
  using Split = typename PipelineRun<C>::Split;
  auto& ws = WorkspaceAccess::state(workspace);
  PipelineRun<C> run(comm, ws, opt, metas, root, Role::producer);
  auto& pol = ws.policy;
  const std::size_t n = run.plan.size();
  const auto K = static_cast<std::size_t>(opt.num_buffers);

  // Only a region of several tensors needs a slot; a lone tensor is sent from its own memory.
  std::size_t slot_bytes = 0;
  for (const auto& r : run.regions)
    if (r.solo == run.npos) slot_bytes = std::max(slot_bytes, r.bytes);
  const std::size_t status0 = run.world();
  bool reused = ws.ensure_frames(status0 + (run.framed ? n : 0));
  reused = ws.ensure_slots(slot_bytes, K) && reused;
  run.reserve_lists();

  std::string failure;  // set once an item is wrong; every later frame and the ack carry it
  std::exception_ptr failure_ptr;
  auto it = std::ranges::begin(items);
  auto end = std::ranges::end(items);
  std::size_t consumed = 0;
  const void* region_src = nullptr;

  // Checks chunk c's items and enqueues the packing of its region into slot c % K.
  auto prepare = [&](std::size_t c) {
    const Chunk& ch = run.plan[c];
    const auto k = c % K;
    ws.sources.clear();
    region_src = nullptr;
    if (failure.empty()) {
      try {
        for (std::size_t i = ch.begin; i < ch.end; ++i) {
          if (it == end)
            throw config_error("items", cat("the iterator ended after ", i, " tensors; ",
                                            metas.size(), " were declared"));
          auto&& item = *it;
          const TensorMeta& got = item.meta();
          if (!(got.name == metas[i].name && got.dtype == metas[i].dtype &&
                got.shape == metas[i].shape))
            throw config_error("items", describe_item_mismatch(metas[i], got, i));
          const void* p = item.data();
          if (p == nullptr && metas[i].nbytes() > 0)
            throw config_error("items", cat("item ", i, " ('", metas[i].name, "') has no data"));
          ws.sources.push_back(p);
          ++it;
          ++consumed;
        }
      } catch (const std::exception& e) {
        failure = e.what();
        failure_ptr = std::current_exception();
        // vLLM's wire has no way to say so: abort, so that no consumer waits on us.
        if (!run.framed) throw;
      }
    }
    const auto& region = run.regions[c];
    if (!failure.empty() || region.bytes == 0) return;
    if (region.solo != run.npos) {
      region_src = ws.sources[region.solo - ch.begin];
      return;
    }
    // Sources already laid out back to back in the declared order (a flat parameter buffer):
    // the region is sent from where it is, with no packing. The wire is the same.
    {
      const std::byte* next = nullptr;
      bool contiguous = true;
      for (std::size_t i = ch.begin; i < ch.end && contiguous; ++i) {
        const std::size_t nb = metas[i].nbytes();
        if (run.direct[i] || nb == 0) continue;
        const auto* p = static_cast<const std::byte*>(ws.sources[i - ch.begin]);
        contiguous = next == nullptr || p == next;
        if (next == nullptr) region_src = p;
        next = p + nb;
      }
      if (contiguous) {
        ws.contiguous_regions++;
        return;
      }
      region_src = nullptr;
    }
    auto* slot = ws.slots[k].data();
    ws.copy_dst.clear();
    ws.copy_src.clear();
    ws.copy_size.clear();
    std::size_t off = 0;
    for (std::size_t i = ch.begin; i < ch.end; ++i) {
      const std::size_t nb = metas[i].nbytes();
      if (run.direct[i] || nb == 0) continue;
      ws.copy_dst.push_back(slot + off);
      ws.copy_src.push_back(ws.sources[i - ch.begin]);
      ws.copy_size.push_back(nb);
      off += nb;
    }
    const auto s = run.slot_stream(k);
    pol.wait(s, ws.slot_free[k]);
    pol.copy_batch(ws.copy_dst.data(), ws.copy_src.data(), ws.copy_size.data(),
                   ws.copy_dst.size(), s);
    pol.record(ws.packed[k], s);
    region_src = slot;
  };

  // Enqueues chunk c's launches (see PipelineRun::Split).
  auto send = [&](std::size_t c) {
    const Chunk& ch = run.plan[c];
    if (ch.bytes == 0) return;  // a chunk of empty tensors has no wire operation
    const auto k = c % K;
    const auto& region = run.regions[c];
    const void* junk = nullptr;  // failed: the wire still carries the chunk's bytes
    if (!failure.empty()) {
      Frame* ef = run.frame_host(status0 + c);
      ef->code = static_cast<std::uint16_t>(FrameCode::failed);
      ef->tensor = consumed;
      ef->set_message(failure);
      pol.copy_from_host(run.frame_dev(status0 + c), ef, kFrameBytes, run.comm_stream());
      if (ws.slot_bytes >= ch.bytes) {
        junk = ws.slots[k].data();
      } else {
        if (ws.scratch.size() < ch.bytes) ws.scratch = pol.alloc(max_chunk_bytes(run.plan));
        junk = ws.scratch.data();
      }
    }
    const bool was_packed = region.bytes > 0 && !junk && region_src == ws.slots[k].data();
    auto status = [&] {
      if (run.framed)
        comm.broadcast(run.frame_dev(status0 + c), kFrameBytes, root, run.comm_stream());
    };
    auto region_op = [&] {
      if (region.bytes == 0) return;
      if (was_packed) pol.wait(run.comm_stream(), ws.packed[k]);
      comm.broadcast(const_cast<void*>(junk ? junk : region_src), region.bytes, root,
                     run.comm_stream());
    };
    auto direct_ops = [&] {
      for (std::size_t i = ch.begin; i < ch.end; ++i)
        if (run.direct[i])
          comm.broadcast(const_cast<void*>(junk ? junk : ws.sources[i - ch.begin]),
                         metas[i].nbytes(), root, run.comm_stream());
    };
    // The stream waits for packing outside the group: a group is one launch on one stream order.
    if (was_packed && run.splits[c] != Split::directs_first) pol.wait(run.comm_stream(), ws.packed[k]);
    switch (run.splits[c]) {
      case Split::none:
        run.group([&] {
          status();
          if (region.bytes > 0)
            comm.broadcast(const_cast<void*>(junk ? junk : region_src), region.bytes, root,
                           run.comm_stream());
          direct_ops();
        });
        break;
      case Split::directs_first:
        run.group([&] {
          status();
          direct_ops();
        });
        region_op();
        break;
      case Split::region_first:
        run.group([&] {
          status();
          comm.broadcast(const_cast<void*>(junk ? junk : region_src), region.bytes, root,
                         run.comm_stream());
        });
        run.group(direct_ops);
        break;
    }
    pol.record(ws.slot_free[k], run.comm_stream());
  };

  std::vector<Frame> acks;
  try {
    // Order every read of the weights after the work already enqueued on the producing stream.
    if (opt.source_stream) {
      pol.record(*ws.source_ready, pol.external_stream(opt.source_stream));
      pol.wait(run.comm_stream(), *ws.source_ready);
      for (std::size_t k = 0; k < K; ++k) pol.wait(run.slot_stream(k), *ws.source_ready);
    }
    if (n > 0) prepare(0);  // the first packing overlaps the handshake
  } catch (const std::exception& e) {
    run.abort_comm(e.what());
    throw;
  }
  // A mismatch throws the same protocol_error on every rank; the communicator stays usable.
  const std::uint64_t id = run.framed ? run.handshake() : 0;
  try {
    if (run.framed && n > 0) {
      for (std::size_t c = 0; c < n; ++c) {
        Frame f;
        f.kind = static_cast<std::uint16_t>(FrameKind::status);
        f.rank = comm.rank();
        f.transfer_id = id;
        f.chunk = c;
        *run.frame_host(status0 + c) = f;
      }
      pol.copy_from_host(run.frame_dev(status0), run.frame_host(status0), n * kFrameBytes,
                         run.comm_stream());
    }
    for (std::size_t c = 0; c < n; ++c) {
      send(c);
      if (c + 1 < n) {
        // Bound the run-ahead to K chunks, and give the deadline a chance to fire.
        if (c + 1 >= K) run.await(ws.slot_free[(c + 1) % K], "broadcast");
        prepare(c + 1);
      }
    }
    if (failure.empty() && it != end) {
      config_error extra("items", cat("the iterator yields more than the ", metas.size(),
                                      " tensors declared"));
      failure = extra.what();
      failure_ptr = std::make_exception_ptr(extra);
    }
    if (run.framed) acks = run.acknowledge(id, failure);
    pol.record(*ws.done, run.comm_stream());
    run.await(*ws.done, "broadcast");
  } catch (const std::exception& e) {
    // Operations may be in flight or a peer may be waiting on us: fail fast on every rank.
    run.abort_comm(e.what());
    throw;
  }
  if (failure_ptr) std::rethrow_exception(failure_ptr);
  for (const auto& a : acks)
    if (a.code != static_cast<std::uint16_t>(FrameCode::ok))
      throw remote_error(a.rank, cat("rank ", a.rank, " failed to receive the weights: ", a.text()));
  return run.stats(reused);
}

//! As above, with a workspace used for this call only.
template <Communicator C, TensorIterator R>
TransferStats packed_broadcast_producer(std::span<const TensorMeta> metas, R&& items, C& comm,
                                        int root, const TransferOptions& opt = {}) {
  workspace_for<C> ws(detail::make_policy<detail::policy_t<C>>(comm));
  return packed_broadcast_producer(metas, std::forward<R>(items), comm, root, opt, ws);
}

//! Receives `metas.size()` tensors from `root` and hands them to `load_weights`, one call per chunk
//! (tensors with a destination, see TransferOptions::destination, are written there instead).
//!
//! @param load_weights  LoadWeightsFn: (std::span<const TensorView>, stream) -> void. Views are valid
//!   only during the call; work it enqueues on the stream may still read them. A zero-size
//!   tensor's view has a null data pointer. If it throws, the consumer keeps the wire in step to the
//!   end of the plan without loading more, reports the failure to every rank, and rethrows it.
//! @returns once every tensor has landed and every operation it enqueued has completed.
//! @throws remote_error when the producer reports failure (nothing of the failed chunk or later
//!   chunks is loaded; the communicator stays usable), protocol_error on a handshake mismatch or a
//!   desynchronised frame, timeout_error or peer_error when a peer is stuck or gone (the
//!   communicator is then aborted), and whatever load_weights throws.
template <Communicator C, class F>
  requires LoadWeightsFn<F, typename C::stream_type>
TransferStats packed_broadcast_consumer(std::span<const TensorMeta> metas, C& comm, int root,
                                        F&& load_weights, const TransferOptions& opt,
                                        workspace_for<C>& workspace) {
  using namespace detail;
  using Split = typename PipelineRun<C>::Split;
  auto& ws = WorkspaceAccess::state(workspace);
  PipelineRun<C> run(comm, ws, opt, metas, root, Role::consumer);
  auto& pol = ws.policy;
  const std::size_t n = run.plan.size();
  const auto K = static_cast<std::size_t>(opt.num_buffers);
  const std::size_t status0 = run.world();
  bool reused = ws.ensure_frames(status0 + (run.framed ? K : 0));
  ws.ensure_streams(K);

  std::string failure;  // our own failure (load_weights threw)
  std::exception_ptr failure_ptr;
  std::string remote;  // the producer's failure, from a status frame or its acknowledgement
  int remote_rank = root;
  // The handshake runs before any destination is asked for: a mismatch touches nothing, and the
  // communicator stays usable.
  const std::uint64_t id = run.framed ? run.handshake() : 0;
  try {
    std::vector<void*> dest(metas.size(), nullptr);
    if (opt.destination)
      for (std::size_t i = 0; i < metas.size(); ++i) dest[i] = opt.destination(metas[i]);
    // Slot layout of a chunk: the packed region first, then the direct tensors that have no
    // destination. A region of one tensor with a destination, and direct tensors with one, are
    // received in place.
    // Where a region lands in place: its only tensor's destination, or the first destination when
    // every tensor of the region has one and they lie back to back in the declared order.
    std::vector<std::byte*> region_dest(n, nullptr);
    for (std::size_t c = 0; c < n; ++c) {
      const auto solo = run.regions[c].solo;
      if (solo != run.npos) {
        region_dest[c] = static_cast<std::byte*>(dest[solo]);
        continue;
      }
      std::byte* first = nullptr;
      std::byte* next = nullptr;
      bool ok = run.regions[c].bytes > 0;
      for (std::size_t i = run.plan[c].begin; i < run.plan[c].end && ok; ++i) {
        const std::size_t nb = metas[i].nbytes();
        if (run.direct[i] || nb == 0) continue;
        auto* d = static_cast<std::byte*>(dest[i]);
        ok = d != nullptr && (next == nullptr || d == next);
        if (!first) first = d;
        next = d + nb;
      }
      if (ok) region_dest[c] = first;
    }
    auto region_in_place = [&](std::size_t c) { return region_dest[c] != nullptr; };
    std::size_t slot_bytes = 0;
    for (std::size_t c = 0; c < n; ++c) {
      std::size_t need = region_in_place(c) ? 0 : run.regions[c].bytes;
      for (std::size_t i = run.plan[c].begin; i < run.plan[c].end; ++i)
        if (run.direct[i] && !dest[i]) need += metas[i].nbytes();
      slot_bytes = std::max(slot_bytes, need);
    }
    reused = ws.ensure_slots(slot_bytes, K) && reused;
    run.reserve_lists();

    // Enqueues the receiving launches of chunk c (the same launches the producer makes).
    auto post = [&](std::size_t c) {
      const Chunk& ch = run.plan[c];
      if (ch.bytes == 0) return;
      const auto k = c % K;
      pol.wait(run.comm_stream(), ws.unpacked[k]);  // the slot's previous chunk is loaded
      const auto& region = run.regions[c];
      auto* slot = ws.slots[k].data();
      auto status = [&] {
        if (run.framed)
          comm.broadcast(run.frame_dev(status0 + k), kFrameBytes, root, run.comm_stream());
      };
      auto region_op = [&] {
        if (region.bytes > 0)
          comm.broadcast(region_in_place(c) ? region_dest[c] : slot, region.bytes, root,
                         run.comm_stream());
      };
      auto direct_ops = [&] {
        std::size_t off = region_in_place(c) ? 0 : region.bytes;
        for (std::size_t i = ch.begin; i < ch.end; ++i) {
          if (!run.direct[i]) continue;
          const std::size_t nb = metas[i].nbytes();
          comm.broadcast(dest[i] ? dest[i] : slot + off, nb, root, run.comm_stream());
          if (!dest[i]) off += nb;
        }
      };
      auto frame_to_host = [&] {
        if (run.framed)
          pol.copy_to_host(run.frame_host(status0 + k), run.frame_dev(status0 + k), kFrameBytes,
                           run.comm_stream());
      };
      switch (run.splits[c]) {
        case Split::none:
          run.group([&] {
            status();
            region_op();
            direct_ops();
          });
          frame_to_host();
          pol.record(ws.received[k], run.comm_stream());
          break;
        case Split::directs_first:
          run.group([&] {
            status();
            direct_ops();
          });
          frame_to_host();
          pol.record(ws.received[k], run.comm_stream());
          region_op();
          pol.record(ws.received2[k], run.comm_stream());
          break;
        case Split::region_first:
          run.group([&] {
            status();
            region_op();
          });
          frame_to_host();
          pol.record(ws.received[k], run.comm_stream());
          run.group(direct_ops);
          pol.record(ws.received2[k], run.comm_stream());
          break;
      }
    };

    // Writes the region's tensors that have a destination (slot -> destination), on stream s.
    auto scatter_region = [&](std::size_t c, typename C::stream_type s) {
      const Chunk& ch = run.plan[c];
      if (region_in_place(c) || run.regions[c].bytes == 0) return;
      auto* slot = ws.slots[c % K].data();
      ws.copy_dst.clear();
      ws.copy_src.clear();
      ws.copy_size.clear();
      std::size_t off = 0;
      for (std::size_t i = ch.begin; i < ch.end; ++i) {
        const std::size_t nb = metas[i].nbytes();
        if (run.direct[i] || nb == 0) continue;
        if (dest[i]) {
          ws.copy_dst.push_back(dest[i]);
          ws.copy_src.push_back(slot + off);
          ws.copy_size.push_back(nb);
        }
        off += nb;
      }
      if (!ws.copy_dst.empty())
        pol.copy_batch(ws.copy_dst.data(), ws.copy_src.data(), ws.copy_size.data(),
                       ws.copy_dst.size(), s);
    };

    // The views handed to load_weights: tensors without a destination.
    auto build_views = [&](std::size_t c) {
      const Chunk& ch = run.plan[c];
      ws.views.clear();
      const bool in_place = region_in_place(c);
      auto* slot = ws.slots[c % K].data();
      std::size_t off = 0;
      std::size_t direct_off = in_place ? 0 : run.regions[c].bytes;
      for (std::size_t i = ch.begin; i < ch.end; ++i) {
        const std::size_t nb = metas[i].nbytes();
        if (run.direct[i]) {
          if (!dest[i]) {
            ws.views.push_back(TensorView{&metas[i], slot + direct_off, nb});
            direct_off += nb;
          }
          continue;
        }
        if (!in_place && nb) off += nb;
        if (dest[i] || (in_place && i == run.regions[c].solo)) continue;
        ws.views.push_back(TensorView{&metas[i], nb && !in_place ? slot + off - nb : nullptr, nb});
      }
    };

    std::size_t posted = 0;
    for (std::size_t c = 0; c < n; ++c) {
      while (posted < n && posted < c + K) post(posted++);
      const Chunk& ch = run.plan[c];
      const auto k = c % K;
      const auto s = run.slot_stream(k);
      const Split split = run.splits[c];
      if (ch.bytes > 0) {
        run.await(ws.received[k], "broadcast");
        if (run.framed) {
          const Frame f = *run.frame_host(status0 + k);
          if (f.magic != kFrameMagic || f.kind != static_cast<std::uint16_t>(FrameKind::status) ||
              f.transfer_id != id)
            throw protocol_error(root, cat("chunk ", c, ": the status frame from rank ", root,
                                           " is not this transfer's (desynchronised peers)"));
          if (f.code != static_cast<std::uint16_t>(FrameCode::ok)) {
            if (remote.empty()) {
              remote = f.text();
              remote_rank = f.rank;
            }
          } else if (f.chunk != c) {
            throw protocol_error(root, cat("expected chunk ", c, " from rank ", root, ", got chunk ",
                                           f.chunk, " (desynchronised peers)"));
          }
        }
        const bool ok = failure.empty() && remote.empty();
        pol.wait(s, ws.received[k]);
        // The region arrived with the first launch: unpack it while the direct tensors arrive.
        if (ok && split == Split::region_first) scatter_region(c, s);
        if (split != Split::none) {
          run.await(ws.received2[k], "broadcast");
          pol.wait(s, ws.received2[k]);
        }
        if (ok && split != Split::region_first) scatter_region(c, s);
      }
      if (failure.empty() && remote.empty()) {
        build_views(c);
        if (!ws.views.empty()) {
          try {
            std::invoke(load_weights, std::span<const TensorView>(ws.views), s);
          } catch (const std::exception& e) {
            failure = cat("load_weights failed on chunk ", c, ": ", e.what());
            failure_ptr = std::current_exception();
          } catch (...) {
            failure = cat("load_weights failed on chunk ", c, " (not a std::exception)");
            failure_ptr = std::current_exception();
          }
          // vLLM's wire has no way to say so: abort, so that the producer does not wait on us.
          if (failure_ptr && !run.framed) std::rethrow_exception(failure_ptr);
        }
      }
      pol.record(ws.unpacked[k], s);
    }
    std::vector<Frame> acks;
    if (run.framed) acks = run.acknowledge(id, failure);
    for (std::size_t k = 0; k < K; ++k) run.await(ws.unpacked[k], "unpack");
    pol.record(*ws.done, run.comm_stream());
    run.await(*ws.done, "broadcast");
    for (const auto& a : acks)
      if (a.rank == root && a.code != static_cast<std::uint16_t>(FrameCode::ok) && remote.empty()) {
        remote = a.text();
        remote_rank = root;
      }
  } catch (...) {
    run.abort_comm(failure.empty() ? "consumer failed" : failure);
    throw;
  }
  if (failure_ptr) std::rethrow_exception(failure_ptr);
  if (!remote.empty())
    throw remote_error(remote_rank, cat("the producer (rank ", remote_rank, ") failed: ", remote));
  return run.stats(reused);
}

//! As above, with a workspace used for this call only.
template <Communicator C, class F>
  requires LoadWeightsFn<F, typename C::stream_type>
TransferStats packed_broadcast_consumer(std::span<const TensorMeta> metas, C& comm, int root,
                                        F&& load_weights, const TransferOptions& opt = {}) {
  workspace_for<C> ws(detail::make_policy<detail::policy_t<C>>(comm));
  return packed_broadcast_consumer(metas, comm, root, std::forward<F>(load_weights), opt, ws);
}

}  // namespace weightsync
