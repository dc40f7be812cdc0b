// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! A delta applied through a load plan: a tensor that does not land in place (a TP shard of it, a
//! rotary-permuted q / k, a cast) has a GatherOp in its LoadPlan (<weightsync/loading/planner.hpp>)
//! that says where each of its elements goes in the engine's parameter. A blob of that tensor is
//! applied by sending each changed element there, cast as the gather would: no dense copy of the
//! tensor is made, and elements outside the op's slice (another rank's shard) are skipped. A
//! tensor that lands in place (renamed, or its rows of an unsharded fused qkv / gate_up) needs no
//! op: its blob applies at its destination. The CUDA applier does the same on the GPU
//! (DeltaApplyBlob::gather).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "weightsync/delta/codec.hpp"
#include "weightsync/loading/cast.hpp"
#include "weightsync/loading/planner.hpp"
#include "weightsync/tensor_meta.hpp"

namespace weightsync {

//! A tensor's gather when its delta does not apply at a destination of its own (nullptr: none).
//! From a LoadPlan: [&plan](const TensorMeta& m) { return plan.gather(m.name); }.
using AnyDeltaGather = std::function<const GatherOp*(const TensorMeta&)>;

namespace delta {

//! Where element e of the gathered tensor lands, or nullptr when the op does not take it.
inline std::byte* gather_target(const GatherOp& op, std::uint64_t e) {
  const auto cols = static_cast<std::uint64_t>(op.src_cols);
  if (cols == 0) return nullptr;
  const auto r = static_cast<std::int64_t>(e / cols), c = static_cast<std::int64_t>(e % cols);
  if (c < op.col0 || c >= op.col0 + op.cols) return nullptr;
  const std::int64_t s = op.head_rows ? weightsync::detail::unpermuted_row(r, op.head_rows) : r;
  const std::int64_t d = s - op.row0;
  if (d < 0 || d >= op.rows) return nullptr;
  return op.dst + static_cast<std::size_t>(d * op.cols + c - op.col0) * dtype_size(op.dst_dtype);
}

//! Checks `blob` (of tensor `t`) as apply_delta_host does, then writes each element it carries
//! where `op` puts it (cast to the parameter's dtype).
//! @throws protocol_error naming the tensor (nothing written).
inline void apply_delta_gather_host(const std::byte* blob, std::uint64_t blob_bytes,
                                    const GatherOp& op, const TensorMeta& t) {
  const auto eb = static_cast<unsigned>(dtype_size(t.dtype));
  check_delta_blob(blob, blob_bytes, t.numel(), eb, t.name);
  for_each_delta_element(blob, t.numel(), eb, [&](std::uint64_t e, const std::byte* v) {
    if (std::byte* d = gather_target(op, e))
      weightsync::detail::convert_row(d, op.dst_dtype, v, op.src_dtype, 1);
  });
}

}  // namespace delta
}  // namespace weightsync
