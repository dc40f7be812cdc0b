// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Fp8Source: a WeightSource adapter that sends what an FP8 checkpoint holds. Each chosen tensor
//! `X.weight` (bfloat16 / float32) goes out as `X.weight` in float8_e4m3fn followed by its fp32
//! scales (`X.weight_scale_inv` for the block layouts, `X.weight_scale` per tensor / channel, as
//! DeepSeek-V3 / Qwen3-FP8 and vLLM's compressed-tensors checkpoints name them); every other
//! tensor (embeddings, norms, lm_head, MoE routers) goes out as it is.
//!
//! Lazy and bounded: a tensor is quantized when the pipeline asks for it (AnyTensorRange asks
//! only then). Two ways to hold the quantized bytes:
//! - iterate(workspace, options): into the pipeline's own ring. Chunk c's tensors are quantized
//!   (and its other tensors copied) straight into ring slot c % K of the workspace the producer
//!   runs with, back to back in the wire's order, so the producer finds the region already in
//!   place and sends it from there ("sent from where it is": no packing copy either). The producer
//!   takes chunk c's items only after chunk c - K has left its slot (it runs at most K chunks
//!   ahead: pipeline/detail/schedule.hpp), the moment it would pack the slot itself, so the
//!   quantize of chunk c overlaps the broadcasts of chunks c - K + 1 .. c - 1 exactly as packing
//!   does. Extra memory: one tensor's scales (a weight whose scales open the next chunk), plus,
//!   only where a chunk holds a single quantized tensor (a weight over B, or an unpacked
//!   transfer), one buffer of that tensor per slot. The workspace and options must be the ones
//!   passed to packed_broadcast_producer for this iteration. Transfers the producer sends another
//!   way (direct tensors, direct_threshold_bytes > 0; or small enough to travel in the handshake,
//!   up to 64 KiB here) fall back to the arenas below.
//! - iterate() with Fp8SourceOptions::whole (ipc, p2p: the consumer pulls every tensor at once):
//!   takes every source tensor at once and quantizes the chosen ones into one arena in batched
//!   launches (a whole FP8 copy of them), waited for once before the first tensor is yielded.
//! - iterate(): into K + 1 arenas, each the size of the largest chunk's quantized bytes (fp8 +
//!   scales, 256-byte aligned), chunk c using arena c % (K + 1). Extra memory: (K + 1) x (largest
//!   chunk's quantized bytes) <= (K + 1) x (B + the largest fp8 tensor and its scales), never a
//!   whole-model copy; the producer packs them into its ring as any source. Safe by the same
//!   run-ahead bound. This holds for the comm backends ("host", "nccl"); the options must carry
//!   the transfer's packed / buffer_size_bytes / num_buffers.
//!
//! The quantizer is a policy: HostFp8Quantizer (host memory, here) or CudaFp8Quantizer
//! (<weightsync/cuda/fp8_source.hpp>: device memory, the kernels on a stream). It provides
//! `Buffer alloc(bytes)`, `static std::byte* data(Buffer&)`, `quantize(meta, src, scaling, dst,
//! scales)`, `quantize_views(views)` (a batch of kernels::Fp8Params: ring mode runs a chunk's
//! quantizations as one, at the chunk's end) and `copy(dst, src, bytes)` (all may run
//! asynchronously), and `finish()` (everything enqueued is complete).

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <ranges>
#include <regex>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "weightsync/chunk_plan.hpp"
#include "weightsync/detail/format.hpp"
#include "weightsync/pipeline/detail/plan.hpp"
#include "weightsync/engine/adapter.hpp"
#include "weightsync/engine/backend.hpp"
#include "weightsync/engine/init_request.hpp"
#include "weightsync/engine/update_request.hpp"
#include "weightsync/error.hpp"
#include "weightsync/fp8/quantize.hpp"
#include "weightsync/tensor_meta.hpp"
#include "weightsync/transfer_options.hpp"
#include "weightsync/workspace.hpp"

