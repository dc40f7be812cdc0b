// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The wire of a delta or sparse update, and the receiving side of it: which tensors travel (the
//! blobs, the whole tensors, vLLM's index/value pairs) and how each one lands, in place.
//!
//! A delta sync's first wire tensor is a zero-byte marker whose name carries the version the rank
//! holds (the trainer: the delta's base). The handshake compares every rank's metadata before a
//! byte moves, so a receiver that holds another version (or none it can vouch for) makes the
//! transfer fail on every rank, with the first differing tensor, i.e. both versions, named:
//! nothing is applied onto the wrong base.

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "weightsync/config.hpp"
#include "weightsync/delta/codec.hpp"
#include "weightsync/delta/gather.hpp"
#include "weightsync/detail/format.hpp"
#include "weightsync/dtype.hpp"
#include "weightsync/engine/adapter.hpp"
#include "weightsync/engine/backend.hpp"
#include "weightsync/engine/update_request.hpp"
#include "weightsync/error.hpp"
#include "weightsync/shard.hpp"
#include "weightsync/tensor_meta.hpp"
#if WEIGHTSYNC_HAS_CUDA
#include <cuda_runtime_api.h>

#include "weightsync/cuda/delta.hpp"
#endif

namespace weightsync::detail {

//! The marker tensor's name prefix; the rest of the name is the version the rank holds.
inline constexpr const char* kDeltaMarker = "weightsync.delta.base_version=";
//! Suffix of the index tensor of a sparse (vLLM sparse_nccl) pair.
inline constexpr const char* kSparseIndices = ".__indices__";

//! What a wire tensor is.
struct WireTensor {
  enum class Kind : std::uint8_t { whole, blob, marker, sparse_indices, sparse_values };
  Kind kind = Kind::whole;
  std::size_t tensor = 0;  //!< index into the update's tensors
  //! A blob: the elements of its tensor it covers, [elem_offset, elem_offset + numel) (the whole
  //! tensor, or one contiguous piece of a sharded delta, whose first row is row_begin).
  std::uint64_t elem_offset = 0, numel = 0;
  std::int64_t row_begin = 0;
  bool piece() const noexcept { return elem_offset != 0 || row_begin != 0; }
};

//! The wire of an update with `delta` or `num_updates_list` (and of a plain one: every tensor
//! whole). `held`: the version this rank vouches for (the marker's text).
struct UpdateWire {
  std::vector<TensorMeta> tensors;  //!< the update's tensors (names, dtypes, shapes)
  std::vector<TensorMeta> metas;    //!< what travels, in order
  std::vector<WireTensor> what;     //!< per wire tensor
  //! A sharded update: per wire tensor, how it is split over the trainer ranks (a whole tensor
  //! keeps its spec; a piece's blob comes whole from the rank that holds the piece; the marker
  //! from rank 0). Empty when not sharded.
  std::vector<ShardSpec> specs;
};

//! The name of the wire tensor that carries piece `p` of tensor `name` in a sharded delta.
inline std::string piece_blob_name(const std::string& name, std::size_t p) {
  return cat(name, ".__piece", p, "__");
}

//! The wire of an update with a delta or sparse counts (and of a plain one: every tensor whole).
//! `held`: the version this rank vouches for (the marker's text). The request's tensors are
//! copied (or moved, from an rvalue) into UpdateWire::tensors.
//! A sharded delta (UpdateRequest::sharded) sends each changed piece of a tensor as its own blob,
//! from the trainer rank that holds it (DeltaUpdate::piece_bytes), and whole tensors as the
//! sharded transfer would; UpdateWire::specs then says who sends what.
inline UpdateWire update_wire(UpdateRequest&& u, const std::string& held) {
  UpdateWire w;
  const bool sharded = u.sharded;
  std::vector<ShardSpec> specs;
  std::vector<std::vector<ShardPiece>> pieces;
  if (sharded) {
    specs = u.shard_specs();
    if (u.delta && !u.delta->piece_bytes.empty()) pieces = u.pieces(u.trainer_ranks.value_or(1));
  }
  w.tensors = std::move(u.metas);
  w.metas.reserve(w.tensors.size() + 1);
  w.what.reserve(w.tensors.size() + 1);
  auto add = [&](TensorMeta m, WireTensor::Kind k, std::size_t i, ShardSpec spec = {}) {
    w.metas.push_back(std::move(m));
    WireTensor x{k, i};
    if (k == WireTensor::Kind::blob) x.numel = w.tensors[i].numel();
    w.what.push_back(x);
    if (sharded) w.specs.push_back(std::move(spec));
  };
  if (u.delta && !u.delta->base_version.empty())
    add(TensorMeta{kDeltaMarker + held, DType::uint8, {0}}, WireTensor::Kind::marker, 0);
  std::size_t piece_at = 0;  // (the next entry of piece_bytes)
  for (std::size_t i = 0; i < w.tensors.size(); ++i) {
    const TensorMeta& t = w.tensors[i];
    if (u.sparse_counts) {
      const std::int64_t n = (*u.sparse_counts)[i];
      if (n == 0) continue;  // (vLLM broadcasts two empty tensors: no bytes either way)
      add(TensorMeta{t.name + kSparseIndices, DType::int32, {n}}, WireTensor::Kind::sparse_indices,
          i);
      add(TensorMeta{t.name, t.dtype, {n}}, WireTensor::Kind::sparse_values, i);
      continue;
    }
    const std::int64_t p = u.delta ? u.delta->payload_bytes[i] : -1;
    if (p == -1) {
      add(t, WireTensor::Kind::whole, i, sharded ? specs[i] : ShardSpec{});
    } else if (p > 0 && !pieces.empty()) {
      const std::size_t eb = dtype_size(t.dtype);
      for (std::size_t k = 0; k < pieces[i].size(); ++k) {
        const ShardPiece& piece = pieces[i][k];
        const std::int64_t bytes = u.delta->piece_bytes[piece_at++];
        if (bytes == 0) continue;
        add(TensorMeta{piece_blob_name(t.name, k), DType::uint8, {bytes}},
            WireTensor::Kind::blob, i, ShardSpec{-1, {}, {piece.rank}});
        auto& x = w.what.back();
        x.elem_offset = piece.offset / eb;
        x.numel = piece.bytes() / eb;
        x.row_begin = piece.begin;
      }
    } else if (p > 0) {
      add(TensorMeta{t.name, DType::uint8, {p}}, WireTensor::Kind::blob, i);
    }
  }
  return w;
}
inline UpdateWire update_wire(const UpdateRequest& u, const std::string& held) {
  return update_wire(UpdateRequest(u), held);
}

//! The last wire built, given again while the update that asks for it is the same (tensors,
//! delta or sparse counts, held version): a receiver whose rounds repeat (every round whole, or
//! the same tensors changed) pays one comparison of the update instead of building and copying
//! its wire. Not thread-safe; one per receiver.
class UpdateWireCache {
 public:
  std::shared_ptr<const UpdateWire> get(const UpdateRequest& u, const std::string& held) {
    if (wire_ && held == held_ && u.delta == delta_ && u.sparse_counts == sparse_ &&
        u.sharded == sharded_ && u.shards == shards_ && u.trainer_ranks == trainers_ &&
        u.metas == wire_->tensors)
      return wire_;
    held_ = held;
    delta_ = u.delta;
    sparse_ = u.sparse_counts;
    sharded_ = u.sharded;
    shards_ = u.shards;
    trainers_ = u.trainer_ranks;
    wire_ = std::make_shared<const UpdateWire>(update_wire(u, held));
    return wire_;
  }

