// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The steps of a sharded sync over CUDA IPC, on an IpcEndpoint (IpcTransport::send_shards /
//! receive_shards run them; the public entry points are in <weightsync/ipc/sharded.hpp>).
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
#error "<weightsync/ipc/detail/sharded_sync.hpp> needs the CUDA runtime (WEIGHTSYNC_HAS_CUDA=0)"
#endif

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <span>
#include <string>
#include <vector>

#include "weightsync/concepts.hpp"
#include "weightsync/detail/format.hpp"
#include "weightsync/detail/frame.hpp"
#include "weightsync/detail/hash.hpp"
#include "weightsync/error.hpp"
#include "weightsync/ipc/detail/control_messages.hpp"
#include "weightsync/ipc/detail/endpoint.hpp"
#include "weightsync/ipc/detail/plan.hpp"
#include "weightsync/shard.hpp"
#include "weightsync/tensor_meta.hpp"
#include "weightsync/transfer_options.hpp"

namespace weightsync {

namespace detail {

//! Digest of the shard specs, mixed into the metadata digest both sides compare.
inline std::uint64_t shards_digest(std::span<const ShardSpec> specs) {
  Hash64 h;
  for (const auto& s : specs) {
    h.u64(static_cast<std::uint64_t>(s.dim)).u64(s.sizes.size());
    for (auto v : s.sizes) h.u64(static_cast<std::uint64_t>(v));
    h.u64(s.ranks.size());
    for (auto v : s.ranks) h.u64(static_cast<std::uint64_t>(v));
  }
  return h.value();
}

//! Every piece of every tensor, in tensor then piece order.
inline std::vector<ShardPiece> all_pieces(std::span<const TensorMeta> metas,
                                          std::span<const ShardSpec> specs, int trainers) {
  if (specs.size() != metas.size())
    throw config_error("shards", cat(specs.size(), " shard specs for ", metas.size(), " tensors"));
  std::vector<ShardPiece> out;
  for (std::size_t i = 0; i < metas.size(); ++i)
    for (const auto& p : shard_pieces(metas[i], i, specs[i], trainers)) out.push_back(p);
  return out;
}

//! The steps of a sharded sync, on an IpcEndpoint.
struct IpcShards {
  static void begin(IpcEndpoint& t, const TransferOptions& opt, int trainers, bool producer) {
    opt.validate();
    if (opt.checksum)
      throw config_error("checksum", "the ipc backends' sharded syncs carry no checksums yet "
                                     "(whole-tensor syncs do)");
    if (trainers < 1 || trainers >= t.size())
      throw config_error("trainers", cat("must be in 1..", t.size() - 1, " (world ", t.size(),
                                         "), got ", trainers));
    if (producer != (t.rank() < trainers))
      throw config_error("trainers", cat("rank ", t.rank(), " is ", producer ? "not " : "",
                                         "a trainer rank (0..", trainers - 1, ")"));
    t.begin(opt);
  }

  static std::size_t pieces_of_rank(const std::vector<ShardPiece>& pieces, int rank) {
    return static_cast<std::size_t>(std::count_if(
        pieces.begin(), pieces.end(), [&](const ShardPiece& p) { return p.rank == rank; }));
  }

  //! This trainer rank's plan: where each of its non-empty pieces lies (in exported memory).
  template <class R>
  static IpcPlan producer_plan(IpcEndpoint& t, std::span<const TensorMeta> metas,
                               std::span<const ShardSpec> specs, int trainers, R& items) {
    IpcPlan plan = t.plan_header(metas);
    plan.digest ^= shards_digest(specs) * 31;
    plan.total_bytes = 0;  // (this rank's pieces, summed below)
    const auto pieces = all_pieces(metas, specs, trainers);
    auto it = std::ranges::begin(items);
    auto end = std::ranges::end(items);
    t.exports.begin();
    // One item per piece this rank holds, in (tensor, piece) order.
    std::size_t taken = 0;
    for (const auto& piece : pieces) {
      if (piece.rank != t.rank()) continue;
      const auto& meta = metas[piece.tensor];
      if (it == end) throw too_few_items(taken, pieces_of_rank(pieces, t.rank()));
      const auto& item = *it;
      if (const TensorMeta& got = item.meta();
          !(got.name == meta.name && got.dtype == meta.dtype && got.shape == meta.shape))
        throw config_error("items", describe_item_mismatch(meta, got, taken));
      const auto* src = static_cast<const std::byte*>(item.data());
      if (!src && piece.bytes() > 0)
        throw config_error("items", cat("item ", taken, " ('", meta.name, "') has no data"));
      place_piece(t, plan, src, piece, meta);
      ++it;
      ++taken;
    }
    if (it != end) throw too_many_items(pieces_of_rank(pieces, t.rank()));
    plan.num_tensors = plan.places.size();
    return plan;
  }