namespace weightsync {

//! What Fp8Source quantizes and how.
struct Fp8SourceOptions {
  Fp8Scaling scaling = Fp8Scaling::block128;
  //! ECMAScript regexes searched in each name: a tensor is quantized when it matches one of
  //! `include` and none of `exclude`, is bfloat16 or float32, and has a shape `scaling` accepts
  //! (2-D for the block layouts). The default takes the linear projections of HF Llama / Qwen /
  //! Mixtral-style names (q/k/v/o, gate/up/down, fused qkv / gate_up, experts included) and leaves
  //! embeddings, norms, lm_head and routers (`mlp.gate.weight`) alone.
  std::vector<std::string> include = {R"(_proj\.weight$)"};
  std::vector<std::string> exclude = {};
  //! The transfer's chunking, as the trainer's NcclInitInfo / update overrides give it: it sets
  //! the arenas' size (see the file comment).
  bool packed = true;
  std::size_t buffer_size_bytes = static_cast<std::size_t>(kDefaultPackedBufferSizeBytes);
  int num_buffers = kDefaultPackedNumBuffers;
  //! For transports that pull every tensor of a sync at once (ipc, p2p): iterate() quantizes
  //! into one arena that holds every quantized tensor, kept until the next iteration. Extra
  //! memory: the model's quantized bytes (fp8 + scales), a whole FP8 copy of the chosen tensors;
  //! the chunking above is then not used.
  bool whole = false;

  //! The chunking of a transfer's packing (packed, packed_buffer_size_bytes, packed_num_buffers).
  void chunking_from(const Packing& p) {
    packed = p.packed;
    buffer_size_bytes = static_cast<std::size_t>(p.buffer_size_bytes);
    num_buffers = p.num_buffers;
  }
  //! The chunking an init info gives (vLLM's NcclInitInfo: <weightsync/vllm.hpp>).
  template <InitInfo I>
  void chunking_from(const I& info) {
    chunking_from(to_init_request(info, InitContext{}).packing);
  }
};

//! Quantizes into host memory (the host backend).
struct HostFp8Quantizer {
  using Buffer = std::vector<std::byte>;
  Buffer alloc(std::size_t bytes) const { return Buffer(bytes); }
  static std::byte* data(Buffer& b) { return b.data(); }
  //! The bytes are ready when it returns.
  void quantize(const TensorMeta& m, const void* src, Fp8Scaling s, void* dst,
                float* scales) const {
    quantize_fp8_host(m, src, s, dst, scales);
  }
  void quantize_views(std::span<const kernels::Fp8Params> views) const {
    for (const auto& v : views) quantize_fp8_view_host(v);
  }
  void copy(void* dst, const void* src, std::size_t n) const {
    if (n) std::memcpy(dst, src, n);
  }
  void finish() const {}
  void operator()(const TensorMeta& m, const void* src, Fp8Scaling s, void* dst,
                  float* scales) const {
    quantize(m, src, s, dst, scales);
  }
};

//! A WeightSource (S) seen as its FP8 checkpoint; models WeightSource itself. Holds a reference
//! to the source; one iteration at a time.
template <class S, class Quantizer = HostFp8Quantizer>
class Fp8Source {
 public:
  Fp8Source(S& source, Fp8SourceOptions opt, Quantizer q = Quantizer())
      : src_(source), opt_(std::move(opt)), q_(std::move(q)) {
    if (opt_.num_buffers < 1)
      throw config_error("num_buffers", detail::cat("must be >= 1, got ", opt_.num_buffers));
    if (opt_.buffer_size_bytes == 0) throw config_error("buffer_size_bytes", "must be >= 1, got 0");
    for (const auto& p : opt_.include) include_.emplace_back(p);
    for (const auto& p : opt_.exclude) exclude_.emplace_back(p);
  }

  //! Whether a source tensor is quantized (see Fp8SourceOptions::include).
  bool quantized(const TensorMeta& m) const {
    if (m.dtype != DType::bfloat16 && m.dtype != DType::float32) return false;
    if (fp8_block_scaling(opt_.scaling)
            ? m.shape.size() != 2
            : (opt_.scaling == Fp8Scaling::per_channel && m.shape.empty()))
      return false;
    const auto any = [&](const std::vector<std::regex>& v) {
      return std::any_of(v.begin(), v.end(),
                         [&](const std::regex& r) { return std::regex_search(m.name, r); });
    };
    return any(include_) && !any(exclude_);
  }

  //! The checkpoint's metadata: the source's, each quantized weight as float8_e4m3fn followed by
  //! its scales.
  std::vector<TensorMeta> metas() {
    refresh();
    return out_;
  }

