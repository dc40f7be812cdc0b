// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The IPC staging ring, for memory that cannot be exported (cudaMallocAsync pools, host memory):
//! the producer copies the staged tensors, in the chunks of chunk_plan over B (vLLM's rule, as the
//! collective pipeline), into K slots of one exported allocation and announces each chunk; each
//! consumer pulls the chunk from the slot and hands the slot back; a slot is reused only once every
//! consumer handed it back.

#include "weightsync/config.hpp"
#if !WEIGHTSYNC_HAS_CUDA
#error "<weightsync/ipc/detail/staging.hpp> needs the CUDA runtime (WEIGHTSYNC_HAS_CUDA=0)"
#endif

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "weightsync/chunk_plan.hpp"
#include "weightsync/cuda/check.hpp"
#include "weightsync/cuda/device_buffer.hpp"
#include "weightsync/cuda/event.hpp"
#include "weightsync/detail/format.hpp"
#include "weightsync/error.hpp"
#include "weightsync/ipc/detail/endpoint.hpp"
#include "weightsync/ipc/detail/plan.hpp"
#include "weightsync/ipc/detail/pull.hpp"
#include "weightsync/tensor_meta.hpp"
#include "weightsync/transfer_options.hpp"
#include "weightsync/tuning.hpp"

namespace weightsync::detail {

//! The producer's side of the ring.
class StagingRing {
 public:
  //! The staged tensors (`metas[index[j]]`, j in order) in chunks over B and K slots of the
  //! largest chunk, in one exported allocation (grown when needed, in whole 2 MiB pages: copy
  //! engines pull a mapping of another size about a quarter slower); records in `plan` where each
  //! staged tensor lies.
  void layout(IpcEndpoint& ep, IpcPlan& plan, std::span<const TensorMeta> metas,
              std::span<const std::size_t> index, const TransferOptions& opt) {
    index_.assign(index.begin(), index.end());
    std::vector<TensorMeta> staged;
    staged.reserve(index.size());
    for (const auto i : index) staged.push_back(metas[i]);
    chunks_ = chunk_plan(staged, opt.buffer_size_bytes);
    stride_ = 0;
    if (chunks_.empty()) return;
    k_ = static_cast<std::size_t>(opt.num_buffers);
    for (const auto& c : chunks_) stride_ = std::max(stride_, (c.bytes + 255) / 256 * 256);
    if (slots_.size() < stride_ * k_) {
      const std::size_t page = std::size_t{2} << 20;
      slots_ = DeviceBuffer();
      slots_ = DeviceBuffer((stride_ * k_ + page - 1) / page * page, ep.device);
    }
    const auto r = ep.exports.region(slots_.data(), slots_.size(), plan, ep.stats);
    if (!r) throw error("[weightsync.ipc] the slot ring cannot be exported (cudaIpcGetMemHandle)");
    plan.slot_region = *r;
    plan.slot_stride = stride_;
    plan.num_slots = static_cast<std::uint32_t>(k_);
    plan.num_chunks = chunks_.size();
    for (std::size_t c = 0; c < chunks_.size(); ++c) {
      std::size_t off = 0;
      for (std::size_t j = chunks_[c].begin; j < chunks_[c].end; ++j) {
        auto& pl = plan.places[index_[j]];
        pl.index = c;
        pl.offset = off;
        off += staged[j].nbytes();
      }
    }
    sizes_.resize(staged.size());
    for (std::size_t j = 0; j < staged.size(); ++j) sizes_[j] = staged[j].nbytes();
  }

  //! Copies each chunk of `src` (indexed like the metas) into its slot, announces it, and reuses a
  //! slot only once every consumer handed it back. Every wait is bounded by opt.timeout.
  void run(IpcEndpoint& ep, std::span<const std::byte* const> src, const TransferOptions& opt) {
    auto ch = ep.channel();
    for (std::size_t c = 0; c < chunks_.size(); ++c) {
      if (c >= k_) ch.gather_acks();  // slot c % K is free again
      std::vector<CopyPiece> pieces;
      std::byte* slot = slots_.data() + (c % k_) * stride_;
      std::size_t off = 0;
      for (std::size_t j = chunks_[c].begin; j < chunks_[c].end; ++j) {
        add_piece(pieces, slot + off, src[index_[j]], sizes_[j]);
        off += sizes_[j];
      }
      for (const auto& piece : pieces)
        check(
            cudaMemcpyAsync(piece.dst, piece.src, piece.bytes, cudaMemcpyDefault, ep.stream.get()),
            "cudaMemcpyAsync(stage)");
      ep.await_stream(ep.stream.get(), opt, "ipc staging");
      std::uint64_t notice = c;
      ep.ctrl.broadcast(&notice, sizeof notice, 0);
    }
    for (std::size_t c = chunks_.size() >= k_ ? chunks_.size() - k_ : 0; c < chunks_.size(); ++c)
      ch.gather_acks();
  }

  std::size_t chunks() const noexcept { return chunks_.size(); }
  std::size_t stride() const noexcept { return chunks_.empty() ? 0 : stride_; }
  std::size_t bytes_held() const noexcept { return slots_.size(); }

 private:
  DeviceBuffer slots_;
  std::vector<Chunk> chunks_;
  std::vector<std::size_t> index_;  // staged tensor j -> tensor
  std::vector<std::size_t> sizes_;  // staged tensor j -> bytes
  std::size_t stride_ = 0;
  std::size_t k_ = 1;
};

//! The consumer's side of the ring: follows the producer's announcements chunk by chunk.
class StagingFollower {
 public:
  explicit StagingFollower(int device) {
    for (int k = 0; k < kMaxPackedNumBuffers; ++k) slot_done_.emplace_back(device);
  }

  //! For every staged chunk of `plan`: waits for its announcement, then (while `ok()`) runs
  //! `pull(chunk)`, which enqueues the chunk's copies on the endpoint's stream. A slot is handed
  //! back only once nothing reads it any more: its pulls done, or (once !ok()) everything this side
  //! enqueued drained.
  template <class Ok, class Pull>
  void run(IpcEndpoint& ep, const IpcPlan& plan, const TransferOptions& opt, Ok&& ok, Pull&& pull) {
    if (!plan.error.empty() || plan.num_chunks == 0) return;
    const auto K = static_cast<std::size_t>(std::max<std::uint32_t>(plan.num_slots, 1));
    auto hand_back = [&](std::size_t chunk) {
      if (ok())
        ep.await_event(slot_done_[chunk % K], opt, "ipc slot pull");
      else
        ep.drain(opt);
      ep.channel().gather_acks();
    };
    for (std::size_t chunk = 0; chunk < plan.num_chunks; ++chunk) {
      if (chunk >= K) hand_back(chunk - K);
      std::uint64_t notice = 0;
      ep.ctrl.broadcast(&notice, sizeof notice, 0);
      if (notice != chunk)
        throw protocol_error(
            0, cat("ipc hand-off: chunk ", notice, " announced where ", chunk, " was due"));
      if (!ok()) continue;
      pull(chunk);
      if (ok()) slot_done_[chunk % K].record(ep.stream.get());
    }
    for (std::size_t chunk = plan.num_chunks >= K ? plan.num_chunks - K : 0;
         chunk < plan.num_chunks; ++chunk)
      hand_back(chunk);
  }

 private:
  std::vector<CudaEvent> slot_done_;
};

}  // namespace weightsync::detail