 private:
  std::shared_ptr<const UpdateWire> wire_;
  std::string held_;
  std::optional<DeltaUpdate> delta_;
  std::optional<std::vector<std::int64_t>> sparse_;
  bool sharded_ = false;
  std::vector<ShardSpec> shards_;
  std::optional<int> trainers_;
};

//! The same for an adapter's update description (vLLM's NcclUpdateInfo: <weightsync/vllm.hpp>).
template <UpdateInfo Info>
  requires(!std::same_as<Info, UpdateRequest>)
UpdateWire update_wire(const Info& u, const std::string& held) {
  return update_wire(to_update_request(u, UpdateContext{}), held);
}

//! Applies `n` (int32 flat index, value) pairs to `dst` (host memory), after checking every index.
//! @throws protocol_error naming the tensor and the first bad index; nothing is written then.
inline void apply_sparse_host(const TensorMeta& t, void* dst, const std::int32_t* idx,
                              const std::byte* values, std::size_t n) {
  const std::size_t eb = dtype_size(t.dtype);
  const std::uint64_t numel = t.numel();
  for (std::size_t k = 0; k < n; ++k)
    if (idx[k] < 0 || static_cast<std::uint64_t>(idx[k]) >= numel)
      throw protocol_error(-1, cat("sparse update of ", t.name, ": index ", idx[k], " (entry ", k,
                                   ") outside its ", numel, " elements"));
  auto* d = static_cast<std::byte*>(dst);
  for (std::size_t k = 0; k < n; ++k)
    std::memcpy(d + static_cast<std::size_t>(idx[k]) * eb, values + k * eb, eb);
}

//! Lands a delta / sparse update: wraps the caller's load_weights and destination. Whole tensors
//! go where they always go; blobs and index/value pairs are applied in place onto the caller's
//! destination of their tensor (so every changed tensor needs one). Host memory on the host
//! backend; device memory on the CUDA backends, where the blobs of each chunk are checked and
//! applied by one batch of kernels on the chunk's stream (<weightsync/cuda/delta.hpp>), and the
//! chunk's load_weights call ends only when they have run (so a bad blob fails that chunk, and
//! the trainer hears of it). vLLM's sparse pairs: on the host, or on the GPU by
//! CudaSparseApplier (each pair's indices copied as they arrive, its values applied and the stream
//! synchronized before the load call returns).
class UpdateReceiver {
 public:
  //! `gather`: for a tensor without a destination, the load plan's gather its delta is applied
  //! through (<weightsync/delta/gather.hpp>); empty: none.
  UpdateReceiver(UpdateWire wire, AnyLoadWeights load, AnyDestination destination, bool device,
                 AnyDeltaGather gather = {})
      : UpdateReceiver(std::make_shared<const UpdateWire>(std::move(wire)), std::move(load),
                       std::move(destination), device, std::move(gather)) {}
  //! The same over a shared wire (UpdateWireCache's): nothing copied.
  UpdateReceiver(std::shared_ptr<const UpdateWire> wire, AnyLoadWeights load,
                 AnyDestination destination, bool device, AnyDeltaGather gather = {})
      : wp_(std::move(wire)),
        w_(wp_.get()),
        load_(std::move(load)),
        dest_(std::move(destination)),
        gather_(std::move(gather)),
        device_(device) {}