  //! Extra memory the source holds for the last iteration, in bytes: the arenas (iterate()), or
  //! the scale buffer and any single-tensor buffers (iterate(workspace, options)).
  std::size_t arena_bytes() const {
    if (!slot_mode_) return arena_bytes_ * arenas_.size();
    std::size_t n = pending_bytes_;
    for (const std::size_t b : solo_bytes_) n += b;
    return n;
  }
  //! Whether the last iteration quantized into the pipeline's ring (see the file comment).
  bool in_ring() const noexcept { return slot_mode_; }

  //! A fresh lazy pass into K + 1 arenas (see the file comment).
  AnyTensorRange iterate() {
    refresh();
    plan_arenas();
    slot_mode_ = false;
    if (opt_.whole) return whole_pass();
    return start();
  }

  //! A fresh lazy pass into the ring of `ws`, the workspace packed_broadcast_producer runs this
  //! iteration with, under `opt`, its options (see the file comment). The quantizer's memory must
  //! be the workspace's (device memory for CudaFp8Quantizer and a CUDA policy, host memory for
  //! HostFp8Quantizer and the host policy).
  template <class P>
  AnyTensorRange iterate(Workspace<P>& ws, const TransferOptions& opt) {
    refresh();
    opt_.packed = opt.packed;
    opt_.buffer_size_bytes = opt.buffer_size_bytes;
    opt_.num_buffers = opt.num_buffers;
    const detail::PiecePlan plan(out_, 0, opt);  // a whole-tensor transfer: one root, M = 1
    const bool direct =
        std::any_of(plan.direct.begin(), plan.direct.end(), [](char d) { return d != 0; });
    if (direct || plan.total_bytes <= kRingMinBytes) {  // sent another way: the arenas
      plan_arenas();
      slot_mode_ = false;
      return start();
    }
    plan_ring(plan, static_cast<std::size_t>(opt.num_buffers));
    auto& st = detail::WorkspaceAccess::state(ws);
    slot_at_ = [&st](std::size_t k) -> std::byte* {
      return k < st.slots.size() ? static_cast<std::byte*>(static_cast<void*>(st.slots[k].data()))
                                 : nullptr;
    };
    slot_bytes_ = [&st] { return st.slot_bytes; };
    slot_mode_ = true;
    return start();
  }

 private:
  using Inner = std::remove_cvref_t<decltype(std::declval<S&>().iterate())>;

  //! Transfers up to this size may travel in the handshake (eager bytes): the producer then takes
  //! every chunk's items at once, which the ring cannot hold; they use the arenas.
  static constexpr std::size_t kRingMinBytes = std::size_t{64} << 10;
  enum class Place : char { slot, solo, source };

  //! Fp8SourceOptions::whole: takes every tensor of the source at once (their memory must stay
  //! valid together, as a pulling transport's sources must), quantizes the chosen ones into the
  //! arena in batched launches, waits for them once, then yields the checkpoint's tensors.
  AnyTensorRange whole_pass() {
    whole_out_.clear();
    batch_.clear();
    Inner inner = src_.iterate();
    std::size_t si = 0, o = 0;
    for (auto&& item : inner) {
      const TensorMeta& m = item.meta();
      if (si >= src_metas_.size() || o >= out_.size())
        throw config_error("source", detail::cat("yields more than the ", src_metas_.size(),
                                                 " declared tensors"));
      if (!quant_[si]) {  // as it is: the pipeline checks it against the declared metadata
        SourceTensorRef r{&out_[o++], item.data()};
        if (m.name != r.meta().name || m.dtype != r.meta().dtype || m.shape != r.meta().shape)
          r.meta_ = &m;
        whole_out_.push_back(r);
        ++si;
        continue;
      }
      const TensorMeta& want = src_metas_[si++];
      if (m.name != want.name || m.dtype != want.dtype || m.shape != want.shape)
        throw config_error(
            want.name, detail::cat("the source yields ", m.name, " ", dtype_name(m.dtype), " ",
                                   detail::shape_string(m.shape), " where ",
                                   dtype_name(want.dtype), " ", detail::shape_string(want.shape),
                                   " was declared"));
      std::byte* w = take(o, out_[o].nbytes());
      std::byte* sc = take(o + 1, out_[o + 1].nbytes());
      batch_.push_back(
          fp8_whole_view(m, opt_.scaling, item.data(), w, reinterpret_cast<float*>(sc)));
      whole_out_.push_back(SourceTensorRef{&out_[o], w});
      whole_out_.push_back(SourceTensorRef{&out_[o + 1], sc});
      o += 2;
    }
    if (!batch_.empty()) q_.quantize_views(std::span<const kernels::Fp8Params>(batch_));
    batch_.clear();
    q_.finish();
    return AnyTensorRange([this, k = std::size_t{0}](SourceTensorRef& out) mutable {
      if (k >= whole_out_.size()) return false;
      out = whole_out_[k++];
      return true;
    });
  }