  static void place_piece(IpcEndpoint& t, IpcPlan& plan, const std::byte* src,
                          const ShardPiece& piece, const TensorMeta& meta) {
    IpcPlan::Place pl;
    const std::size_t n = piece.bytes();
    plan.total_bytes += n;
    if (n > 0) {
      const auto r = t.exports.region(src, n, plan, t.stats);
      if (!r)
        throw config_error("items", cat("tensor '", meta.name, "': its shard on rank ", t.rank(),
                                        " is not exportable device memory (cudaMalloc or PyTorch's "
                                        "caching allocator); sharded syncs do not stage"));
      pl.where = IpcWhere::region;
      pl.index = *r;
      pl.offset = static_cast<std::uint64_t>(src - t.exports.base(*r));
    }
    plan.places.push_back(pl);
  }

  //! Every trainer rank's plan goes to every rank, in rank order; `mine` is this rank's (or empty).
  static std::vector<IpcPlan> exchange_plans(IpcEndpoint& t, int trainers,
                                             const std::string& mine) {
    std::vector<IpcPlan> plans;
    ControlMessages ch = t.channel(trainers);
    for (int r = 0; r < trainers; ++r) {
      if (r == t.rank()) {
        ch.send_blob(mine, r);
        continue;
      }
      const std::string blob = ch.receive_blob(std::uint64_t{1} << 30, "ipc plan", r);
      if (t.rank() >= trainers) plans.push_back(IpcPlan::decode(blob));
    }
    return plans;
  }

  //! Checks producer r's plan against this consumer and the pieces it must hold.
  static void accept(IpcEndpoint& t, IpcPlan& plan, int r, std::span<const TensorMeta> metas,
                     std::span<const ShardSpec> specs, const std::vector<ShardPiece>& pieces) {
    if (!plan.error.empty()) throw remote_error(r, plan.error);
    check_placement(plan, t.here, t.opt.same_gpu, t.device);
    const auto digest = metadata_digest(metas) ^ (shards_digest(specs) * 31);
    std::size_t count = 0, bytes = 0;
    for (const auto& p : pieces)
      if (p.rank == r) {
        ++count;
        bytes += p.bytes();
      }
    if (plan.digest != digest || plan.num_tensors != count || plan.places.size() != count ||
        plan.total_bytes != bytes)
      throw protocol_error(
          r, cat("ipc sharded handshake: trainer rank ", r, " offers ", plan.num_tensors,
                 " pieces (", plan.total_bytes, " bytes, digest ", plan.digest,
                 "); this consumer expects ", count, " (", bytes, " bytes, digest ", digest,
                 "): names, dtypes, shapes or shard specs differ"));
  }

  static void prune(IpcEndpoint& t, const std::vector<IpcPlan>& plans) {
    t.mappings.prune(std::span<const IpcPlan>(plans), t.stats);
  }

