// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The destination planner. Given the tensors an update declares, the engine's parameter table and
//! a LoadMap, plan_loading() decides for every tensor either a destination pointer (it lands in
//! place with no transform: q, k and v at their rows of an unsharded qkv, a same-dtype norm) or a
//! gather that slices, permutes and casts it from the received view into its parameter. The plan
//! plugs into the consumer: TransferOptions::destination = plan.destination_fn(), and load_weights
//! = plan.loader(). Gathers run as plain loops on the host path; on a CUDA stream, as one batched
//! kernel launch per chunk once <weightsync/cuda/gather.hpp> is included (it specializes
//! GatherExecutor<cudaStream_t>); on a stream with no GatherExecutor, a chunk holding a tensor
//! that needs a gather throws state_error. Tensors of any dtype are copied, sliced and permuted;
//! casts are among float32, float16 and bfloat16 only, and anything else is refused when the plan
//! is made, so every gather of a plan runs on the host and on the CUDA kernel alike.
//!
//! FP8 parameters (float8_e4m3fn, with their fp32 scales in the parameter
//! fp8_scale_name(param, scaling): `<param>_scale_inv` for block scales, `<param>_scale` per
//! tensor / channel):
//! - quantize on load: a bfloat16 / float32 tensor placed into an FP8 parameter is quantized
//!   straight into it (PlanOptions::fp8_scaling), through the same slice, fuse and rotary permute,
//!   with its scales written at the places its rows take in the fused / sharded parameter. The
//!   result is what the engine would load from the trainer's FP8 checkpoint (each tensor, rotary-
//!   permuted, quantized whole by quantize_fp8_host, then sharded and fused with its scales): block
//!   scales follow 128x128 blocks of the source, per-channel scales whole source rows (a column
//!   shard keeps its row's scale), a per-tensor scale the whole source. The host path runs
//!   quantize_fp8_view_host, a CUDA stream the FP8 kernels (<weightsync/cuda/fp8_load.hpp>,
//!   Fp8LoadExecutor<cudaStream_t>); both write the same bits.
//! - an FP8 sender (Fp8Source): a float8_e4m3fn tensor `X` placed into an FP8 parameter is copied
//!   as it is, never dequantized, and its scale tensor (`X_scale_inv` / `X_scale`, recognized by
//!   name next to a float8_e4m3fn `X` of the same update, never given to the map) is placed into
//!   the parameter's scales where X's rows and columns land.
//! - refused when the plan is made, with a config_error naming the tensor and the parameter: a
//!   piece whose rows or columns do not start and end on 128-element boundaries of both the
//!   source and the parameter (block scales; a tensor-parallel shard or a fused piece that cuts a
//!   128x128 block, which vLLM refuses as well), a rotary permute whose heads move rows between
//!   128-row blocks of an FP8 tensor (its block scales cannot follow without dequantizing), a
//!   per-tensor scale for a parameter fused from several tensors, a missing scale parameter or one
//!   whose shape does not match.
//!
//! Derived copies (PlanOptions::derived; verl #7519): layouts an engine builds from its parameters
//! (swizzled scales, repacked weights) are rebuilt through a hook once per update, right after
//! the last write to their sources, so a sync never leaves one stale.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "weightsync/detail/format.hpp"
#include "weightsync/error.hpp"
#include "weightsync/fp8/quantize.hpp"
#include "weightsync/host/device_policy.hpp"
#include "weightsync/kernels/fp8_abi.hpp"
#include "weightsync/loading/cast.hpp"
#include "weightsync/loading/placement.hpp"
#include "weightsync/tensor_meta.hpp"