  AnyTensorRange start() {
    it_.reset();
    inner_ = std::make_unique<Inner>(src_.iterate());
    it_.emplace(std::ranges::begin(*inner_));
    started_ = false;
    pending_scale_ = nullptr;
    ring_pending_ = false;
    next_src_ = 0;
    next_out_ = 0;
    return AnyTensorRange([this](SourceTensorRef& out) { return next(out); });
  }

  //! Ring mode: each output tensor's chunk, place and offset in its slot; the scale buffer.
  void plan_ring(const detail::PiecePlan& plan, std::size_t K) {
    ring_k_ = K;
    chunk_of_.assign(out_.size(), 0);
    chunk_last_.assign(out_.size(), 0);
    place_.assign(out_.size(), Place::slot);
    offset_.assign(out_.size(), 0);
    ring_need_ = 0;
    std::size_t scales = 0;
    // M = 1: step c is chunk c, and a piece's position in owned[0] is its tensor's index.
    for (std::size_t c = 0; c < plan.chunks[0].size(); ++c) {
      const Chunk& ch = plan.chunks[0][c];
      const std::size_t solo = plan.regions[0][c].solo;
      std::size_t off = 0;
      for (std::size_t i = ch.begin; i < ch.end; ++i) {
        chunk_of_[i] = c;
        chunk_last_[i] = i + 1 == ch.end;
        if (i == solo) {
          place_[i] = made_[i] ? Place::solo : Place::source;
          continue;
        }
        offset_[i] = off;
        off += out_[i].nbytes();
      }
      if (solo == detail::PiecePlan::npos) ring_need_ = std::max(ring_need_, off);
    }
    for (std::size_t i = 0; i + 1 < out_.size(); ++i)
      if (made_[i] && out_[i].dtype == DType::float8_e4m3fn)  // a weight: its scales follow
        scales = std::max(scales, out_[i + 1].nbytes());
    if (scales != pending_bytes_) {
      pending_.reset();
      pending_bytes_ = scales;
      if (scales) pending_.emplace(q_.alloc(scales));
    }
    solo_.resize(K);
    solo_bytes_.resize(K, 0);
  }

  //! Where output tensor i goes in ring mode (its chunk's slot is free when this is asked).
  std::byte* ring_place(std::size_t i) {
    const std::size_t k = chunk_of_[i] % ring_k_;
    if (place_[i] == Place::solo) {
      const std::size_t nb = out_[i].nbytes();
      if (solo_bytes_[k] < nb) {
        solo_[k].reset();
        solo_[k].emplace(q_.alloc(nb));
        solo_bytes_[k] = nb;
      }
      return nb ? Quantizer::data(*solo_[k]) : nullptr;
    }
    std::byte* slot = slot_at_(k);
    if (!slot || slot_bytes_() < ring_need_)
      throw state_error(detail::cat("Fp8Source: the workspace's ring (", slot_bytes_(),
                                    "-byte slots) is not the one of this transfer's plan (",
                                    ring_need_,
                                    " bytes); pass the producer's workspace and "
                                    "options to iterate()"));
    return slot + offset_[i];
  }

  //! After output tensor i: its chunk is complete when it was the chunk's last tensor.
  //! The chunk's quantizations run as one batch then (their bytes are read only once the whole
  //! chunk has been taken).
  void ring_after(std::size_t i) {
    if (!chunk_last_[i] && place_[i] != Place::solo) return;
    if (!batch_.empty()) q_.quantize_views(std::span<const kernels::Fp8Params>(batch_));
    batch_.clear();
    q_.finish();
  }

