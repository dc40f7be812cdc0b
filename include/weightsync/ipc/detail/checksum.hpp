// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Checksums of the IPC transports (TransferOptions::checksum, whole-tensor syncs): one chunk
//! digest (detail/digest.hpp) per tensor, the tensor being a chunk of one piece. The producer
//! digests its sources on a stream of its own while the consumers pull (they read the same
//! memory), and sends the digests after the pulls; each consumer digests every tensor where it
//! ended up (its destination, or the view it handed to load_weights: the producer's memory or a
//! staging slot, digested before the slot is handed back) on its stream behind the pulls, and
//! compares before it reports its outcome. One launch per pull batch, one digest per tensor, so a
//! mismatch names the tensor. On one GPU (IpcOptions::checksum_copy) a tensor with a destination
//! is copied by the digest kernel itself, which digests the bytes it reads from the producer's
//! memory: the consumer's digest then costs no pass over the weights of its own.

#include "weightsync/config.hpp"
#if !WEIGHTSYNC_HAS_CUDA
#error "<weightsync/ipc/detail/checksum.hpp> needs the CUDA runtime (WEIGHTSYNC_HAS_CUDA=0)"
#endif

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "weightsync/cuda/check.hpp"
#include "weightsync/cuda/device_buffer.hpp"
#include "weightsync/cuda/digest.hpp"
#include "weightsync/cuda/event.hpp"
#include "weightsync/cuda/stream.hpp"
#include "weightsync/detail/digest.hpp"
#include "weightsync/detail/format.hpp"
#include "weightsync/error.hpp"
#include "weightsync/tensor_meta.hpp"

namespace weightsync::detail {

//! One side's per-tensor digests of a sync: on the device, and mirrored to the host.
class IpcDigests {
 public:
  explicit IpcDigests(int device) : device_(device), stream_(device), done_(device) {}

  //! Producer: enqueues the digests of `src` (tensor i: metas[i].nbytes() bytes at src[i]) on a
  //! stream of its own, and their copy to the host.
  //! `checked`: the sources were found readable in an earlier round (the caller knows them to be
  //! the same allocations); not asked of the driver again.
  //! @throws config_error("checksum") for a source the kernel cannot read (host memory that is not
  //!   mapped for the device: the staging path moves such sources, the digest kernel cannot).
  void start_sources(std::span<const TensorMeta> metas, std::span<const std::byte* const> src,
                     bool checked = false) {
    spans_.clear();
    for (std::size_t i = 0; i < metas.size(); ++i)
      if (const std::size_t nb = metas[i].nbytes()) {
        if (!checked && !device_readable(src[i]))
          throw config_error("checksum",
                             cat("tensor ", i, " ('", metas[i].name,
                                 "') lies in host memory the GPU cannot read; ipc checksums "
                                 "digest the sources on the GPU"));
        spans_.push_back(DigestSpan{src[i], nb, 0, static_cast<std::uint32_t>(i)});
      }
    begin(metas.size(), stream_.get());
    add(spans_, stream_.get());
    end(stream_.get());
  }
  //! Waits for what start_sources enqueued (on a failure path: nothing of ours may still read the
  //! caller's weights when it gets the error). Never throws.
  void quiesce() noexcept {
    if (stream_.get()) (void)cudaStreamSynchronize(stream_.get());
  }
  //! The event after the producer's digests (start_sources).
  const CudaEvent& done() const noexcept { return done_; }

  //! Consumer: zeroes the `n` digests on `s` (before any add).
  void begin(std::size_t n, cudaStream_t s) {
    if (n > capacity_) {
      dev_ = DeviceBuffer(n * sizeof(std::uint64_t), device_);
      host_ = PinnedBuffer(n * sizeof(std::uint64_t));
      capacity_ = n;
    }
    n_ = n;
    if (n > 0) DigestKernel::instance().launch(nullptr, 0, sums(), n, s);
  }
  //! Enqueues on `s` the digests of the tensors `spans` name (sum = tensor index, ordinal 0).
  void add(std::span<const DigestSpan> spans, cudaStream_t s) {
    if (!spans.empty()) DigestKernel::instance().launch(spans.data(), spans.size(), sums(), 0, s);
  }
  //! Enqueues on `s` the copy of the digests to the host (read them once `s` got there).
  void end(cudaStream_t s) {
    if (n_ > 0)
      check(cudaMemcpyAsync(host_.data(), dev_.data(), n_ * sizeof(std::uint64_t),
                            cudaMemcpyDeviceToHost, s),
            "cudaMemcpyAsync(digests)");
    done_.record(s);
  }

  //! The digests on the host (after end() completed), as the producer's message.
  std::string blob() const {
    return std::string(reinterpret_cast<const char*>(host_.data()), n_ * sizeof(std::uint64_t));
  }
  //! Compares this side's digests (after end() completed) with the producer's message.
  //! @throws protocol_error naming rank 0 and the first tensor that differs.
  void compare(const std::string& theirs, std::span<const TensorMeta> metas) const {
    if (theirs.size() != n_ * sizeof(std::uint64_t) || metas.size() != n_)
      throw protocol_error(0, cat("ipc checksums: ", theirs.size(), " bytes of digests for ",
                                  metas.size(), " tensors"));
    for (std::size_t i = 0; i < n_; ++i) {
      std::uint64_t want = 0, got = 0;
      std::memcpy(&want, theirs.data() + i * 8, 8);
      std::memcpy(&got, host_.data() + i * 8, 8);
      if (want != got)
        throw protocol_error(0, cat("tensor ", i, " ('", metas[i].name,
                                    "'): checksum mismatch: rank 0 sent digest 0x", hex(want),
                                    ", received bytes hash to 0x", hex(got)));
    }
  }

 private:
  std::uint64_t* sums() { return reinterpret_cast<std::uint64_t*>(dev_.data()); }
  //! Device, managed, or host memory mapped for the device (cudaHostAlloc / cudaHostRegister).
  static bool device_readable(const void* p) {
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
      (void)cudaGetLastError();  // (not sticky; clear it)
      return false;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged ||
           (a.type == cudaMemoryTypeHost && a.devicePointer != nullptr);
  }

  int device_;
  CudaStream stream_;  // producer: the digests run here, beside the consumers' pulls
  CudaEvent done_;
  DeviceBuffer dev_;
  PinnedBuffer host_;
  std::size_t capacity_ = 0, n_ = 0;
  std::vector<DigestSpan> spans_;
};

}  // namespace weightsync::detail
