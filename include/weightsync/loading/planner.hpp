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

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "weightsync/detail/format.hpp"
#include "weightsync/error.hpp"
#include "weightsync/host/device_policy.hpp"
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
  //! True when the bytes can be received straight into dst.
  bool in_place(std::int64_t src_rows) const noexcept {
    return dst_dtype == src_dtype && head_rows == 0 && row0 == 0 && col0 == 0 && cols == src_cols &&
           rows == src_rows;
  }
};

//! What plan_loading() may tolerate.
struct PlanOptions {
  //! Tensors the map does not place are skipped (true) or an error (false).
  bool ignore_unmapped = false;
  //! Every parameter element must be written by some tensor (padding rows of a vocab-parallel
  //! embedding are not, so this is off by default; uncovered() lists what is not).
  bool require_full_coverage = false;
};

//! Runs a batch of gathers on a device stream: `static void run(std::span<const GatherOp> ops,
//! std::span<const void* const> srcs, Stream)` with `available = true`. Specialized for
//! cudaStream_t by <weightsync/cuda/gather.hpp>.
template <class Stream>
struct GatherExecutor {
  static constexpr bool available = false;
};

namespace detail {

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
  //! GatherExecutor (CUDA): one batched launch for the whole call. Otherwise state_error if a view
  //! needs a gather.
  //! Every view is checked against the plan before any byte is written, so a bad batch leaves
  //! the parameters untouched.
  template <class Stream>
  void load(std::span<const TensorView> views, Stream stream) const {
    batch_ops_.clear();
    batch_srcs_.clear();
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
        batch_ops_.push_back(op);
        batch_srcs_.push_back(v.data);
      } else {
        throw state_error("tensor '" + v.name() +
                          "' needs a copy, slice, permute or cast into its "
                          "parameter, and this stream type has no GatherExecutor (include "
                          "<weightsync/cuda/gather.hpp> for CUDA)");
      }
    }
    if constexpr (!std::is_same_v<Stream, HostStream> && GatherExecutor<Stream>::available)
      if (!batch_ops_.empty())
        GatherExecutor<Stream>::run(std::span<const GatherOp>(batch_ops_),
                                    std::span<const void* const>(batch_srcs_), stream);
  }
  //! A LoadWeightsFn over `Stream` (the plan must outlive it).
  template <class Stream = HostStream>
  auto loader() const {
    return [this](std::span<const TensorView> views, Stream s) { load(views, s); };
  }

  //! The gather of tensor `name`, or nullptr (lands in place, or unmapped).
  const GatherOp* gather(const std::string& name) const {
    auto it = index_.find(name);
    return it == index_.end() || !ops_[it->second] || direct_[it->second] ? nullptr
                                                                          : &*ops_[it->second];
  }
  //! Counts: tensors landing in place, tensors gathered, tensors skipped.
  std::size_t in_place_count() const noexcept { return count(0); }
  std::size_t gather_count() const noexcept { return count(1); }
  std::size_t skipped_count() const noexcept { return count(2); }
  //! Parameter regions no tensor writes, as "name[begin, end)" in elements.
  const std::vector<std::string>& uncovered() const noexcept { return uncovered_; }

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
  std::vector<TensorMeta> metas_;
  std::unordered_map<std::string, std::size_t> index_;
  std::vector<void*> direct_;
  std::vector<std::optional<GatherOp>> ops_;
  std::vector<std::string> uncovered_;
  // Scratch for one load() call (reused, so a round allocates nothing once warm).
  mutable std::vector<GatherOp> batch_ops_;
  mutable std::vector<const void*> batch_srcs_;
  mutable std::vector<std::size_t> batch_index_;
};

namespace detail {

//! Resolves one placement into a gather op (validating every bound against both shapes).
inline GatherOp resolve_placement(const TensorMeta& m, const weightsync::Placement& p,
                                  const ParamInfo& prm) {
  const std::string f = "tensor '" + m.name + "' -> '" + prm.name + "'";
  const std::int64_t R = m.shape.empty() ? 1 : m.shape[0];
  const auto C = static_cast<std::int64_t>(
      m.shape.empty() ? 1 : m.numel() / std::max<std::size_t>(1, static_cast<std::size_t>(R)));
  if (m.dtype != prm.dtype && !(castable_dtype(m.dtype) && castable_dtype(prm.dtype)))
    throw config_error(f, cat("cannot cast ", dtype_name(m.dtype), " to ", dtype_name(prm.dtype)));
  GatherOp op;
  op.src_dtype = m.dtype;
  op.dst_dtype = prm.dtype;
  op.src_cols = C;
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
  return op;
}

}  // namespace detail

//! Plans how the tensors `metas` (in update order) load into `params` through `map`.
//! @throws config_error naming the tensor: unknown parameter, shapes that do not fit, a cast
//! between unsupported dtypes, two tensors writing the same elements, an unmapped tensor (unless
//! ignored; a Placement with skip set is skipped quietly), an uncovered parameter region (when
//! required).
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
  // Written element ranges per parameter: (begin, end, tensor).
  std::vector<std::vector<std::tuple<std::size_t, std::size_t, std::size_t>>> written(
      params.size());
  for (std::size_t i = 0; i < metas.size(); ++i) {
    const TensorMeta& m = metas[i];
    if (!plan.index_.emplace(m.name, i).second)
      throw config_error("tensor '" + m.name + "'", "appears twice in the update");
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
    GatherOp op = detail::resolve_placement(m, *p, prm);
    op.tensor = i;
    const std::size_t b = static_cast<std::size_t>(op.dst - static_cast<std::byte*>(prm.data)) /
                          dtype_size(prm.dtype);
    written[it->second].emplace_back(b, b + static_cast<std::size_t>(op.rows * op.cols), i);
    if (op.in_place(m.shape.empty() ? 1 : m.shape[0])) plan.direct_[i] = op.dst;
    plan.ops_[i] = op;
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
  return plan;
}

}  // namespace weightsync
