// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! sharded_broadcast_producer / sharded_broadcast_consumer: move an ordered list of named tensors,
//! each split over the M trainer ranks 0..M-1 of a Communicator (see ShardSpec), to every other
//! rank (the workers, ranks M..size-1), without ever gathering a tensor on one trainer rank.
//! Generic over the device policy (CUDA or host).
//!
//! Plan (every rank derives it from metadata, specs, M and the options): each trainer rank is the
//! root of the pieces it holds; its pieces, in declared order, are packed into chunks by vLLM's
//! rule over B (a chunk closes when its bytes exceed B strictly; one chunk per piece when
//! unpacked); step s is ONE launch holding chunk s of every root, so every trainer rank's links
//! carry bytes at once. Every rank takes part in every broadcast; a trainer receives the other
//! roots' chunks into its ring slot and drops them.
//!
//! One schedule serves this and packed_broadcast.hpp (pipeline/detail/schedule.hpp: a whole-tensor
//! transfer is M = 1), so direct pieces and launch splits (TransferOptions), checksums, progress
//! and the eager handshake serve sharded transfers too.
//!
//! Wire (Protocol::weightsync only): the framed handshake of every transfer, with M and the
//! digest of the resolved pieces, so that differing shard specs are refused on every rank before
//! any byte moves; per step, one status frame per root that sends bytes in it (a trainer whose
//! items are wrong sends junk and a failed frame, and the wire stays in step); the
//! acknowledgement (Acknowledge).
//!
//! Memory: K ring slots, each the largest step (the sum of its roots' chunks: up to M x (B + the
//! largest piece)), on every rank. A worker receives a chunk that is a single contiguous piece
//! straight into its destination; otherwise the pieces land in the slot and are copied to their
//! place in the full tensor (a piece of a split along dim d > 0 is `blocks` strided blocks: one
//! entry per block in the policy's batched copy, one batch per step; memcpy on the host). A split
//! tensor without a destination is assembled in the workspace (a place of its full size from the
//! step of its first piece to the step of its last, then reused) and handed to load_weights once
//! its last piece has landed; an unsplit one is a view of the slot.

#include <ranges>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "weightsync/concepts.hpp"
#include "weightsync/pipeline/detail/schedule.hpp"
#include "weightsync/shard.hpp"
#include "weightsync/tensor_meta.hpp"
#include "weightsync/transfer_options.hpp"
#include "weightsync/workspace.hpp"

namespace weightsync {

//! Sends this trainer rank's pieces of `metas` (split by `specs`) and receives, and drops, the
//! other trainer ranks'. Runs on every trainer rank 0..trainers-1 at once.
//!
//! @param metas    the full tensors' metadata, identical on every rank
//! @param specs    one ShardSpec per tensor, identical on every rank (the handshake checks)
//! @param items    a TensorIterator yielding one item per piece this rank holds (shard_pieces with
//!                 rank == this rank), in declared order (tensor, then piece): meta() is the FULL
//!                 tensor's metadata, data() the piece's bytes, contiguous (the local shard, e.g.
//!                 DTensor.to_local()); a piece of 0 bytes may have a null data(). Bytes must stay
//!                 valid and unchanged until this returns.
//! @param comm     the group; this rank is one of 0..trainers-1
//! @param trainers M, the number of trainer ranks (NcclInitInfo::rank_offset)
//! @param opt      see TransferOptions
//! @param workspace ring kept between calls (see Workspace)
//! @throws as packed_broadcast_producer; config_error for specs that do not fit the metadata.
template <Communicator C, TensorIterator R>
TransferStats sharded_broadcast_producer(std::span<const TensorMeta> metas,
                                         std::span<const ShardSpec> specs, R&& items, C& comm,
                                         int trainers, const TransferOptions& opt,
                                         workspace_for<C>& workspace) {
  auto& ws = detail::WorkspaceAccess::state(workspace);
  using Items = std::remove_reference_t<R>;
  detail::NoLoad none;
  return detail::TransferRun<C, Items, detail::NoLoad>(
      comm, ws, opt, metas, detail::ShardedTransfer{specs, trainers}, &items, &none)();
}

//! As above, with a workspace used for this call only.
template <Communicator C, TensorIterator R>
TransferStats sharded_broadcast_producer(std::span<const TensorMeta> metas,
                                         std::span<const ShardSpec> specs, R&& items, C& comm,
                                         int trainers, const TransferOptions& opt = {}) {
  workspace_for<C> ws(detail::make_policy<detail::policy_t<C>>(comm));
  return sharded_broadcast_producer(metas, specs, std::forward<R>(items), comm, trainers, opt, ws);
}

//! Receives `metas` from the trainer ranks 0..trainers-1 and lands every piece at its place in
//! the full tensor: in the destination (TransferOptions::destination) when there is one, else in
//! a buffer handed to `load_weights` once the tensor is complete (one call per step at most;
//! tensors in declared order within a call). Runs on every worker rank trainers..size-1.
//! @throws as packed_broadcast_consumer (remote_error names the trainer rank that failed).
template <Communicator C, class F>
requires LoadWeightsFn<F, typename C::stream_type> TransferStats sharded_broadcast_consumer(
    std::span<const TensorMeta> metas, std::span<const ShardSpec> specs, C& comm, int trainers,
    F&& load_weights, const TransferOptions& opt, workspace_for<C>& workspace) {
  auto& ws = detail::WorkspaceAccess::state(workspace);
  using Load = std::remove_reference_t<F>;
  using NoItems = std::vector<SourceTensorRef>;
  return detail::TransferRun<C, NoItems, Load>(
      comm, ws, opt, metas, detail::ShardedTransfer{specs, trainers}, nullptr, &load_weights)();
}

//! As above, with a workspace used for this call only.
template <Communicator C, class F>
requires LoadWeightsFn<F, typename C::stream_type> TransferStats sharded_broadcast_consumer(
    std::span<const TensorMeta> metas, std::span<const ShardSpec> specs, C& comm, int trainers,
    F&& load_weights, const TransferOptions& opt = {}) {
  workspace_for<C> ws(detail::make_policy<detail::policy_t<C>>(comm));
  return sharded_broadcast_consumer(metas, specs, comm, trainers, std::forward<F>(load_weights),
                                    opt, ws);
}

}  // namespace weightsync
