// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The vLLM-compatible chunking rule. Both sides compute the same boundaries from metadata alone.

#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

#include "weightsync/error.hpp"
#include "weightsync/tensor_meta.hpp"

namespace weightsync {

//! A half-open range [begin, end) of tensor indices and its byte count.
struct Chunk {
  std::size_t begin = 0;
  std::size_t end = 0;
  std::size_t bytes = 0;

  std::size_t size() const { return end - begin; }
  friend bool operator==(const Chunk&, const Chunk&) = default;
};

//! Chunk boundaries for tensors of `sizes` bytes: append a tensor, then close the chunk when the
//! running total is strictly greater than `buffer_size_bytes`. A chunk therefore holds at least
//! one tensor and may exceed the buffer size by less than its last tensor; a chunk of exactly the
//! buffer size stays open. Zero-size tensors ride along with their neighbours.
//! @throws config_error when buffer_size_bytes is 0.
inline std::vector<Chunk> chunk_plan_sizes(std::span<const std::size_t> sizes,
                                           std::size_t buffer_size_bytes) {
  if (buffer_size_bytes == 0) throw config_error("buffer_size_bytes", "must be >= 1, got 0");
  std::vector<Chunk> plan;
  Chunk open{};
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    open.end = i + 1;
    open.bytes += sizes[i];
    if (open.bytes > buffer_size_bytes) {
      plan.push_back(open);
      open = Chunk{i + 1, i + 1, 0};
    }
  }
  if (open.end > open.begin) plan.push_back(open);
  return plan;
}

//! chunk_plan_sizes over `metas[i].nbytes()`.
inline std::vector<Chunk> chunk_plan(std::span<const TensorMeta> metas,
                                     std::size_t buffer_size_bytes) {
  std::vector<std::size_t> sizes;
  sizes.reserve(metas.size());
  for (const auto& m : metas) sizes.push_back(m.nbytes());
  return chunk_plan_sizes(sizes, buffer_size_bytes);
}

//! One chunk per tensor: vLLM's unpacked path (one broadcast per tensor).
inline std::vector<Chunk> unpacked_plan(std::span<const TensorMeta> metas) {
  std::vector<Chunk> plan;
  plan.reserve(metas.size());
  for (std::size_t i = 0; i < metas.size(); ++i) plan.push_back({i, i + 1, metas[i].nbytes()});
  return plan;
}

//! The largest chunk of `plan` (0 for an empty plan).
inline std::size_t max_chunk_bytes(std::span<const Chunk> plan) {
  std::size_t m = 0;
  for (const auto& c : plan) m = std::max(m, c.bytes);
  return m;
}

}  // namespace weightsync
