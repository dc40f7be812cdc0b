// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The CUDA device policy of the pipeline: device buffers, non-blocking streams, events and
//! batched asynchronous copies (cudaMemcpyBatchAsync where the runtime has it).

#include "weightsync/config.hpp"
#if !WEIGHTSYNC_HAS_CUDA
#error "<weightsync/cuda/device_policy.hpp> needs the CUDA runtime (WEIGHTSYNC_HAS_CUDA=0)"
#endif

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "weightsync/concepts.hpp"
#include "weightsync/cuda/batched_copy.hpp"
#include "weightsync/cuda/check.hpp"
#include "weightsync/cuda/device_buffer.hpp"
#include "weightsync/cuda/digest.hpp"
#include "weightsync/cuda/event.hpp"
#include "weightsync/cuda/stream.hpp"

namespace weightsync {

class CudaPolicy {
 public:
  using stream_type = cudaStream_t;
  //! Work is enqueued on streams: a result is there once an event after it is ready.
  static constexpr bool synchronous = false;
  using Stream = CudaStream;
  using Event = CudaEvent;
  using Buffer = DeviceBuffer;
  using HostBuffer = PinnedBuffer;

  //! Works on `device` (-1: the device current at construction).
  explicit CudaPolicy(int device = -1) : device_(device >= 0 ? device : detail::current_device()) {
    detail::check(cudaDeviceGetAttribute(&sms_, cudaDevAttrMultiProcessorCount, device_),
                  "cudaDeviceGetAttribute");
  }
  int device() const noexcept { return device_; }

  Buffer alloc(std::size_t n) const { return Buffer(n, device_); }
  HostBuffer alloc_host(std::size_t n) const {
    detail::CurrentDeviceGuard g(device_);
    return HostBuffer(n);
  }
  Stream make_stream() const { return Stream(device_); }
  //! The communication stream runs at the highest priority, so that NCCL's blocks are scheduled
  //! ahead of packing and unpacking work.
  Stream make_comm_stream() const {
    detail::CurrentDeviceGuard g(device_);
    return Stream(device_, Stream::greatest_priority());
  }
  Event make_event() const { return Event(device_); }
  static cudaStream_t external_stream(void* s) noexcept { return static_cast<cudaStream_t>(s); }

  void record(Event& e, cudaStream_t s) const { e.record(s); }
  void wait(cudaStream_t s, const Event& e) const {
    detail::check(cudaStreamWaitEvent(s, e.get(), 0), "cudaStreamWaitEvent");
  }
  bool ready(const Event& e) const { return e.ready(); }

  void copy_to_host(void* dst, const void* src, std::size_t n, cudaStream_t s) const {
    detail::check(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync(D2H)");
  }
  void copy_from_host(void* dst, const void* src, std::size_t n, cudaStream_t s) const {
    detail::check(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync(H2D)");
  }
  //! Device-to-device copies, in stream order as a whole (copies within may run in any order).
  //! Several pieces go through one launch of the batched copy kernel; a single piece, or any
  //! piece when the kernel is unavailable (or WEIGHTSYNC_COPY=ce), through copy engines. Either
  //! side may also be pinned host memory (the handshake's eager bytes: see
  //! PinnedHostCommunicator), which both reach through unified addressing.
  //! With `memo`, it is set to what copy_batch_again() needs to repeat this batch (empty when
  //! it cannot: a batch that did not go through a descriptor table).
  void copy_batch(void* const* dst, const void* const* src, const std::size_t* n, std::size_t count,
                  cudaStream_t s, detail::CopyBatchMemo* memo = nullptr) const {
    if (memo != nullptr) *memo = {};
    if (count == 0) return;
    if (count > 1) {
      if (const auto* k = detail::BatchedCopyKernel::instance()) {
        k->launch(dst, src, n, count, s, sms_, &tables_, memo);
        return;
      }
    }
    if (count == 1) {
      detail::check(cudaMemcpyAsync(dst[0], src[0], n[0], cudaMemcpyDefault, s),
                    "cudaMemcpyAsync");
      return;
    }
#if CUDART_VERSION >= 12080
    cudaMemcpyAttributes attr{};
    attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    std::size_t attr_index = 0;
#if CUDART_VERSION >= 13000
    const auto st = cudaMemcpyBatchAsync(dst, src, n, count, &attr, &attr_index, 1, s);
#else
    std::size_t fail = 0;
    const auto st = cudaMemcpyBatchAsync(const_cast<void**>(dst), const_cast<void**>(src),
                                         const_cast<std::size_t*>(n), count, &attr, &attr_index, 1,
                                         &fail, s);
#endif
    if (st == cudaSuccess) return;
    if (st != cudaErrorNotSupported && st != cudaErrorInvalidValue)
      detail::check(st, "cudaMemcpyBatchAsync");
    (void)cudaGetLastError();  // fall back to one copy at a time
#endif
    for (std::size_t i = 0; i < count; ++i)
      detail::check(cudaMemcpyAsync(dst[i], src[i], n[i], cudaMemcpyDefault, s),
                    "cudaMemcpyAsync");
  }

  //! Makes room in the batched copy kernel's descriptor tables (detail::CopyTable) for batches of
  //! `pieces` pieces; without it a batch of more than 16 goes by value. Allocates (the first time,
  //! and when `pieces` grows): call it where no collective is in flight. The pipeline does, when a
  //! transfer begins (WorkspaceState::reserve_lists).
  void reserve_copy_batches(std::size_t pieces) const {
    if (pieces <= kernels::kSmallCopyDescs || detail::BatchedCopyKernel::instance() == nullptr) return;
    detail::CopyTable& t = tables_.get(device_);
    std::lock_guard lock(t.mutex());
    t.reserve(pieces);
  }
  //! Enqueues on `s` the batch that `memo` remembers (copy_batch), the same copies, with no list:
  //! one launch from the descriptor table entry that holds its pieces. The caller vouches that
  //! the copies are the ones it would list. @returns false, having enqueued nothing, when the
  //! memo is empty or stale (the entry took other pieces since).
  bool copy_batch_again(const detail::CopyBatchMemo& memo, cudaStream_t s) const {
    const auto* k = detail::BatchedCopyKernel::instance();
    return k != nullptr && k->again(memo, s, tables_);
  }
  //! What the batched copy kernel's descriptor tables did for this policy (see
  //! detail::CopyTable): null before the first reserve_copy_batches() of more than 16 pieces.
  const detail::CopyTable* copy_table() const noexcept { return tables_.existing(); }

  //! Enqueues on `s`: sums[0..nsums) (device memory) <- the chunk digests (detail/digest.hpp)
  //! of the `count` pieces (device memory), each into sums[piece.sum], by the digest kernel
  //! (cuda/digest.hpp).
  void digest(const detail::DigestSpan* spans, std::size_t count, std::uint64_t* sums,
              std::size_t nsums, cudaStream_t s) const {
    detail::DigestKernel::instance().launch(spans, count, sums, nsums, s);
  }

 private:
  int device_;
  int sms_ = 1;
  detail::CopyTableSlot tables_;  // the batched copy kernel's descriptor tables (see reserve_copy_batches)
};

template <>
struct device_policy_for<cudaStream_t> {
  using type = CudaPolicy;
};

}  // namespace weightsync