namespace weightsync {

//! One engine parameter: where it is (host or device memory), its dtype and its (local) shape.
struct ParamInfo {
  std::string name;
  void* data = nullptr;
  DType dtype = DType::bfloat16;
  std::vector<std::int64_t> shape;
};

//! One received tensor's way into its parameter: out[d][c] = cast(src[row(row0 + d)][col0 + c])
//! for d < rows, c < cols, where row() is the rotary permutation (identity when head_rows == 0).
struct GatherOp {
  std::size_t tensor = 0;    //!< index into the planned metas
  std::byte* dst = nullptr;  //!< first element of the destination region
  DType dst_dtype = DType::bfloat16;
  DType src_dtype = DType::bfloat16;
  std::int64_t src_cols = 0;   //!< the source's row length (2-D view)
  std::int64_t rows = 0;       //!< rows written
  std::int64_t cols = 0;       //!< elements per written row (= the parameter's row length)
  std::int64_t row0 = 0;       //!< first source row, in permuted order
  std::int64_t col0 = 0;       //!< first source column
  std::int64_t head_rows = 0;  //!< rows per head of the rotary permutation; 0: none
  //! Quantize on load (dst_dtype float8_e4m3fn from a bfloat16 / float32 source): the first scale
  //! of this piece in its scale parameter, the layout, the source's rows and the scales between
  //! block rows (kernels::Fp8Params). nullptr: a plain gather.
  float* scales = nullptr;
  Fp8Scaling scaling = Fp8Scaling::block128;
  std::int64_t src_rows = 0;  //!< the source's rows (2-D view)
  std::int64_t scale_stride = 0;
  bool quantize() const noexcept { return scales != nullptr; }
  //! True when the bytes can be received straight into dst.
  bool in_place(std::int64_t source_rows) const noexcept {
    return dst_dtype == src_dtype && head_rows == 0 && row0 == 0 && col0 == 0 && cols == src_cols &&
           rows == source_rows;
  }
};

//! A copy an engine derives from some of its parameters: a swizzled or transposed scale layout
//! that a kernel reads instead of weight_scale_inv, a repacked weight (verl #7519: kernels that
//! keep such copies served garbage after a sync that rewrote only the parameters). The plan calls
//! `rebuild` once per update, as soon as this update has written every one of `sources` that the
//! plan writes, in the load() call of that last write, after it: on the load's stream (the CUDA
//! stream, as void*; nullptr on the host path), so the copy's kernels run after the writes.
//! Tensors that write a source are handed to load() as views, never received in place, so the plan
//! sees each of them land.
struct DerivedCopy {
  std::string name;                  //!< for messages
  std::vector<std::string> sources;  //!< parameters of the table it is derived from
  std::function<void(void* stream)> rebuild;
};

//! What plan_loading() may tolerate, and what it writes besides the parameters.
struct PlanOptions {
  //! Tensors the map does not place are skipped (true) or an error (false).
  bool ignore_unmapped = false;
  //! Every parameter element must be written by some tensor (padding rows of a vocab-parallel
  //! embedding are not, so this is off by default; uncovered() lists what is not).
  bool require_full_coverage = false;
  //! The scales a bfloat16 / float32 tensor gets when it is quantized into a float8_e4m3fn
  //! parameter (quantize on load; see the file comment).
  Fp8Scaling fp8_scaling = Fp8Scaling::block128;
  //! The engine's derived copies, rebuilt through their hooks (see DerivedCopy).
  std::vector<DerivedCopy> derived = {};
};

//! Runs a batch of gathers on a device stream: `static void run(std::span<const GatherOp> ops,
//! std::span<const void* const> srcs, Stream)` with `available = true`. Specialized for
//! cudaStream_t by <weightsync/cuda/gather.hpp>.
template <class Stream>
struct GatherExecutor {
  static constexpr bool available = false;
};

//! Runs a batch of quantize-on-load ops (GatherOp::quantize()) on a device stream, like
//! GatherExecutor. Specialized for cudaStream_t by <weightsync/cuda/fp8_load.hpp>.
template <class Stream>
struct Fp8LoadExecutor {
  static constexpr bool available = false;
};

namespace detail {

//! The FP8 kernels' view (kernels/fp8_abi.hpp) of quantize-on-load op `op` from `src`.
inline kernels::Fp8Params fp8_load_view(const GatherOp& op, const void* src) noexcept {
  kernels::Fp8Params p{};
  p.src = src;
  p.dst = op.dst;
  p.scales = op.scales;
  p.rows = op.rows;
  p.cols = op.cols;
  p.src_type = op.src_dtype == DType::bfloat16 ? kernels::kFp8SrcBfloat16 : kernels::kFp8SrcFloat32;
  p.mode = static_cast<std::uint32_t>(op.scaling);
  p.src_rows = op.src_rows;
  p.src_cols = op.src_cols;
  p.row0 = op.row0;
  p.col0 = op.col0;
  p.head_rows = op.head_rows;
  p.scale_stride = op.scale_stride;
  return p;
}

//! Source row of permuted row `s` for `w.view(H, D/H/2, 2, C).transpose(1, 2).reshape(D, C)`.
inline std::int64_t permuted_row(std::int64_t s, std::int64_t head_rows) noexcept {
  const std::int64_t h = s / head_rows, w = s % head_rows, half = head_rows / 2;
  return h * head_rows + (w % half) * 2 + w / half;
}

//! The inverse of permuted_row: the permuted row that reads source row `r` (what a delta of a
//! permuted tensor needs: a changed element's source row tells where it lands).
inline std::int64_t unpermuted_row(std::int64_t r, std::int64_t head_rows) noexcept {
  const std::int64_t h = r / head_rows, q = r % head_rows, half = head_rows / 2;
  return h * head_rows + (q % 2) * half + q / 2;
}

//! Runs one gather on the host.
inline void run_gather_host(const GatherOp& op, const std::byte* src) {
  if (op.quantize()) {
    quantize_fp8_view_host(fp8_load_view(op, src));
    return;
  }
  const std::size_t ss = dtype_size(op.src_dtype), ds = dtype_size(op.dst_dtype);
  for (std::int64_t d = 0; d < op.rows; ++d) {
    const std::int64_t s = op.row0 + d;
    const std::int64_t r = op.head_rows ? permuted_row(s, op.head_rows) : s;
    convert_row(op.dst + static_cast<std::size_t>(d * op.cols) * ds, op.dst_dtype,
                src + static_cast<std::size_t>(r * op.src_cols + op.col0) * ss, op.src_dtype,
                static_cast<std::size_t>(op.cols));
  }
}

}  // namespace detail

//! The result of plan_loading(): per tensor, a destination or a gather.
class LoadPlan {
 public:
  //! Where `m` lands in place, or nullptr (handed over as a view, then gathered, or skipped; or
  //! a name the plan does not know, which load() then refuses).
  //! @throws config_error naming the tensor and the field when `m` declares another dtype or
  //! shape than the meta the plan was made for: its bytes would not fit the planned region.
  void* destination(const TensorMeta& m) const {
    auto it = index_.find(m.name);
    if (it == index_.end()) return nullptr;
    check_meta(m, metas_[it->second]);
    return direct_[it->second];
  }
  //! A TransferOptions::destination callback (the plan must outlive it).
  std::function<void*(const TensorMeta&)> destination_fn() const {
    return [this](const TensorMeta& m) { return destination(m); };
  }

