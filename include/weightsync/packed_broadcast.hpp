// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! packed_broadcast_producer / packed_broadcast_consumer: move an ordered list of named tensors
//! from the root to every other rank of a Communicator, generic over the device policy (CUDA or
//! host). A whole-tensor transfer is the one schedule of every collective transfer with one root
//! and one piece per tensor (pipeline/detail/schedule.hpp; sharded_broadcast.hpp is the same with
//! M roots).
//!
//! Wire (Protocol::weightsync, between this library's peers):
//!   1. handshake: every rank contributes a 256-byte frame (protocol version, role, and every
//!      setting the ranks must agree on: packed, B, K, thresholds, tensor count, bytes, metadata
//!      digest) and compares all of them; any difference throws protocol_error on every rank before
//!      a byte of weights moves. A transfer that fits in the eager bytes travels inside it;
//!   2. one launch per chunk of chunk_plan() (or per tensor when unpacked), fused with a 256-byte
//!      status frame (ok, or the producer's error and its message): a consumer never loads bytes
//!      of a failed chunk, and both sides keep the wire in step to the end of the plan;
//!   3. with Acknowledge::each_transfer, an acknowledgement (every rank's outcome); by default it
//!      rides in the next transfer's handshake.
//! Protocol::vllm sends exactly what vLLM's packed/unpacked producer sends: one broadcast per
//! chunk, no handshake, no frames, no acknowledgement.
//!
//! Pipeline: K ring slots sized from the plan (the largest chunk that needs one), allocated once
//! and reused while the plan is unchanged; one communication stream; packing and unpacking on a
//! stream per slot, ordered with events, so chunk i+1's copy overlaps chunk i's broadcast. A chunk
//! that is a single tensor is sent from the tensor's own memory and, when the consumer gives a
//! destination, received straight into it. No device-wide synchronization; every host wait polls
//! with a progress deadline and aborts the communicator when it passes.

#include <ranges>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "weightsync/concepts.hpp"
#include "weightsync/pipeline/detail/schedule.hpp"
#include "weightsync/sealed_metadata.hpp"
#include "weightsync/tensor_meta.hpp"
#include "weightsync/transfer_options.hpp"
#include "weightsync/workspace.hpp"

