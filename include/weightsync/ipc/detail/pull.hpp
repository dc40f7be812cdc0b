// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! How the IPC consumer moves bytes: copies merged where both ends continue each other, large ones
//! cut into pieces spread over several copy-engine streams (no SM used), small ones fused into one
//! launch of the batched copy kernel, all ordered after and joined back into one main stream.

#include "weightsync/config.hpp"
#if !WEIGHTSYNC_HAS_CUDA
#error "<weightsync/ipc/detail/pull.hpp> needs the CUDA runtime (WEIGHTSYNC_HAS_CUDA=0)"
#endif

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "weightsync/cuda/check.hpp"
#include "weightsync/detail/batch_memo.hpp"
#include "weightsync/cuda/device_policy.hpp"
#include "weightsync/cuda/event.hpp"
#include "weightsync/cuda/stream.hpp"
#include "weightsync/detail/batch_memo.hpp"
#include "weightsync/ipc/options.hpp"

namespace weightsync::detail {

//! One copy of a pull or a staging.
struct CopyPiece {
  std::byte* dst;
  const std::byte* src;
  std::size_t bytes;
  friend bool operator==(const CopyPiece&, const CopyPiece&) = default;
};

//! Appends a copy, merging it into the previous one when both ends continue it.
inline void add_piece(std::vector<CopyPiece>& v, std::byte* dst, const std::byte* src,
                      std::size_t n) {
  if (n == 0) return;
  if (!v.empty() && continues(v.back().dst, v.back().src, v.back().bytes, dst, src)) {
    v.back().bytes += n;
    return;
  }
  v.push_back({dst, src, n});
}

//! A strided copy: `blocks` blocks of `width` bytes, one every `dst_pitch` / `src_pitch` bytes (a
//! shard split along an inner dim, landing at its columns of the full tensor).
struct CopyPiece2D {
  std::byte* dst;
  std::size_t dst_pitch;
  const std::byte* src;
  std::size_t src_pitch;
  std::size_t width;
  std::size_t blocks;
};

//! Copy-engine streams and the batched-copy kernel of one consumer.
class Puller {
 public:
  Puller(int device, const IpcOptions& opt) : start_(device), policy_(device) {
    CurrentDeviceGuard g(device);
    for (int i = 0; i < opt.copy_streams; ++i) {
      streams_.emplace_back(device);
      done_.emplace_back(device);
    }
  }