  bool next_ring(SourceTensorRef& out) {
    if (ring_pending_) {  // the scales of the weight before
      const std::size_t si = next_out_++;
      std::byte* at = ring_scale_at_;
      if (!at) {  // they open the next chunk: from the scale buffer into its slot, now free
        at = ring_place(si);
        q_.copy(at, Quantizer::data(*pending_), out_[si].nbytes());
      }
      ring_pending_ = false;
      out = SourceTensorRef{&out_[si], at};
      ring_after(si);
      return true;
    }
    if (started_) ++*it_;
    started_ = true;
    if (*it_ == std::ranges::end(*inner_)) return false;
    auto&& item = **it_;
    const TensorMeta& m = item.meta();
    const std::size_t si = next_src_++;
    if (si >= src_metas_.size() || next_out_ >= out_.size())
      throw config_error(
          "source", detail::cat("yields more than the ", src_metas_.size(), " declared tensors"));
    const std::size_t wi = next_out_++;
    const bool same = m.name == out_[wi].name && m.dtype == src_metas_[si].dtype &&
                      m.shape == src_metas_[si].shape;
    if (!quant_[si]) {
      out = SourceTensorRef{&out_[wi], item.data()};
      if (!same) {
        out.meta_ = &m;  // let the pipeline report the mismatch
      } else if (place_[wi] == Place::slot) {
        std::byte* at = ring_place(wi);
        q_.copy(at, item.data(), out_[wi].nbytes());
        out = SourceTensorRef{&out_[wi], at};
      }
      ring_after(wi);
      return true;
    }
    if (!same)
      throw config_error(
          src_metas_[si].name,
          detail::cat("the source yields ", m.name, " ", dtype_name(m.dtype), " ",
                      detail::shape_string(m.shape), " where ", dtype_name(src_metas_[si].dtype),
                      " ", detail::shape_string(src_metas_[si].shape), " was declared"));
    std::byte* w = ring_place(wi);
    const bool with = chunk_of_[wi + 1] == chunk_of_[wi];
    ring_scale_at_ = with ? ring_place(wi + 1) : nullptr;
    float* scales = reinterpret_cast<float*>(with ? ring_scale_at_ : Quantizer::data(*pending_));
    batch_.push_back(fp8_whole_view(m, opt_.scaling, item.data(), w, scales));
    ring_pending_ = true;
    out = SourceTensorRef{&out_[wi], w};
    ring_after(wi);
    return true;
  }

  void refresh() {
    src_metas_ = src_.metas();
    out_.clear();
    made_.clear();
    quant_.assign(src_metas_.size(), 0);
    for (std::size_t i = 0; i < src_metas_.size(); ++i) {
      const TensorMeta& m = src_metas_[i];
      if (quantized(m)) {
        quant_[i] = 1;
        out_.push_back(fp8_weight_meta(m));
        out_.push_back(fp8_scale_meta(m, opt_.scaling, fp8_scale_name(m.name, opt_.scaling)));
        made_.insert(made_.end(), {1, 1});
      } else {
        out_.push_back(m);
        made_.push_back(0);
      }
    }
  }

  static std::size_t aligned(std::size_t n) { return (n + 255) / 256 * 256; }

  //! Each output tensor's chunk, and arenas for K + 1 chunks of the largest quantized size.
  void plan_arenas() {
    const auto chunks = opt_.whole    ? std::vector<Chunk>{Chunk{0, out_.size(), 0}}
                        : opt_.packed ? chunk_plan(out_, opt_.buffer_size_bytes)
                                      : unpacked_plan(out_);
    chunk_of_.assign(out_.size(), 0);
    std::size_t largest = 0;
    for (std::size_t c = 0; c < chunks.size(); ++c) {
      std::size_t q = 0;
      for (std::size_t i = chunks[c].begin; i < chunks[c].end; ++i) {
        chunk_of_[i] = c;
        if (made_[i]) q += aligned(out_[i].nbytes());
      }
      largest = std::max(largest, q);
    }
    const std::size_t n = opt_.whole ? 1 : static_cast<std::size_t>(opt_.num_buffers) + 1;
    if (largest != arena_bytes_ || arenas_.size() != n) {
      arenas_.clear();
      arena_bytes_ = largest;
      if (largest > 0)
        for (std::size_t k = 0; k < n; ++k) arenas_.push_back(q_.alloc(largest));
    }
    arena_chunk_.assign(arenas_.size(), static_cast<std::size_t>(-1));
    arena_used_.assign(arenas_.size(), 0);
  }