  //! Whether every tensor applied in place has a destination; else the reason (the marker then
  //! carries it, so every rank refuses the transfer).
  std::string cannot_apply() const {
    for (std::size_t k = 0; k < w_->metas.size(); ++k) {
      const auto kind = w_->what[k].kind;
      if (kind != WireTensor::Kind::blob && kind != WireTensor::Kind::sparse_values) continue;
      const TensorMeta& t = w_->tensors[w_->what[k].tensor];
      const bool in_place = dest_ && dest_(t) != nullptr;
      const GatherOp* op = !in_place && kind == WireTensor::Kind::blob && gather_ ? gather_(t) : nullptr;
      if (!in_place && op == nullptr)
        return cat("no destination for ", t.name,
                   " (a delta applies in place, or through the load plan's gather)");
      if (op != nullptr && w_->what[k].piece() && !piece_gather(*op, w_->what[k]))
        return cat("a piece of ", t.name, " (from element ", w_->what[k].elem_offset,
                   ") cannot go through its load plan's gather (a rotary permutation, or a piece "
                   "that does not start a row of the gather's ", op->src_cols,
                   "-element rows): give it a destination, or send it unsharded");
#if !WEIGHTSYNC_HAS_CUDA
      if (device_) return cat("the delta of ", t.name, " lands in device memory: no CUDA here");
#endif
    }
    return "";
  }

  const std::vector<TensorMeta>& metas() const { return w_->metas; }
  //! A sharded update's wire specs (UpdateWire::specs; empty when not sharded).
  const std::vector<ShardSpec>& specs() const { return w_->specs; }

  AnyDestination destination() {
    return [this](const TensorMeta& m) -> void* {
      const std::size_t k = find(m);
      if (w_->what[k].kind == WireTensor::Kind::whole && dest_) return dest_(m);
      return nullptr;  // blobs, pairs and the marker come as views
    };
  }

