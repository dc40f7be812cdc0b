// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The concepts the pipeline is written against. Each is a named conjunction of small
//! requirements; optional capabilities are separate concepts that refine the core one.

#include <concepts>
#include <cstddef>
#include <ranges>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

#include "weightsync/tensor_meta.hpp"

namespace weightsync {

//! Maps a Communicator's stream_type to the device policy the pipeline uses with it (memory,
//! streams, events, copies). Specialized for HostStream (<weightsync/host/device_policy.hpp>) and
//! cudaStream_t (<weightsync/cuda/device_policy.hpp>).
template <class Stream>
struct device_policy_for;

//! A group of ranks that can broadcast bytes, ordered on a stream.
//!
//! Models: NcclCommunicator (stream_type = cudaStream_t) and HostCommunicator (stream_type =
//! HostStream, synchronous). Opt in by providing the members below.
template <class C>
concept Communicator =
    requires { typename C::stream_type; }  //
    && requires(C& c, const C& cc, void* buf, std::size_t bytes, int root,
                typename C::stream_type stream) {
         //! this process's rank in 0..size()-1
         { cc.rank() } -> std::convertible_to<int>;
         //! number of ranks in the group
         { cc.size() } -> std::convertible_to<int>;
         //! copy `bytes` bytes at `buf` on `root` to `buf` on every other rank, in `stream` order
         c.broadcast(buf, bytes, root, stream);
       };

//! A Communicator that can fuse several operations into one launch (ncclGroupStart/End).
//! Operations issued between group_start() and group_end() may complete in any order.
template <class C>
concept GroupedCommunicator = Communicator<C> && requires(C& c) {
  //! begin a group of operations
  c.group_start();
  //! issue the group
  c.group_end();
};

//! A Communicator whose asynchronous failures can be observed and which can be torn down without
//! its peers' cooperation. The pipeline polls check() while it waits and calls abort() when a
//! deadline passes, so that no wait is unbounded.
template <class C>
concept MonitoredCommunicator = Communicator<C> && requires(C& c, const std::string& reason) {
  //! throw if the communicator failed asynchronously or a peer is known to be gone
  c.check();
  //! tear down, failing any pending operation on every rank as soon as possible; noexcept
  { c.abort(reason) } noexcept;
};

//! A Communicator that can move bytes in pinned host memory (cudaMallocHost) as well as in device
//! memory: the framed wire's handshake and acknowledgement then exchange their small blocks
//! there, with no copy to and from the device around them (NcclCommunicator: NCCL's kernels read
//! and write such memory through unified addressing). Opt in with
//! `static constexpr bool broadcasts_pinned_host = true;`.
template <class C>
concept PinnedHostCommunicator = Communicator<C> && requires {
  requires C::broadcasts_pinned_host;
};

//! What a communicator keeps between two transfers of the framed wire (Protocol::weightsync): which
//! ranks' blocks are wide in the next handshake, as the last handshake that every rank passed
//! decided (see HandshakeLayout, detail/frame.hpp). It lives in the communicator because every
//! member's communicator is made together and sees the same handshakes: every member lays out the
//! next one alike, whatever workspaces the transfers use.
struct WireState {
  //! Ranks wide_first .. wide_first + wide_count - 1 (the roots of that transfer) may send up to
  //! 32 KiB with the next handshake; none when wide_count is 0.
  int wide_first = 0;
  int wide_count = 0;
};

//! A Communicator that keeps the framed wire's state (WireState) between transfers: a sync of
//! 4 to 32 KiB then travels inside the handshake from its second round on (one exchange, not
//! two). Without it every handshake block is the base size. Opt in with
//! `WireState& wire_state() noexcept;` (NcclCommunicator, HostCommunicator).
template <class C>
concept WireStateCommunicator = Communicator<C> && requires(C& c) {
  { c.wire_state() } noexcept -> std::same_as<WireState&>;
};

//! One tensor offered to the producer: what it claims to be, and where its bytes are.
//! Model: SourceTensorRef.
template <class T>
concept SourceTensor = requires(const T& t) {
  //! the claimed name, dtype and shape (checked against the declared metadata before sending)
  { t.meta() } -> std::convertible_to<const TensorMeta&>;
  //! meta().nbytes() contiguous bytes (device memory for NCCL, host memory for the host backend)
  { t.data() } -> std::convertible_to<const void*>;
};

//! What the producer iterates: a single-pass range of SourceTensor, in the declared order.
//! Bytes must stay valid and unchanged until the producer returns. Model: std::vector<SourceTensorRef>.
template <class R>
concept TensorIterator =
    std::ranges::input_range<R> && SourceTensor<std::remove_cvref_t<std::ranges::range_reference_t<R>>>;

//! What the consumer calls once per received chunk: a batch of named tensor views and the stream on
//! which their bytes are ready. Views are valid only during the call (the slot is reused); work
//! enqueued on `stream` may still read them.
template <class F, class Stream>
concept LoadWeightsFn = std::invocable<F&, std::span<const TensorView>, Stream>;

}  // namespace weightsync
