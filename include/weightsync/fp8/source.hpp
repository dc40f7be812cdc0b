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
//! only then), into one of K + 1 arenas, each the size of the largest chunk's quantized bytes
//! (fp8 + scales, 256-byte aligned), chunk c using arena c % (K + 1). Extra memory is therefore
//! (K + 1) x (largest chunk's quantized bytes) <= (K + 1) x (B + the largest fp8 tensor and its
//! scales), never a whole-model copy. That is safe because the producer takes chunk c's tensors
//! only after chunk c - K has left (it runs at most K chunks ahead: detail/pipeline/producer.hpp),
//! so the arena of chunk c - K - 1 is free. This holds for the comm backends ("host", "nccl");
//! the options must carry the transfer's packed / buffer_size_bytes / num_buffers.
//!
//! The quantizer is a policy: HostFp8Quantizer (host memory, here) or CudaFp8Quantizer
//! (<weightsync/cuda/fp8_quantize.hpp>: device memory, the kernels on a stream).

#include <algorithm>
#include <cstddef>
#include <optional>
#include <ranges>
#include <regex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "weightsync/chunk_plan.hpp"
#include "weightsync/detail/format.hpp"
#include "weightsync/engine/backend.hpp"
#include "weightsync/error.hpp"
#include "weightsync/fp8/quantize.hpp"
#include "weightsync/tensor_meta.hpp"
#include "weightsync/vllm/init_info.hpp"

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

  //! The chunking of `info` (packed, packed_buffer_size_bytes, packed_num_buffers).
  void chunking_from(const NcclInitInfo& info) {
    packed = info.packed;
    buffer_size_bytes = static_cast<std::size_t>(info.packed_buffer_size_bytes);
    num_buffers = info.packed_num_buffers;
  }
};

//! The scale tensor's name for weight `name`: `.weight` -> `.weight_scale_inv` (block layouts)
//! or `.weight_scale` (per tensor / channel); any other name gets the suffix appended.
inline std::string fp8_scale_name(const std::string& name, Fp8Scaling s) {
  const char* suffix = fp8_block_scaling(s) ? "_scale_inv" : "_scale";
  return name + suffix;
}

//! Quantizes into host memory (the host backend).
struct HostFp8Quantizer {
  using Buffer = std::vector<std::byte>;
  Buffer alloc(std::size_t bytes) const { return Buffer(bytes); }
  static std::byte* data(Buffer& b) { return b.data(); }
  //! The bytes are ready when it returns.
  void operator()(const TensorMeta& m, const void* src, Fp8Scaling s, void* dst,
                  float* scales) const {
    quantize_fp8_host(m, src, s, dst, scales);
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

  //! Extra memory of the last iterate() (the arenas), in bytes.
  std::size_t arena_bytes() const { return arena_bytes_ * arenas_.size(); }

  //! A fresh lazy pass (see the file comment).
  AnyTensorRange iterate() {
    refresh();
    plan_arenas();
    inner_.reset();
    inner_.emplace(src_.iterate());
    it_.emplace(std::ranges::begin(*inner_));
    started_ = false;
    pending_scale_ = nullptr;
    next_src_ = 0;
    next_out_ = 0;
    return AnyTensorRange([this](SourceTensorRef& out) { return next(out); });
  }

 private:
  using Inner = std::remove_cvref_t<decltype(std::declval<S&>().iterate())>;

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
    const auto chunks =
        opt_.packed ? chunk_plan(out_, opt_.buffer_size_bytes) : unpacked_plan(out_);
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
    const std::size_t n = static_cast<std::size_t>(opt_.num_buffers) + 1;
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
    q_(m, item.data(), opt_.scaling, w, reinterpret_cast<float*>(s));
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
  std::optional<Inner> inner_;
  std::optional<std::ranges::iterator_t<Inner>> it_;
  bool started_ = false;
  const void* pending_scale_ = nullptr;
  std::size_t next_src_ = 0, next_out_ = 0;
};

}  // namespace weightsync