  //! Enqueues `pieces` after the work already on `main`; `main` continues once they are done.
  //! A single copy-engine operation runs on `main` itself: forking it to a copy stream and
  //! joining back would cost four more API calls and buy nothing. A batch that went whole
  //! through one launch of the batched copy kernel from a descriptor table is remembered
  //! (same_as_last(), enqueue_again()).
  void enqueue(const std::vector<CopyPiece>& pieces, cudaStream_t main, const IpcOptions& opt,
               std::span<const CopyPiece2D> strided = {}) {
    forget();  // (a throw below leaves nothing remembered)
    kd_.clear();
    ks_.clear();
    kn_.clear();
    const std::size_t piece = opt.piece();
    std::size_t ops = strided.size();
    for (const auto& p : pieces)
      if (p.bytes >= opt.kernel_below_bytes) ops += p.bytes / piece + (p.bytes % piece != 0);
    const bool fork = ops > 1;
    if (fork) check(cudaEventRecord(start_.get(), main), "cudaEventRecord");
    std::size_t next = 0;
    used_.assign(streams_.size(), 0);
    auto stream = [&]() -> cudaStream_t {  // the next copy stream, ordered after `main`'s work
      if (!fork) return main;
      auto& s = streams_[next];
      if (!used_[next]) check(cudaStreamWaitEvent(s.get(), start_.get(), 0), "cudaStreamWaitEvent");
      used_[next] = 1;
      next = (next + 1) % streams_.size();
      return s.get();
    };
    for (const auto& p : pieces) {
      if (p.bytes < opt.kernel_below_bytes) {
        kd_.push_back(p.dst);
        ks_.push_back(p.src);
        kn_.push_back(p.bytes);
        continue;
      }
      for (std::size_t off = 0; off < p.bytes;) {
        const std::size_t n = std::min(piece, p.bytes - off);
        check(cudaMemcpyAsync(p.dst + off, p.src + off, n, cudaMemcpyDeviceToDevice, stream()),
              "cudaMemcpyAsync(pull)");
        off += n;
      }
    }
    for (const auto& p : strided)  // one copy-engine operation each, spread over the streams
      check(cudaMemcpy2DAsync(p.dst, p.dst_pitch, p.src, p.src_pitch, p.width, p.blocks,
                              cudaMemcpyDeviceToDevice, stream()),
            "cudaMemcpy2DAsync(pull)");
    if (kd_.size() == 1)
      check(cudaMemcpyAsync(kd_[0], ks_[0], kn_[0], cudaMemcpyDeviceToDevice, main),
            "cudaMemcpyAsync(pull)");
    else if (!kd_.empty()) {
      policy_.reserve_copy_batches(kd_.size());  // (no collective here: allocating is safe)
      CopyBatchMemo memo;
      policy_.copy_batch(kd_.data(), ks_.data(), kn_.data(), kd_.size(), main, &memo);
      // Every piece went through that launch: the whole batch can run again from its entry.
      if (memo && ops == 0) {
        last_ = pieces;
        last_below_ = opt.kernel_below_bytes;
        memo_ = memo;
        ++generation_;
      }
    }
    for (std::size_t k = 0; k < streams_.size(); ++k) {
      if (!used_[k]) continue;
      done_[k].record(streams_[k].get());
      check(cudaStreamWaitEvent(main, done_[k].get(), 0), "cudaStreamWaitEvent");
    }
  }

  //! Whether enqueue(pieces, .., opt) would make the batch the last enqueue() made and
  //! remembered: then enqueue_again(its answer) may run it instead. Its answer names that batch
  //! (0: none), so that a batch remembered in between is not taken for it. Costs one compare of
  //! the lists: a consumer asks while it waits for the plan, off the sync's critical path.
  std::uint64_t same_as_last(const std::vector<CopyPiece>& pieces,
                             const IpcOptions& opt) const noexcept {
    return memo_ && last_below_ == opt.kernel_below_bytes && pieces == last_ ? generation_ : 0;
  }
  //! Enqueues on `main` the batch that same_as_last() named `batch`, without its list: one launch
  //! from the descriptor table entry that holds its pieces. @returns false, having enqueued
  //! nothing, when `batch` is 0 or no longer the one remembered, or its entry took other pieces
  //! since; the caller then enqueue()s.
  bool enqueue_again(std::uint64_t batch, cudaStream_t main) {
    if (batch == 0 || !memo_ || batch != generation_) return false;
    bool ran = false;
    try {
      ran = policy_.copy_batch_again(memo_, main);
    } catch (...) {
      forget();
      throw;
    }
    if (!ran) forget();
    return ran;
  }

  //! The copy streams (to drain them after a failure).
  std::vector<CudaStream>& streams() noexcept { return streams_; }

 private:
  std::vector<CudaStream> streams_;
  std::vector<CudaEvent> done_;
  CudaEvent start_;
  CudaPolicy policy_;
  std::vector<void*> kd_;
  std::vector<const void*> ks_;
  std::vector<std::size_t> kn_;
  std::vector<char> used_;
  // The last batch that went whole through a descriptor table entry, to run again from it.
  void forget() noexcept {
    memo_ = {};
    last_.clear();
  }
  std::vector<CopyPiece> last_;
  std::size_t last_below_ = 0;
  CopyBatchMemo memo_;
  std::uint64_t generation_ = 0;  // numbers the remembered batches (same_as_last)
};

}  // namespace weightsync::detail