namespace weightsync {

//! Sends `metas.size()` tensors from `items` (in the declared order) to every other rank of `comm`.
//!
//! @param metas  the declared metadata, identical to what every consumer passes
//! @param items  a TensorIterator yielding exactly those tensors; each is checked (name, dtype,
//!               shape) before it is sent, and the count must match. Bytes must stay valid and
//!               unchanged until this returns.
//! @param comm   the group; this rank must be `root`
//! @param root   this rank: the one that sends
//! @param opt    see TransferOptions (source_stream: the stream that produced the weights)
//! @param workspace  ring kept between calls (see Workspace)
//! @returns what was sent, once every operation it enqueued has completed.
//! @throws config_error for a bad option, or for an item that does not match its metadata (also
//!   delivered to every consumer, which throws remote_error; the communicator stays usable);
//!   remote_error when a consumer reports failure (of this transfer with
//!   Acknowledge::each_transfer, of the previous one otherwise, before any byte moves);
//!   protocol_error when the handshake finds a mismatch; timeout_error or peer_error when a peer
//!   is stuck or gone (the communicator is then aborted).
template <Communicator C, TensorIterator R>
TransferStats packed_broadcast_producer(std::span<const TensorMeta> metas, R&& items, C& comm,
                                        int root, const TransferOptions& opt,
                                        workspace_for<C>& workspace) {
  auto& ws = detail::WorkspaceAccess::state(workspace);
  using Items = std::remove_reference_t<R>;
  return detail::TransferRun<C, Items, detail::NoLoad>(comm, ws, opt, metas,
                                                       detail::WholeTransfer{root}, &items,
                                                       nullptr)();
}

//! As above for a sealed list (SealedMetadata): the same transfer, without the pass that checks
//! whether a span's list changed since the last sync (its digest and byte count are known).
template <Communicator C, TensorIterator R>
TransferStats packed_broadcast_producer(const SealedMetadata& metas, R&& items, C& comm, int root,
                                        const TransferOptions& opt, workspace_for<C>& workspace) {
  auto& ws = detail::WorkspaceAccess::state(workspace);
  using Items = std::remove_reference_t<R>;
  const detail::MetadataSummary known{metas.digest(), metas.total_bytes()};
  return detail::TransferRun<C, Items, detail::NoLoad>(comm, ws, opt, metas.metas(),
                                                       detail::WholeTransfer{root, &known},
                                                       &items, nullptr)();
}

//! As above, with a workspace used for this call only (a ring allocated per call; see
//! Acknowledge::next_transfer for what a workspace carries between transfers).
template <Communicator C, TensorIterator R>
TransferStats packed_broadcast_producer(std::span<const TensorMeta> metas, R&& items, C& comm,
                                        int root, const TransferOptions& opt = {}) {
  workspace_for<C> ws(detail::make_policy<detail::policy_t<C>>(comm));
  return packed_broadcast_producer(metas, std::forward<R>(items), comm, root, opt, ws);
}

//! Receives `metas.size()` tensors from `root` and hands them to `load_weights`, one call per chunk
//! (tensors with a destination, see TransferOptions::destination, are written there instead).
//!
//! @param metas  the declared metadata, identical to what the producer passes
//! @param comm   the group
//! @param root   the producer's rank
//! @param opt    see TransferOptions (destination, progress)
//! @param workspace  ring kept between calls, and the failure it carries to the next transfer
//! @param load_weights  LoadWeightsFn: (std::span<const TensorView>, stream) -> void. Views are
//!   valid only during the call; work it enqueues on the stream may still read them. A zero-size
//!   tensor's view has a null data pointer. If it throws, the consumer keeps the wire in step to
//!   the end of the plan without loading more, rethrows it, and reports it to every rank: at once
//!   with Acknowledge::each_transfer, otherwise in the next transfer's handshake (which the
//!   workspace carries: with a workspace used for one call only, nobody else learns of it).
//! @returns once every tensor has landed and every operation it enqueued has completed.
//! @throws remote_error when the producer reports failure (nothing of the failed chunk or later
//!   chunks is loaded; the communicator stays usable), protocol_error on a handshake mismatch or a
//!   desynchronised frame, timeout_error or peer_error when a peer is stuck or gone (the
//!   communicator is then aborted), and whatever load_weights throws.
template <Communicator C, class F>
requires LoadWeightsFn<F, typename C::stream_type> TransferStats
packed_broadcast_consumer(std::span<const TensorMeta> metas, C& comm, int root, F&& load_weights,
                          const TransferOptions& opt, workspace_for<C>& workspace) {
  auto& ws = detail::WorkspaceAccess::state(workspace);
  using Load = std::remove_reference_t<F>;
  using NoItems = std::vector<SourceTensorRef>;
  return detail::TransferRun<C, NoItems, Load>(comm, ws, opt, metas, detail::WholeTransfer{root},
                                               nullptr, &load_weights)();
}

//! As above for a sealed list (SealedMetadata): the same transfer, without the pass that checks
//! whether a span's list changed since the last sync.
template <Communicator C, class F>
requires LoadWeightsFn<F, typename C::stream_type> TransferStats
packed_broadcast_consumer(const SealedMetadata& metas, C& comm, int root, F&& load_weights,
                          const TransferOptions& opt, workspace_for<C>& workspace) {
  auto& ws = detail::WorkspaceAccess::state(workspace);
  using Load = std::remove_reference_t<F>;
  using NoItems = std::vector<SourceTensorRef>;
  const detail::MetadataSummary known{metas.digest(), metas.total_bytes()};
  return detail::TransferRun<C, NoItems, Load>(comm, ws, opt, metas.metas(),
                                               detail::WholeTransfer{root, &known}, nullptr,
                                               &load_weights)();
}

//! As above, with a workspace used for this call only (a ring allocated per call, and a failure
//! of load_weights is not carried to the next transfer: see Acknowledge::next_transfer).
template <Communicator C, class F>
requires LoadWeightsFn<F, typename C::stream_type> TransferStats
packed_broadcast_consumer(std::span<const TensorMeta> metas, C& comm, int root, F&& load_weights,
                          const TransferOptions& opt = {}) {
  workspace_for<C> ws(detail::make_policy<detail::policy_t<C>>(comm));
  return packed_broadcast_consumer(metas, comm, root, std::forward<F>(load_weights), opt, ws);
}

}  // namespace weightsync
