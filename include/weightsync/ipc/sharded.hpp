// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Sharded syncs over CUDA IPC: trainer ranks 0..M-1 each hold shards of the weights (ShardSpec),
//! and every inference rank (M..) pulls each piece straight from the trainer rank that holds it,
//! with copy engines, to its place in the full tensor: nobody gathers the model, and with trainer
//! shards on several GPUs the pulls cross NVLink in every direction at once (pieces on the
//! consumer's own GPU are device-local copies). Each trainer rank exports the allocations behind
//! its shards and sends its own plan; a consumer maps every producer's allocations (kept between
//! syncs, closed once no plan names them) and checks every piece against what it mapped.
//!
//! Items on trainer rank m (as for sharded_broadcast_producer): one SourceTensor per piece the rank
//! holds, in (tensor, piece) order; meta() is the full tensor's metadata, data() the piece's bytes,
//! dense (what FSDP2's local tensor of a Shard(dim) parameter holds); an empty piece may be null.
//! Sources must be exportable device memory (cudaMalloc, PyTorch's caching allocator); staging is
//! not offered for sharded syncs.

#include "weightsync/config.hpp"
#if !WEIGHTSYNC_HAS_CUDA
#error "<weightsync/ipc/sharded.hpp> needs the CUDA runtime (WEIGHTSYNC_HAS_CUDA=0)"
#endif

#include <span>
#include <utility>

#include "weightsync/concepts.hpp"
#include "weightsync/ipc/transport.hpp"
#include "weightsync/shard.hpp"
#include "weightsync/tensor_meta.hpp"
#include "weightsync/transfer_options.hpp"

namespace weightsync {

//! Trainer rank (0..trainers-1) of a sharded sync over `t`: offers this rank's pieces (see the
//! file comment for what `items` yields) and returns once every consumer has pulled everything.
//! Same errors as IpcTransport::send; a wrong item is a config_error here and a remote_error on
//! every consumer, and the transport stays usable. (IpcTransport::send_shards.)
template <TensorIterator R>
TransferStats send_shards(IpcTransport& t, std::span<const TensorMeta> metas,
                          std::span<const ShardSpec> specs, int trainers, R&& items,
                          const TransferOptions& opt) {
  return t.send_shards(metas, specs, trainers, std::forward<R>(items), opt);
}

//! Inference rank (trainers..) of a sharded sync: pulls every piece from the trainer rank holding
//! it into its place in the tensor's destination (opt.destination), or, without one, into a
//! buffer of this transport that is handed to `load` as a whole tensor (a tensor that is one piece
//! is handed over as a view into the trainer's memory). Same errors as IpcTransport::receive.
//! (IpcTransport::receive_shards.)
inline TransferStats receive_shards(IpcTransport& t, std::span<const TensorMeta> metas,
                                    std::span<const ShardSpec> specs, int trainers,
                                    const TransferOptions& opt, const IpcTransport::LoadFn& load) {
  return t.receive_shards(metas, specs, trainers, opt, load);
}

}  // namespace weightsync