  //! Applies the gathers of the received views. Host stream: plain loops. A stream with a
  //! GatherExecutor (CUDA): one batched launch for the whole call, and the quantize-on-load ops
  //! through its Fp8LoadExecutor. Otherwise state_error if a view needs a gather. Then the
  //! derived copies whose sources this call completed (see DerivedCopy).
  //! Every view is checked against the plan before any byte is written, so a bad batch leaves
  //! the parameters untouched.
  template <class Stream>
  void load(std::span<const TensorView> views, Stream stream) const {
    batch_ops_.clear();
    batch_srcs_.clear();
    batch_q_ops_.clear();
    batch_q_srcs_.clear();
    batch_index_.clear();
    for (const auto& v : views) {
      if (!v.meta) throw config_error("view", "has no metadata");
      auto it = index_.find(v.name());
      if (it == index_.end())
        throw config_error("tensor '" + v.name() + "'",
                           "was not in the metas this plan was made for");
      const std::size_t i = it->second;
      check_meta(*v.meta, metas_[i]);
      if (v.nbytes != metas_[i].nbytes())
        throw config_error("tensor '" + v.name() + "'.nbytes",
                           detail::cat("the view holds ", v.nbytes, " bytes, the plan expects ",
                                       metas_[i].nbytes()));
      if (v.nbytes && !v.data) throw config_error("tensor '" + v.name() + "'.data", "is null");
      batch_index_.push_back(i);
    }
    for (std::size_t k = 0; k < views.size(); ++k) {
      const TensorView& v = views[k];
      const std::size_t i = batch_index_[k];
      if (!ops_[i]) continue;                            // unmapped (and allowed)
      if (direct_[i] && v.data == direct_[i]) continue;  // already received in place
      // A tensor that could land in place but came as a view (no destination callback, or a GPU
      // backend with host parameters) is copied like any gather.
      const GatherOp& op = *ops_[i];
      if (op.rows == 0 || op.cols == 0) continue;
      if constexpr (std::is_same_v<Stream, HostStream>) {
        detail::run_gather_host(op, static_cast<const std::byte*>(v.data));
      } else if constexpr (GatherExecutor<Stream>::available) {
        if (op.quantize()) {
          if constexpr (Fp8LoadExecutor<Stream>::available) {
            batch_q_ops_.push_back(op);
            batch_q_srcs_.push_back(v.data);
          } else {
            throw state_error("tensor '" + v.name() +
                              "' is quantized into an FP8 parameter, and this stream type has no "
                              "Fp8LoadExecutor (include <weightsync/cuda/fp8_load.hpp> for CUDA)");
          }
        } else {
          batch_ops_.push_back(op);
          batch_srcs_.push_back(v.data);
        }
      } else {
        throw state_error("tensor '" + v.name() +
                          "' needs a copy, slice, permute or cast into its "
                          "parameter, and this stream type has no GatherExecutor (include "
                          "<weightsync/cuda/gather.hpp> for CUDA)");
      }
    }
    if constexpr (!std::is_same_v<Stream, HostStream> && GatherExecutor<Stream>::available) {
      if (!batch_ops_.empty())
        GatherExecutor<Stream>::run(std::span<const GatherOp>(batch_ops_),
                                    std::span<const void* const>(batch_srcs_), stream);
      if constexpr (Fp8LoadExecutor<Stream>::available)
        if (!batch_q_ops_.empty())
          Fp8LoadExecutor<Stream>::run(std::span<const GatherOp>(batch_q_ops_),
                                       std::span<const void* const>(batch_q_srcs_), stream);
    }
    if (!derived_.empty()) {
      void* sp = nullptr;
      if constexpr (std::is_pointer_v<Stream>) sp = static_cast<void*>(stream);
      track_writes(sp);
    }
  }
  //! A LoadWeightsFn over `Stream` (the plan must outlive it).
  template <class Stream = HostStream>
  auto loader() const {
    return [this](std::span<const TensorView> views, Stream s) { load(views, s); };
  }

  //! Forgets which tensors this update has written (the derived copies' bookkeeping). load()
  //! does it by itself when a tensor arrives a second time; call it after an update that failed
  //! half-way, so the next update's first tensors are not counted with the failed one's.
  void begin_update() const {
    std::fill(seen_.begin(), seen_.end(), 0);
    std::fill(done_.begin(), done_.end(), 0);
    std::fill(fired_.begin(), fired_.end(), 0);
  }

