// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Workspace: the ring of K slots, the frames, the streams and events a collective transfer
//! needs, kept between calls so that a steady-state transfer allocates nothing.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "weightsync/concepts.hpp"
#include "weightsync/detail/batch_memo.hpp"
#include "weightsync/detail/digest.hpp"
#include "weightsync/detail/frame.hpp"
#include "weightsync/pipeline/detail/plan.hpp"
#include "weightsync/tensor_meta.hpp"

namespace weightsync {

namespace detail {

template <class C>
using policy_t = typename device_policy_for<typename C::stream_type>::type;

//! The device policy for a communicator: on its device when it has one.
template <class Policy, class C>
Policy make_policy(C& comm) {
  if constexpr (requires { Policy(comm.device()); })
    return Policy(comm.device());
  else
    return Policy{};
}

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
      hashed.push_back(policy.make_event());
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
  //! The handshake area: one block per rank (its frame, then its eager bytes; see
  //! PipelineRun::block), on the device and mirrored on the host. Only grows.
  void ensure_handshake(std::size_t bytes) {
    if (handshake.size() >= bytes) return;
    handshake = policy.alloc(bytes);
    handshake_host = policy.alloc_host(bytes);
  }
  //! TransferOptions::checksum: `count` chunk digests on the device (per step of a root, per step
  //! and root on a consumer) and their host mirror. Only grows.
  void ensure_digests(std::size_t count) {
    if (digest_count >= count) return;
    digest_sums = policy.alloc(count * sizeof(std::uint64_t));
    digest_host = policy.alloc_host(count * sizeof(std::uint64_t));
    digest_count = count;
  }
  std::uint64_t* digest_dev(std::size_t i) {
    return reinterpret_cast<std::uint64_t*>(digest_sums.data()) + i;
  }
  std::uint64_t* digest_mirror(std::size_t i) {
    return reinterpret_cast<std::uint64_t*>(digest_host.data()) + i;
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
  //! Reserves the per-chunk lists once, so that the chunk loop does not allocate (nor the copy
  //! batches' device tables, where the policy keeps them: see CudaPolicy::reserve_copy_batches).
  void reserve_lists(std::size_t m) {
    if constexpr (requires { policy.reserve_copy_batches(m); }) policy.reserve_copy_batches(m);
    sources.reserve(m);
    copy_dst.reserve(m);
    copy_src.reserve(m);
    copy_size.reserve(m);
    views.reserve(m);
    digest_spans.reserve(m);
  }
  void clear_copies() {
    copy_dst.clear();
    copy_src.clear();
    copy_size.clear();
  }
  //! Adds a copy of `bytes` bytes from `src` to `dst` to the list. A copy that continues the last
  //! one on both sides (its destination and its source each start where the last one's end)
  //! extends it: pieces that lie back to back in both places move as one copy (the same bytes;
  //! the copies of a list are unordered, so nothing can tell).
  void add_copy(void* dst, const void* src, std::size_t bytes) {
    if (bytes == 0) return;
    if (!copy_dst.empty() &&
        detail::continues(copy_dst.back(), copy_src.back(), copy_size.back(), dst, src)) {
      copy_size.back() += bytes;
      return;
    }
    copy_dst.push_back(dst);
    copy_src.push_back(src);
    copy_size.push_back(bytes);
  }
  //! Enqueues the copies collected since clear_copies() as one batch on `s`. With `memo`, what
  //! the policy needs to repeat the batch (flush_again) is kept there; it is emptied first, so
  //! that a failed flush leaves nothing to repeat.
  template <class Stream>
  void flush_copies(Stream s, CopyBatchMemo* memo = nullptr) {
    if (memo != nullptr) *memo = {};
    if (copy_dst.empty()) return;
    if constexpr (requires { policy.copy_batch_again(*memo, s); }) {
      if (memo != nullptr) {
        policy.copy_batch(copy_dst.data(), copy_src.data(), copy_size.data(), copy_dst.size(), s,
                          memo);
        return;
      }
    }
    policy.copy_batch(copy_dst.data(), copy_src.data(), copy_size.data(), copy_dst.size(), s);
  }
  //! Enqueues again on `s` the batch that `memo` remembers (see flush_copies), without a list, when
  //! the policy can. @returns false, having enqueued nothing, when it cannot.
  template <class Stream>
  bool flush_again(const CopyBatchMemo& memo, Stream s) {
    if constexpr (requires { policy.copy_batch_again(memo, s); })
      return policy.copy_batch_again(memo, s);
    else
      return false;
  }
  //! Whether a batch is repeated from its kept list (keep_list), for a policy that cannot relaunch
  //! one (flush_again): a host copy of the same pieces costs the same, but the list is made once.
  static constexpr bool keeps_lists() {
    return !requires(const Policy& p, const CopyBatchMemo& m, typename Policy::stream_type st) {
      p.copy_batch_again(m, st);
    };
  }
  //! Copies the list collected since clear_copies() into `last` (keeps_lists()). May throw
  //! (allocation): `last` must not name its plan yet.
  void keep_list(RepeatedBatch& last) const {
    last.dst = copy_dst;
    last.src = copy_src;
    last.n = copy_size;
  }
  //! Enqueues the copies collected since clear_copies() as one batch on `s` (flush_copies), and
  //! makes `last` (forgotten by the caller) remember it, made from `plan` and `keys` (taken), when
  //! it can run again (repeat): the policy's memo of the batch, or else its kept list. Anything
  //! that may throw runs before `last` names its plan, so a throw leaves it forgotten.
  template <class Stream>
  void flush_copies_kept(Stream s, RepeatedBatch& last, std::shared_ptr<const void> plan,
                         std::vector<const void*>& keys) {
    CopyBatchMemo batch;
    flush_copies(s, &batch);
    if (!batch && !keeps_lists()) return;
    if (!batch) keep_list(last);
    last.batch = batch;
    last.keys.swap(keys);
    last.plan = std::move(plan);
  }
  //! Enqueues on `s` the batch that `last` remembers: the policy's relaunch, or its kept list.
  //! @returns false, having enqueued nothing, when neither can run.
  template <class Stream>
  bool repeat(const RepeatedBatch& last, Stream s) {
    if (last.batch) return flush_again(last.batch, s);
    if constexpr (keeps_lists()) {
      if (last.n.empty()) return false;
      policy.copy_batch(last.dst.data(), last.src.data(), last.n.data(), last.n.size(), s);
      return true;
    }
    return false;
  }
  std::size_t bytes_held() const noexcept {
    return slot_bytes * slots.size() + frames.size() + scratch.size() + handshake.size() +
           digest_sums.size();
  }

  Policy policy;
  std::optional<typename Policy::Stream> comm_stream;
  std::vector<typename Policy::Stream> slot_streams;
  //! hashed: a root's chunk digest of the slot's step is done (TransferOptions::checksum).
  std::vector<typename Policy::Event> slot_free, packed, received, received2, unpacked, hashed;
  std::optional<typename Policy::Event> done, source_ready;
  std::vector<typename Policy::Buffer> slots;
  std::size_t slot_bytes = 0;
  typename Policy::Buffer frames;
  typename Policy::HostBuffer frames_host;
  std::size_t frames_count = 0;
  typename Policy::Buffer handshake;  // see ensure_handshake
  typename Policy::HostBuffer handshake_host;
  typename Policy::Buffer scratch;
  typename Policy::Buffer digest_sums;  // see ensure_digests
  typename Policy::HostBuffer digest_host;
  std::size_t digest_count = 0;
  std::uint64_t transfers = 0;
  //! This rank's failure of an earlier transfer that no other rank has seen yet
  //! (Acknowledge::next_transfer): it travels in the next handshake frame.
  std::string pending_failure;
  std::uint64_t contiguous_regions = 0;  //!< regions sent or received in place (statistics)
  MetadataDigestCache digests;  // the handshake's metadata digest
  PlanCache plans;              // the last whole-tensor plan
  //! The last eager transfer's pack (producer) and copy out (consumer): a sync repeated with the
  //! same plan, sources and destinations relaunches the batch, without listing it again.
  RepeatedBatch eager_pack, eager_unpack;
  // Per-chunk lists, reserved once so that the chunk loop does not allocate.
  std::vector<const void*> sources;  // producer: the current chunk's item pointers
  std::vector<void*> copy_dst;
  std::vector<const void*> copy_src;
  std::vector<std::size_t> copy_size;
  std::vector<TensorView> views;
  std::vector<DigestSpan> digest_spans;  // one chunk's pieces to digest
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
  std::size_t device_bytes() const noexcept { return st_.bytes_held(); }

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

}  // namespace weightsync