  std::byte* take(std::size_t out_index, std::size_t bytes) {
    const std::size_t c = chunk_of_[out_index];
    const std::size_t k = c % arenas_.size();
    if (arena_chunk_[k] != c) {  // chunk c - K - 1 has left (the producer's run-ahead bound)
      arena_chunk_[k] = c;
      arena_used_[k] = 0;
    }
    std::byte* p = Quantizer::data(arenas_[k]) + arena_used_[k];
    arena_used_[k] += aligned(bytes);
    return p;
  }

  bool next(SourceTensorRef& out) {
    if (slot_mode_) return next_ring(out);
    if (pending_scale_ != nullptr) {
      out = SourceTensorRef{&out_[next_out_++], pending_scale_};
      pending_scale_ = nullptr;
      return true;
    }
    if (started_) ++*it_;
    started_ = true;
    if (*it_ == std::ranges::end(*inner_)) return false;
    auto&& item = **it_;
    const TensorMeta& m = item.meta();
    const std::size_t si = next_src_++;
    if (si >= src_metas_.size() || next_out_ >= out_.size())
      throw config_error(
          "source", detail::cat("yields more than the ", src_metas_.size(), " declared tensors"));
    if (!quant_[si]) {  // as it is: the pipeline checks it against the declared metadata
      out = SourceTensorRef{&out_[next_out_++], item.data()};
      if (m.name != out.meta().name || m.dtype != out.meta().dtype || m.shape != out.meta().shape)
        out.meta_ = &m;  // let the pipeline report the mismatch
      return true;
    }
    const TensorMeta& want = src_metas_[si];
    if (m.name != want.name || m.dtype != want.dtype || m.shape != want.shape)
      throw config_error(
          want.name, detail::cat("the source yields ", m.name, " ", dtype_name(m.dtype), " ",
                                 detail::shape_string(m.shape), " where ", dtype_name(want.dtype),
                                 " ", detail::shape_string(want.shape), " was declared"));
    const std::size_t wi = next_out_++;
    std::byte* w = take(wi, out_[wi].nbytes());
    std::byte* s = take(wi + 1, out_[wi + 1].nbytes());
    q_.quantize(m, item.data(), opt_.scaling, w, reinterpret_cast<float*>(s));
    q_.finish();
    out = SourceTensorRef{&out_[wi], w};
    pending_scale_ = s;
    return true;
  }

  S& src_;
  Fp8SourceOptions opt_;
  Quantizer q_;
  std::vector<std::regex> include_, exclude_;
  std::vector<TensorMeta> src_metas_, out_;
  std::vector<char> quant_;  //!< per source tensor
  std::vector<char> made_;   //!< per output tensor: written by the quantizer (arena memory)
  std::vector<std::size_t> chunk_of_;
  std::vector<typename Quantizer::Buffer> arenas_;
  std::size_t arena_bytes_ = 0;
  std::vector<std::size_t> arena_chunk_, arena_used_;
  // On the heap: its iterator may point into it, and an optional of a range that holds a
  // std::function trips GCC 13's -Wmaybe-uninitialized.
  std::unique_ptr<Inner> inner_;
  std::vector<SourceTensorRef> whole_out_;  //!< Fp8SourceOptions::whole: the pass's tensors
  std::optional<std::ranges::iterator_t<Inner>> it_;
  bool started_ = false;
  const void* pending_scale_ = nullptr;
  std::size_t next_src_ = 0, next_out_ = 0;
  // Ring mode (iterate(workspace, options)).
  bool slot_mode_ = false;
  std::size_t ring_k_ = 0, ring_need_ = 0;
  std::vector<char> chunk_last_;
  std::vector<Place> place_;
  std::vector<std::size_t> offset_;
  std::function<std::byte*(std::size_t)> slot_at_;
  std::function<std::size_t()> slot_bytes_;
  std::optional<typename Quantizer::Buffer> pending_;
  std::size_t pending_bytes_ = 0;
  std::vector<std::optional<typename Quantizer::Buffer>> solo_;
  std::vector<std::size_t> solo_bytes_;
  bool ring_pending_ = false;
  std::byte* ring_scale_at_ = nullptr;
  std::vector<kernels::Fp8Params> batch_;  //!< the chunk's quantizations, run at its end
};

}  // namespace weightsync