  AnyLoadWeights load() {
    return [this](std::span<const TensorView> views, void* stream) {
      std::vector<TensorView> pass;
      shifted_.clear();  // (the last call's pieces' gathers: applied by now)
      for (const TensorView& v : views) {
        const std::size_t k = find(*v.meta);
        const WireTensor& x = w_->what[k];
        const TensorMeta& t = w_->tensors[x.tensor];
        switch (x.kind) {
          case WireTensor::Kind::whole:
            pass.push_back(v);
            break;
          case WireTensor::Kind::marker:
            break;
          case WireTensor::Kind::blob: {
            void* dst = dest_ ? dest_(t) : nullptr;
            const GatherOp* op = dst == nullptr && gather_ ? gather_(t) : nullptr;
            const auto eb = static_cast<unsigned>(dtype_size(t.dtype));
            applied_bytes_ += v.nbytes;
            // A piece of a sharded delta: its elements from x.elem_offset on (a blob of numel
            // elements, checked as such).
            std::string name = t.name;
            TensorMeta piece_meta;
            const TensorMeta* as = &t;
            if (x.piece() || x.numel != t.numel()) {
              name = cat(t.name, " (piece from element ", x.elem_offset, ")");
              if (dst) dst = static_cast<std::byte*>(dst) + x.elem_offset * eb;
              if (op && x.piece()) {  // (cannot_apply() refused a piece it cannot shift)
                shifted_.push_back(*piece_gather(*op, x));
                op = &shifted_.back();
              }
              piece_meta = TensorMeta{name, t.dtype, {static_cast<std::int64_t>(x.numel)}};
              as = &piece_meta;
            }
            if (!device_) {
              if (op != nullptr)
                delta::apply_delta_gather_host(static_cast<const std::byte*>(v.data), v.nbytes,
                                               *op, *as);
              else
                delta::apply_delta_host(static_cast<const std::byte*>(v.data), v.nbytes, dst,
                                        x.numel, eb, name);
              break;
            }
#if WEIGHTSYNC_HAS_CUDA
            device_blobs_.push_back({v.data, v.nbytes, dst, x.numel, eb, name, op});
#endif
            break;
          }
          case WireTensor::Kind::sparse_indices:
            indices_of_ = x.tensor;
            n_indices_ = v.nbytes / 4;
            if (!device_) {
              indices_.assign(static_cast<const std::int32_t*>(v.data),
                              static_cast<const std::int32_t*>(v.data) + n_indices_);
              break;
            }
#if WEIGHTSYNC_HAS_CUDA
            // (a copy: the pair's values may come in the next chunk, after this slot is reused)
            if (!sparse_) sparse_.emplace();
            sparse_->indices(v.data, n_indices_, static_cast<cudaStream_t>(stream));
#endif
            break;
          case WireTensor::Kind::sparse_values:
            if (indices_of_ != x.tensor)
              throw protocol_error(-1, cat("sparse update of ", t.name, ": values before indices"));
            if (!device_) {
              apply_sparse_host(t, dest_(t), indices_.data(),
                                static_cast<const std::byte*>(v.data), indices_.size());
            } else {
#if WEIGHTSYNC_HAS_CUDA
              sparse_->apply(v.data, v.nbytes / dtype_size(t.dtype), dest_(t), t.numel(),
                             static_cast<unsigned>(dtype_size(t.dtype)), t.name,
                             static_cast<cudaStream_t>(stream));
#endif
            }
            applied_bytes_ += v.nbytes + n_indices_ * 4;
            indices_of_ = static_cast<std::size_t>(-1);
            break;
        }
      }
#if WEIGHTSYNC_HAS_CUDA
      if (!device_blobs_.empty()) {
        if (!applier_) applier_.emplace();
        const auto s = static_cast<cudaStream_t>(stream);
        applier_->apply(device_blobs_, s);
        device_blobs_.clear();
        applier_->finish(s);  // the ring slot is reused after this call: the blobs must be in
      }
#endif
      if (!pass.empty() && load_) load_(pass, stream);
    };
  }

  //! Payload bytes applied in place so far.
  std::uint64_t applied_bytes() const { return applied_bytes_; }

 private:
  //! The gather of a piece that starts at a row of the gather's 2-D view: `op` with its rows
  //! counted from the piece's first (no rotary permutation: that does not shift). nullopt when
  //! the piece cannot go through it.
  static std::optional<GatherOp> piece_gather(const GatherOp& op, const WireTensor& x) {
    const auto cols = static_cast<std::uint64_t>(op.src_cols);
    if (op.head_rows != 0 || op.quantize() || cols == 0 || x.elem_offset % cols != 0)
      return std::nullopt;
    GatherOp g = op;
    g.row0 -= static_cast<std::int64_t>(x.elem_offset / cols);
    return g;
  }

  //! The wire index of a meta the pipeline hands back (the pipeline keeps the order, so a moving
  //! cursor finds it at once; the name search is the fallback).
  std::size_t find(const TensorMeta& m) {
    for (std::size_t n = 0; n < w_->metas.size(); ++n) {
      const std::size_t k = (cursor_ + n) % w_->metas.size();
      if (&w_->metas[k] == &m || w_->metas[k] == m) {
        cursor_ = k;
        return k;
      }
    }
    throw protocol_error(-1, cat("received a tensor the update does not have: ", m.name));
  }

  std::shared_ptr<const UpdateWire> wp_;
  const UpdateWire* w_;  // (wp_'s)
  AnyLoadWeights load_;
  AnyDestination dest_;
  AnyDeltaGather gather_;
  bool device_;
  std::vector<std::int32_t> indices_;
  std::size_t indices_of_ = static_cast<std::size_t>(-1);
  std::uint64_t n_indices_ = 0;
  std::size_t cursor_ = 0;
  std::uint64_t applied_bytes_ = 0;
  std::deque<GatherOp> shifted_;  //!< this load() call's pieces' gathers (piece_gather)
#if WEIGHTSYNC_HAS_CUDA
  std::vector<delta::DeltaApplyBlob> device_blobs_;
  std::optional<delta::CudaDeltaApplier> applier_;
  std::optional<delta::CudaSparseApplier> sparse_;
#endif
};

}  // namespace weightsync::detail