  //! The gather of tensor `name`, or nullptr (lands in place, or unmapped).
  const GatherOp* gather(const std::string& name) const {
    auto it = index_.find(name);
    return it == index_.end() || !ops_[it->second] || direct_[it->second] ? nullptr
                                                                          : &*ops_[it->second];
  }
  //! Counts: tensors landing in place, tensors gathered (quantized ones included), tensors
  //! skipped, and tensors quantized on load.
  std::size_t in_place_count() const noexcept { return count(0); }
  std::size_t gather_count() const noexcept { return count(1); }
  std::size_t skipped_count() const noexcept { return count(2); }
  std::size_t quantize_count() const noexcept {
    std::size_t n = 0;
    for (const auto& o : ops_) n += o && o->quantize();
    return n;
  }
  //! Parameter regions no tensor writes, as "name[begin, end)" in elements.
  const std::vector<std::string>& uncovered() const noexcept { return uncovered_; }
  //! The derived copies none of whose sources this plan writes (their hooks are never called).
  const std::vector<std::string>& derived_not_written() const noexcept { return idle_derived_; }

 private:
  friend LoadPlan plan_loading(std::span<const TensorMeta>, std::span<const ParamInfo>,
                               const LoadMap&, const PlanOptions&);
  //! @throws config_error (tensor, field, both values) when `got` is not the planned `want`.
  static void check_meta(const TensorMeta& got, const TensorMeta& want) {
    if (got.dtype != want.dtype)
      throw config_error("tensor '" + want.name + "'.dtype",
                         detail::cat("declared ", dtype_name(got.dtype),
                                     " but the load plan was made for ", dtype_name(want.dtype)));
    if (got.shape != want.shape)
      throw config_error(
          "tensor '" + want.name + "'.shape",
          detail::cat("declared ", detail::shape_string(got.shape),
                      " but the load plan was made for ", detail::shape_string(want.shape)));
  }
  std::size_t count(int kind) const noexcept {
    std::size_t n = 0;
    for (std::size_t i = 0; i < metas_.size(); ++i) {
      const int k = direct_[i] ? 0 : ops_[i] ? 1 : 2;
      n += k == kind;
    }
    return n;
  }
  //! Counts the writes of the batch in batch_index_ and rebuilds the derived copies whose
  //! written sources are now all complete.
  void track_writes(void* stream) const {
    for (const std::size_t i : batch_index_)
      if (seen_[i]) {  // a tensor written twice: a new update began
        begin_update();
        break;
      }
    for (const std::size_t i : batch_index_) {
      seen_[i] = 1;
      for (const std::size_t prm : writes_[i]) ++done_[prm];
    }
    for (std::size_t d = 0; d < derived_.size(); ++d) {
      if (fired_[d] || derived_sources_[d].empty()) continue;
      bool complete = true;
      for (const std::size_t prm : derived_sources_[d])
        complete = complete && done_[prm] == writers_[prm];
      if (!complete) continue;
      fired_[d] = 1;
      derived_[d].rebuild(stream);
    }
  }
  std::vector<TensorMeta> metas_;
  std::unordered_map<std::string, std::size_t> index_;
  std::vector<void*> direct_;
  std::vector<std::optional<GatherOp>> ops_;
  std::vector<std::string> uncovered_;
  // Derived copies: each tensor's written parameters, each parameter's writer count, each copy's
  // written sources; per update: tensors seen, writes done per parameter, copies rebuilt.
  std::vector<DerivedCopy> derived_;
  std::vector<std::vector<std::size_t>> writes_, derived_sources_;
  std::vector<std::size_t> writers_;
  std::vector<std::string> idle_derived_;
  mutable std::vector<char> seen_, fired_;
  mutable std::vector<std::size_t> done_;
  // Scratch for one load() call (reused, so a round allocates nothing once warm).
  mutable std::vector<GatherOp> batch_ops_, batch_q_ops_;
  mutable std::vector<const void*> batch_srcs_, batch_q_srcs_;
  mutable std::vector<std::size_t> batch_index_;
};

namespace detail {

//! Where a resolved placement lands in its parameter (resolve_placement's second result).
struct PlacedRegion {
  std::int64_t expert = -1;  //!< the expert slice, or -1
  std::int64_t rows_p = 0;   //!< rows of the parameter (of one expert slice when stacked)
  std::int64_t cols_p = 0;   //!< its row length
  std::int64_t dst_row = 0;  //!< the piece's first row in it
  std::int64_t src_rows = 0, src_cols = 0;  //!< the source seen as 2-D
};

//! Resolves one placement into a gather op (validating every bound against both shapes).
inline GatherOp resolve_placement(const TensorMeta& m, const weightsync::Placement& p,
                                  const ParamInfo& prm, PlacedRegion* where = nullptr) {
  const std::string f = "tensor '" + m.name + "' -> '" + prm.name + "'";
  const std::int64_t R = m.shape.empty() ? 1 : m.shape[0];
  const auto C = static_cast<std::int64_t>(
      m.shape.empty() ? 1 : m.numel() / std::max<std::size_t>(1, static_cast<std::size_t>(R)));
  const bool quantize = prm.dtype == DType::float8_e4m3fn && m.dtype != prm.dtype;
  if (quantize && m.dtype != DType::bfloat16 && m.dtype != DType::float32)
    throw config_error(
        f, cat("quantize on load takes bfloat16 or float32, got ", dtype_name(m.dtype)));
  if (!quantize && m.dtype != prm.dtype && !(castable_dtype(m.dtype) && castable_dtype(prm.dtype)))
    throw config_error(f, cat("cannot cast ", dtype_name(m.dtype), " to ", dtype_name(prm.dtype)));
  GatherOp op;
  op.src_dtype = m.dtype;
  op.dst_dtype = prm.dtype;
  op.src_cols = C;
  op.src_rows = R;
  if (p.permute_heads > 0) {
    if (R % p.permute_heads != 0 || (R / p.permute_heads) % 2 != 0)
      throw config_error(f, cat("rotary permute: ", R, " rows do not split into ", p.permute_heads,
                                " heads of an even row count"));
    op.head_rows = R / p.permute_heads;
  }
  if (p.slice_dim != 0 && p.slice_dim != 1) throw config_error(f, "slice_dim must be 0 or 1");
  if (p.slice_dim == 1 && m.shape.size() != 2)
    throw config_error(f, "column slices need a 2-D tensor");
  const std::int64_t extent = p.slice_dim == 0 ? R : C;
  const std::int64_t len = p.slice_len < 0 ? extent - p.slice_begin : p.slice_len;
  if (p.slice_begin < 0 || len < 0 || p.slice_begin > extent || len > extent - p.slice_begin)
    throw config_error(f, cat("slice [", p.slice_begin, ", +", len, ") is outside dim ",
                              p.slice_dim, " of ", shape_string(m.shape)));
  op.rows = p.slice_dim == 0 ? len : R;
  op.cols = p.slice_dim == 1 ? len : C;
  op.row0 = p.slice_dim == 0 ? p.slice_begin : 0;
  op.col0 = p.slice_dim == 1 ? p.slice_begin : 0;
  // The destination: [E,] rows_p, cols_p.
  std::vector<std::int64_t> ps = prm.shape;
  std::int64_t base = 0;
  if (p.expert >= 0) {
    if (ps.empty() || p.expert >= ps[0])
      throw config_error(f, cat("expert ", p.expert, " is outside ", shape_string(prm.shape)));
    const TensorMeta slice{prm.name, prm.dtype, {ps.begin() + 1, ps.end()}};
    base = p.expert * static_cast<std::int64_t>(slice.numel());
    ps.erase(ps.begin());
  }
  const TensorMeta pm{prm.name, prm.dtype, ps};
  const std::int64_t rows_p = ps.empty() ? 1 : ps[0];
  const auto cols_p =
      static_cast<std::int64_t>(rows_p ? pm.numel() / static_cast<std::size_t>(rows_p) : 0);
  if (op.cols != cols_p && op.rows != 0)
    throw config_error(f, cat("piece rows hold ", op.cols, " elements but parameter ",
                              shape_string(prm.shape), " rows hold ", cols_p));
  if (p.dst_row < 0 || p.dst_row > rows_p || op.rows > rows_p - p.dst_row)
    throw config_error(f, cat("rows [", p.dst_row, ", ", p.dst_row + op.rows,
                              ") do not fit parameter ", shape_string(prm.shape)));
  op.dst = static_cast<std::byte*>(prm.data) +
           static_cast<std::size_t>(base + p.dst_row * cols_p) * dtype_size(prm.dtype);
  if (where) *where = PlacedRegion{p.expert, rows_p, cols_p, p.dst_row, R, C};
  return op;
}

//! The scale layout a received scale tensor `s` has for its float8 weight `w` (block: [ceil(R /
//! 128), ceil(C / 128)]; per-channel: [R, 1] or [R]; per-tensor: [] or [1]).
//! @throws config_error naming the scale tensor when it fits none of them.
inline Fp8Scaling received_scale_layout(const TensorMeta& w, const TensorMeta& s) {
  const std::string f = "tensor '" + s.name + "'";
  if (s.dtype != DType::float32)
    throw config_error(f + ".dtype", cat("the scales of FP8 tensor '", w.name,
                                         "' must be float32, got ", dtype_name(s.dtype)));
  const std::int64_t R = w.shape.empty() ? 1 : w.shape[0];
  const auto C = static_cast<std::int64_t>(
      w.shape.empty() ? 1 : w.numel() / std::max<std::size_t>(1, static_cast<std::size_t>(R)));
  constexpr std::int64_t B = kernels::kFp8Block;
  using V = std::vector<std::int64_t>;
  if (w.shape.size() == 2 && s.shape == V{(R + B - 1) / B, (C + B - 1) / B})
    return Fp8Scaling::block128;
  if (s.shape == V{R, 1} || s.shape == V{R}) return Fp8Scaling::per_channel;
  if (s.shape.empty() || s.shape == V{1}) return Fp8Scaling::per_tensor;
  throw config_error(f + ".shape",
                     cat(shape_string(s.shape), " is no scale layout of FP8 tensor '", w.name, "' ",
                         shape_string(w.shape), " (block 128x128 [", (R + B - 1) / B, ", ",
                         (C + B - 1) / B, "], per-channel [", R, ", 1], per-tensor [])"));
}

//! Block scales need whole 128x128 blocks on both sides: @throws config_error naming the tensor
//! and the parameter (`f`) when piece `op` starts or ends inside one.
inline void check_fp8_blocks(const std::string& f, const GatherOp& op, const PlacedRegion& at) {
  constexpr std::int64_t B = kernels::kFp8Block;
  const auto ends_ok = [](std::int64_t begin, std::int64_t len, std::int64_t extent) {
    return begin % B == 0 && (len % B == 0 || begin + len == extent);
  };
  if (!ends_ok(op.row0, op.rows, at.src_rows))
    throw config_error(f, cat("its rows [", op.row0, ", ", op.row0 + op.rows, ") of ", at.src_rows,
                              " (a tensor-parallel shard) cut a 128x128 FP8 block: "
                              "block scales need shards on 128-row boundaries; refused"));
  if (!ends_ok(op.col0, op.cols, at.src_cols))
    throw config_error(f,
                       cat("its columns [", op.col0, ", ", op.col0 + op.cols, ") of ", at.src_cols,
                           " (a tensor-parallel shard) cut a 128x128 FP8 block: "
                           "block scales need shards on 128-column boundaries; refused"));
  if (!ends_ok(at.dst_row, op.rows, at.rows_p))
    throw config_error(
        f, cat("it lands at rows [", at.dst_row, ", ", at.dst_row + op.rows, ") of ", at.rows_p,
               ", which cut a 128x128 FP8 block that another "
               "fused piece shares: block scales need pieces on 128-row "
               "boundaries; refused"));
}

//! The scale parameter of FP8 parameter `prm` for layout `s` (named fp8_scale_name(prm.name, s)),
//! checked: it exists, is float32 (`float32_only`) or castable, and holds one layout of scales per
//! expert slice. Returns its index; `per_expert` gets the scales of one slice, `stride` the scales
//! between block rows.
inline std::size_t fp8_scale_param(const std::string& f, const ParamInfo& prm,
                                   const PlacedRegion& at, Fp8Scaling s,
                                   std::span<const ParamInfo> params,
                                   const std::unordered_map<std::string, std::size_t>& by_name,
                                   bool float32_only, std::int64_t& per_expert,
                                   std::int64_t& stride) {
  const std::string name = fp8_scale_name(prm.name, s);
  auto it = by_name.find(name);
  if (it == by_name.end())
    throw config_error(f, cat("FP8 parameter '", prm.name, "' has no scale parameter '", name,
                              "' (", fp8_scaling_name(s), " scales) in the table"));
  const ParamInfo& sp = params[it->second];
  if (float32_only ? sp.dtype != DType::float32 : !castable_dtype(sp.dtype))
    throw config_error("parameter '" + name + "'.dtype",
                       cat("FP8 scales are float32, got ", dtype_name(sp.dtype)));
  constexpr std::int64_t B = kernels::kFp8Block;
  stride = (at.cols_p + B - 1) / B;
  per_expert = fp8_block_scaling(s)           ? (at.rows_p + B - 1) / B * stride
               : s == Fp8Scaling::per_channel ? at.rows_p
                                              : 1;
  const std::int64_t slices = at.expert >= 0 ? prm.shape[0] : 1;
  const auto n = static_cast<std::int64_t>(TensorMeta{sp.name, sp.dtype, sp.shape}.numel());
  if (n != slices * per_expert)
    throw config_error("parameter '" + name + "'.shape",
                       cat(shape_string(sp.shape), " holds ", n, " scales; FP8 parameter '",
                           prm.name, "' ", shape_string(prm.shape), " needs ", slices * per_expert,
                           " (", fp8_scaling_name(s), ")"));
  return it->second;
}

//! The first scale of piece `op` in its scale parameter (element index), for layout `s`.
inline std::int64_t fp8_scale_offset(const PlacedRegion& at, Fp8Scaling s, std::int64_t per_expert,
                                     std::int64_t stride) {
  const std::int64_t base = at.expert >= 0 ? at.expert * per_expert : 0;
  if (fp8_block_scaling(s)) return base + at.dst_row / kernels::kFp8Block * stride;
  return base + (s == Fp8Scaling::per_channel ? at.dst_row : 0);
}

//! The scale elements piece `op` writes, for layout `s`.
inline std::int64_t fp8_scale_count(const GatherOp& op, Fp8Scaling s, std::int64_t stride) {
  constexpr std::int64_t B = kernels::kFp8Block;
  if (fp8_block_scaling(s)) return (op.rows + B - 1) / B * stride;
  return s == Fp8Scaling::per_channel ? op.rows : 1;
}

//! Per-tensor scales: one scale for the whole parameter (slice). @throws config_error when the
//! piece does not cover it (a parameter fused from several tensors).
inline void check_fp8_whole(const std::string& f, const GatherOp& op, const PlacedRegion& at) {
  if (op.rows != at.rows_p)
    throw config_error(f, cat("a per-tensor FP8 scale needs the whole parameter from one tensor, "
                              "but this piece writes rows [",
                              at.dst_row, ", ", at.dst_row + op.rows, ") of ", at.rows_p,
                              " (a fused parameter); refused: use block or per-channel scales"));
}

//! The base name of an FP8 scale tensor (`X_scale_inv` / `X_scale` -> `X`), or "".
inline std::string fp8_scale_base(const std::string& name) {
  for (std::string_view suffix : {std::string_view("_scale_inv"), std::string_view("_scale")})
    if (name.size() > suffix.size() && std::string_view(name).ends_with(suffix))
      return name.substr(0, name.size() - suffix.size());
  return {};
}

}  // namespace detail

//! Plans how the tensors `metas` (in update order) load into `params` through `map`.
//! @throws config_error naming the tensor: unknown parameter, shapes that do not fit, a cast
//! between unsupported dtypes, two tensors writing the same elements, an unmapped tensor (unless
//! ignored; a Placement with skip set is skipped quietly), an uncovered parameter region (when
//! required); for FP8 parameters (see the file comment) a piece that cuts a 128x128 block, a
//! missing or misshapen scale parameter, a per-tensor scale of a fused parameter; a derived copy
//! with an unknown source or no hook.
inline LoadPlan plan_loading(std::span<const TensorMeta> metas, std::span<const ParamInfo> params,
                             const LoadMap& map, const PlanOptions& opt = {}) {
  std::unordered_map<std::string, std::size_t> by_name;
  for (std::size_t i = 0; i < params.size(); ++i)
    if (!by_name.emplace(params[i].name, i).second)
      throw config_error("parameter '" + params[i].name + "'", "appears twice in the table");
  LoadPlan plan;
  plan.metas_.assign(metas.begin(), metas.end());
  plan.direct_.assign(metas.size(), nullptr);
  plan.ops_.resize(metas.size());
  plan.writes_.resize(metas.size());
  // Written element ranges per parameter: (begin, end, tensor).
  std::vector<std::vector<std::tuple<std::size_t, std::size_t, std::size_t>>> written(
      params.size());
  const auto write = [&](std::size_t prm, std::size_t begin, std::size_t n, std::size_t tensor) {
    written[prm].emplace_back(begin, begin + n, tensor);
    plan.writes_[tensor].push_back(prm);
  };
  for (std::size_t i = 0; i < metas.size(); ++i)
    if (!plan.index_.emplace(metas[i].name, i).second)
      throw config_error("tensor '" + metas[i].name + "'", "appears twice in the update");
  // FP8 scale tensors next to their float8 weight are placed with it, after it.
  std::vector<std::size_t> scale_of(metas.size(), SIZE_MAX);  // weight -> its scale tensor
  std::vector<char> is_scale(metas.size(), 0);
  for (std::size_t i = 0; i < metas.size(); ++i) {
    const std::string base = detail::fp8_scale_base(metas[i].name);
    if (base.empty()) continue;
    auto w = plan.index_.find(base);
    if (w == plan.index_.end() || metas[w->second].dtype != DType::float8_e4m3fn) continue;
    if (scale_of[w->second] != SIZE_MAX)
      throw config_error("tensor '" + metas[i].name + "'",
                         "is a second scale tensor of FP8 tensor '" + base + "'");
    scale_of[w->second] = i;
    is_scale[i] = 1;
  }
  std::vector<detail::PlacedRegion> where(metas.size());
  std::vector<std::size_t> param_of(metas.size(), SIZE_MAX);
  for (std::size_t i = 0; i < metas.size(); ++i) {
    const TensorMeta& m = metas[i];
    if (is_scale[i]) continue;
    const auto p = map(m);
    if (!p || p->skip) {
      if (!p && !opt.ignore_unmapped)
        throw config_error("tensor '" + m.name + "'", "the load map does not place it");
      continue;
    }
    auto it = by_name.find(p->param);
    if (it == by_name.end())
      throw config_error("tensor '" + m.name + "'", "maps to unknown parameter '" + p->param + "'");
    const ParamInfo& prm = params[it->second];
    const std::string f = "tensor '" + m.name + "' -> '" + prm.name + "'";
    GatherOp op = detail::resolve_placement(m, *p, prm, &where[i]);
    op.tensor = i;
    param_of[i] = it->second;
    const std::size_t b = static_cast<std::size_t>(op.dst - static_cast<std::byte*>(prm.data)) /
                          dtype_size(prm.dtype);
    write(it->second, b, static_cast<std::size_t>(op.rows * op.cols), i);
    if (op.dst_dtype == DType::float8_e4m3fn && op.src_dtype != op.dst_dtype) {
      // quantize on load
      const Fp8Scaling s = opt.fp8_scaling;
      if (fp8_block_scaling(s)) {
        if (m.shape.size() != 2)
          throw config_error(f, detail::cat(fp8_scaling_name(s), " scales need a 2-D weight, got ",
                                            detail::shape_string(m.shape)));
        detail::check_fp8_blocks(f, op, where[i]);
      }
      if (s == Fp8Scaling::per_tensor) detail::check_fp8_whole(f, op, where[i]);
      std::int64_t per = 0, stride = 0;
      const std::size_t sp =
          detail::fp8_scale_param(f, prm, where[i], s, params, by_name, true, per, stride);
      const std::int64_t off = detail::fp8_scale_offset(where[i], s, per, stride);
      op.scaling = s;
      op.scale_stride = stride;
      op.scales = static_cast<float*>(params[sp].data) + off;
      write(sp, static_cast<std::size_t>(off),
            static_cast<std::size_t>(detail::fp8_scale_count(op, s, stride)), i);
    }
    if (op.in_place(m.shape.empty() ? 1 : m.shape[0])) plan.direct_[i] = op.dst;
    plan.ops_[i] = op;
  }
  // The scales of FP8 tensors, where their weights' rows and columns land.
  for (std::size_t w = 0; w < metas.size(); ++w) {
    const std::size_t si = scale_of[w];
    if (si == SIZE_MAX) continue;
    const TensorMeta& sm = metas[si];
    const Fp8Scaling s = detail::received_scale_layout(metas[w], sm);
    if (!plan.ops_[w]) continue;  // the weight is skipped: so are its scales
    const GatherOp& wop = *plan.ops_[w];
    const ParamInfo& prm = params[param_of[w]];
    const detail::PlacedRegion& at = where[w];
    const std::string f = "tensor '" + metas[w].name + "' -> '" + prm.name + "'";
    if (prm.dtype != DType::float8_e4m3fn)
      throw config_error(f, detail::cat("an FP8 tensor with scales ('", sm.name,
                                        "') needs a float8_e4m3fn parameter, got ",
                                        dtype_name(prm.dtype), " (it is never dequantized)"));
    GatherOp op;
    op.tensor = si;
    op.src_dtype = sm.dtype;
    std::int64_t per = 0, stride = 0;
    const std::size_t sp =
        detail::fp8_scale_param(f, prm, at, s, params, by_name, false, per, stride);
    op.dst_dtype = params[sp].dtype;
    constexpr std::int64_t B = kernels::kFp8Block;
    if (fp8_block_scaling(s)) {
      detail::check_fp8_blocks(f, wop, at);
      if (wop.head_rows && B % wop.head_rows != 0)
        throw config_error(
            f, detail::cat("a rotary permute of ", wop.head_rows,
                           " rows per head moves rows between 128-row blocks of an FP8 "
                           "tensor: its block scales cannot follow without dequantizing; "
                           "refused"));
      op.src_cols = sm.shape[1];
      op.rows = (wop.rows + B - 1) / B;
      op.cols = stride;
      op.row0 = wop.row0 / B;
      op.col0 = wop.col0 / B;
    } else if (s == Fp8Scaling::per_channel) {
      op.src_cols = 1;
      op.rows = wop.rows;
      op.cols = 1;
      op.row0 = wop.row0;
      op.head_rows = wop.head_rows;
    } else {
      detail::check_fp8_whole(f, wop, at);
      op.src_cols = op.rows = op.cols = 1;
    }
    const std::int64_t off = detail::fp8_scale_offset(at, s, per, stride);
    op.dst = static_cast<std::byte*>(params[sp].data) +
             static_cast<std::size_t>(off) * dtype_size(params[sp].dtype);
    op.src_rows = sm.shape.empty() ? 1 : sm.shape[0];
    write(sp, static_cast<std::size_t>(off), static_cast<std::size_t>(op.rows * op.cols), si);
    if (op.in_place(op.src_rows)) plan.direct_[si] = op.dst;
    plan.ops_[si] = op;
  }
  for (std::size_t k = 0; k < params.size(); ++k) {
    auto& w = written[k];
    std::sort(w.begin(), w.end());
    std::size_t at = 0;
    const std::size_t total = TensorMeta{params[k].name, params[k].dtype, params[k].shape}.numel();
    for (const auto& [b, e, t] : w) {
      if (b < at)
        throw config_error("tensor '" + metas[t].name + "'",
                           detail::cat("overlaps another tensor in parameter '", params[k].name,
                                       "' at element ", b));
      if (b > at) plan.uncovered_.push_back(detail::cat(params[k].name, "[", at, ", ", b, ")"));
      at = std::max(at, e);
    }
    if (at < total)
      plan.uncovered_.push_back(detail::cat(params[k].name, "[", at, ", ", total, ")"));
  }
  if (opt.require_full_coverage && !plan.uncovered_.empty())
    throw config_error("parameter " + plan.uncovered_.front(), "is not written by any tensor");
  // Derived copies: their written sources; the tensors writing those come as views.
  plan.writers_.assign(params.size(), 0);
  for (const auto& w : plan.writes_)
    for (const std::size_t prm : w) ++plan.writers_[prm];
  for (const DerivedCopy& d : opt.derived) {
    if (!d.rebuild) throw config_error("derived copy '" + d.name + "'", "has no rebuild hook");
    std::vector<std::size_t> src;
    for (const auto& n : d.sources) {
      auto it = by_name.find(n);
      if (it == by_name.end())
        throw config_error("derived copy '" + d.name + "'",
                           "is derived from unknown parameter '" + n + "'");
      if (plan.writers_[it->second]) src.push_back(it->second);
    }
    if (src.empty()) plan.idle_derived_.push_back(d.name);
    plan.derived_.push_back(d);
    plan.derived_sources_.push_back(std::move(src));
  }
  if (!plan.derived_.empty()) {
    std::vector<char> feeds(params.size(), 0);
    for (const auto& src : plan.derived_sources_)
      for (const std::size_t prm : src) feeds[prm] = 1;
    for (std::size_t i = 0; i < metas.size(); ++i)
      for (const std::size_t prm : plan.writes_[i])
        if (feeds[prm]) plan.direct_[i] = nullptr;
    plan.seen_.assign(metas.size(), 0);
    plan.done_.assign(params.size(), 0);
    plan.fired_.assign(plan.derived_.size(), 0);
  }
  return plan;
}

}  // namespace weightsync