  //! Maps every producer's memory, enqueues every piece's copy to its place (or hands views to
  //! `load`), and waits for them within opt.timeout. `total` gets the bytes pulled.
  static void pull(IpcEndpoint& t, std::span<const TensorMeta> metas,
                   std::span<const ShardSpec> specs, int trainers, const TransferOptions& opt,
                   const IpcLoadFn& load, std::vector<IpcPlan>& plans,
                   std::size_t& total) {
    const auto pieces = all_pieces(metas, specs, trainers);
    std::vector<std::vector<std::byte*>> base(plans.size());
    for (int r = 0; r < trainers; ++r) {
      accept(t, plans[static_cast<std::size_t>(r)], r, metas, specs, pieces);
      base[static_cast<std::size_t>(r)] =
          t.mappings.map(plans[static_cast<std::size_t>(r)], t.stats);
    }
    // Where each tensor lands: its destination, or (several pieces, or strided) the assembly
    // buffer.
    std::vector<std::byte*> dst(metas.size(), nullptr);
    std::vector<std::size_t> assembled(metas.size(), static_cast<std::size_t>(-1));
    std::vector<std::size_t> count(metas.size(), 0);
    std::vector<std::size_t> first(metas.size(), 0);  // each tensor's first piece
    for (std::size_t k = pieces.size(); k-- > 0;) {
      count[pieces[k].tensor]++;
      first[pieces[k].tensor] = k;
    }
    std::size_t need = 0;
    for (std::size_t i = 0; i < metas.size(); ++i) {
      if (opt.destination) dst[i] = static_cast<std::byte*>(opt.destination(metas[i]));
      if (dst[i] || metas[i].nbytes() == 0) continue;
      const bool whole = count[i] == 1 && pieces[first[i]].contiguous();
      if (whole) continue;
      assembled[i] = need;
      need += (metas[i].nbytes() + 255) / 256 * 256;
    }
    if (t.assembly.size() < need) {
      t.assembly = DeviceBuffer();
      t.assembly = DeviceBuffer(need, t.device);
    }
    for (std::size_t i = 0; i < metas.size(); ++i)
      if (assembled[i] != static_cast<std::size_t>(-1)) dst[i] = t.assembly.data() + assembled[i];
    std::vector<CopyPiece> flat;
    std::vector<CopyPiece2D> strided;
    std::vector<TensorView> views;
    std::vector<std::size_t> next(static_cast<std::size_t>(trainers), 0);
    for (const auto& p : pieces) {
      const auto r = static_cast<std::size_t>(p.rank);
      const auto& meta = metas[p.tensor];
      const std::byte* src = source(plans[r], base[r], next[r]++, p, meta, p.rank);
      total += p.bytes();
      if (!src) continue;
      if (!dst[p.tensor])
        views.push_back(TensorView{&meta, const_cast<std::byte*>(src), p.bytes()});
      else if (p.contiguous())
        add_piece(flat, dst[p.tensor] + p.offset, src, p.bytes());
      else
        strided.push_back(
            {dst[p.tensor] + p.offset, p.pitch, src, p.block_bytes, p.block_bytes, p.blocks});
    }
    for (std::size_t i = 0; i < metas.size(); ++i) {
      if (metas[i].nbytes() == 0 && !dst[i]) views.push_back(TensorView{&metas[i], nullptr, 0});
      if (assembled[i] != static_cast<std::size_t>(-1))
        views.push_back(TensorView{&metas[i], dst[i], metas[i].nbytes()});
    }
    t.puller->enqueue(flat, t.stream.get(), t.opt, strided);
    if (!views.empty()) load(std::span<const TensorView>(views), t.stream.get());
    t.await_stream(t.stream.get(), opt, "ipc sharded pull");
  }

