// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The plan of one collective transfer, computed from metadata and options alone so that the
//! producer and every consumer derive the same one: the chunks (vLLM's rule over B, or one per
//! tensor), which tensors travel as operations of their own (direct), each chunk's packed region
//! and whether it is a single tensor (sent from and received into its own memory), and how each
//! chunk is launched (one launch, or two so that a large region's copy overlaps the direct
//! tensors).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "weightsync/chunk_plan.hpp"
#include "weightsync/detail/format.hpp"
#include "weightsync/error.hpp"
#include "weightsync/tensor_meta.hpp"
#include "weightsync/transfer_options.hpp"

namespace weightsync::detail {

//! How a chunk goes out. The status frame is always in the first launch.
enum class Split : std::uint8_t {
  none,           //!< one launch: status, region, direct tensors
  directs_first,  //!< the first chunk: the region's packing overlaps the direct tensors
  region_first,   //!< the last chunk: the region's unpacking overlaps the direct tensors
};

struct TransferPlan {
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);
  //! A chunk's packed region: the tensors that are not direct.
  struct Region {
    std::size_t bytes = 0;
    std::size_t solo = npos;  //!< its only non-empty tensor, when it has exactly one
  };

  std::vector<Chunk> chunks;
  std::vector<char> direct;     //!< per tensor
  std::vector<Region> regions;  //!< per chunk
  std::vector<Split> splits;    //!< per chunk
  std::size_t total_bytes = 0;
  bool framed = true;  //!< Protocol::weightsync: frames around the data

  TransferPlan(std::span<const TensorMeta> metas, const TransferOptions& opt) {
    for (const auto& meta : metas) total_bytes += meta.nbytes();  // validates every shape
    chunks = opt.packed ? chunk_plan(metas, opt.buffer_size_bytes) : unpacked_plan(metas);
    framed = opt.protocol == Protocol::weightsync;
    if (!framed && opt.direct_threshold_bytes > 0)
      throw config_error("direct_threshold_bytes", "is not part of vLLM's wire (Protocol::vllm)");
    direct.assign(metas.size(), 0);
    regions.resize(chunks.size());
    splits.assign(chunks.size(), Split::none);
    for (std::size_t c = 0; c < chunks.size(); ++c) {
      std::size_t nonzero = 0;
      bool has_direct = false;
      for (std::size_t i = chunks[c].begin; i < chunks[c].end; ++i) {
        const std::size_t nb = metas[i].nbytes();
        direct[i] = framed && opt.direct_threshold_bytes > 0 && nb >= opt.direct_threshold_bytes;
        has_direct = has_direct || direct[i];
        if (direct[i] || nb == 0) continue;
        regions[c].bytes += nb;
        regions[c].solo = i;
        ++nonzero;
      }
      if (nonzero != 1) regions[c].solo = npos;
      if (has_direct && regions[c].bytes >= opt.split_min_region_bytes && regions[c].solo == npos) {
        if (c == 0)
          splits[c] = Split::directs_first;
        else if (c + 1 == chunks.size())
          splits[c] = Split::region_first;
      }
    }
  }

  std::size_t size() const { return chunks.size(); }
  //! The most tensors one chunk holds (to size per-chunk lists once).
  std::size_t max_chunk_tensors() const {
    std::size_t m = 0;
    for (const auto& c : chunks) m = std::max(m, c.size());
    return m;
  }
  //! The producer's slot: the largest region that has to be packed (more than one tensor).
  std::size_t packing_slot_bytes() const {
    std::size_t s = 0;
    for (const auto& r : regions)
      if (r.solo == npos) s = std::max(s, r.bytes);
    return s;
  }
};

//! Checks that `root` is in the group and that this rank's role fits it.
inline void check_root(int root, int rank, int size, bool producer) {
  if (root < 0 || root >= size)
    throw config_error("root", cat("must be in 0..", size - 1, ", got ", root));
  if (producer && rank != root)
    throw config_error(
        "root", cat("the producer must run on the root rank ", root, ", this is rank ", rank));
  if (!producer && rank == root)
    throw config_error("root", cat("the consumer must not run on the root rank ", root));
}

}  // namespace weightsync::detail