  //! The bytes of piece k of producer r's plan, bounded by what was mapped.
  static const std::byte* source(const IpcPlan& plan, const std::vector<std::byte*>& base,
                                 std::size_t k, const ShardPiece& piece, const TensorMeta& meta,
                                 int r) {
    const auto& pl = plan.places[k];
    const std::size_t n = piece.bytes();
    if (n == 0) return nullptr;
    const bool ok = pl.where == IpcWhere::region && pl.index < plan.regions.size() &&
                    pl.offset <= plan.regions[pl.index].size &&
                    n <= plan.regions[pl.index].size - pl.offset;
    if (!ok)
      throw protocol_error(r, cat("ipc plan of trainer rank ", r, ": a piece of '", meta.name,
                                  "' is placed outside its memory"));
    return base[pl.index] + pl.offset;
  }
};

//! Trainer rank (0..trainers-1) of a sharded sync over `ep`: offers this rank's pieces (see the
//! file comment for what `items` yields) and returns once every consumer has pulled everything.
//! Same errors as IpcTransport::send; a wrong item is a config_error here and a remote_error on
//! every consumer, and the transport stays usable.
template <TensorIterator R>
TransferStats send_shards_on(IpcEndpoint& ep, std::span<const TensorMeta> metas,
                             std::span<const ShardSpec> specs, int trainers, R&& items,
                             const TransferOptions& opt) {
  IpcShards::begin(ep, opt, trainers, true);
  CurrentDeviceGuard g(ep.device);
  AbortOnThrow abort_on_throw(ep.ctrl, "ipc sharded producer failed");
  IpcPlan plan;
  std::exception_ptr failure;
  try {
    plan = IpcShards::producer_plan(ep, metas, specs, trainers, items);
  } catch (...) {
    failure = std::current_exception();
    plan = IpcPlan();
    plan.error = what_of(failure).substr(0, IpcPlan::kErrorBytes);
  }
  // The producer's earlier work on the weights must be complete before a consumer reads them.
  ep.await_source(opt);
  IpcShards::exchange_plans(ep, trainers, plan.encode());
  const auto outcomes = ep.channel(trainers).gather_outcomes(FrameCode::ok, "");
  abort_on_throw.disarm();
  if (failure) std::rethrow_exception(failure);
  ep.channel(trainers).raise_first(outcomes);
  TransferStats st;
  st.tensors = metas.size();
  st.bytes = plan.total_bytes;
  return st;
}

//! Inference rank (trainers..) of a sharded sync: pulls every piece from the trainer rank holding
//! it into its place in the tensor's destination (opt.destination), or, without one, into a
//! buffer of this transport that is handed to `load` as a whole tensor (a tensor that is one piece
//! is handed over as a view into the trainer's memory). Same errors as IpcTransport::receive.
inline TransferStats receive_shards_on(IpcEndpoint& ep, std::span<const TensorMeta> metas,
                                       std::span<const ShardSpec> specs, int trainers,
                                       const TransferOptions& opt, const IpcLoadFn& load) {
  IpcShards::begin(ep, opt, trainers, false);
  CurrentDeviceGuard g(ep.device);
  AbortOnThrow abort_on_throw(ep.ctrl, "ipc sharded consumer failed");
  // An unreadable plan leaves us unable to follow the others: the guard aborts the transport.
  auto plans = IpcShards::exchange_plans(ep, trainers, "");
  FrameCode code = FrameCode::ok;
  std::string why;
  std::exception_ptr failure;
  std::size_t total = 0;
  try {
    IpcShards::pull(ep, metas, specs, trainers, opt, load, plans, total);
  } catch (const protocol_error&) {
    failure = std::current_exception();
    code = FrameCode::mismatch;
  } catch (...) {
    failure = std::current_exception();
    code = FrameCode::failed;
  }
  if (failure) {
    why = what_of(failure);
    ep.drain(opt);  // nothing of ours may still run when the caller gets the error
  }
  // Every consumer's outcome reaches every rank here (over the socket): with all_or_nothing,
  // another consumer's failure is this one's too.
  const auto outcomes = ep.channel(trainers).gather_outcomes(code, why);
  abort_on_throw.disarm();
  if (!failure) IpcShards::prune(ep, plans);
  if (failure) std::rethrow_exception(failure);
  if (opt.all_or_nothing)
    for (int r = trainers; r < ep.size(); ++r) {
      const auto& o = outcomes[static_cast<std::size_t>(r)];
      if (r != ep.rank() && !o.ok())
        throw remote_error(r, cat("rank ", r, " failed (all_or_nothing): ", o.text));
    }
  TransferStats st;
  st.tensors = metas.size();
  st.bytes = total;
  return st;
}

}  // namespace detail
}  // namespace weightsync
