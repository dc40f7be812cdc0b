// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! CudaDeltaCodec: DeltaSource's codec for device memory (the CUDA backends). The reference, the
//! blobs and the diff live on the GPU; the kernels are <weightsync/cuda/delta.hpp>'s.
//! @code
//!   DeltaSource<Model, CudaDeltaCodec> d(model, {}, CudaDeltaCodec(stream, device));
//! @endcode

#include "weightsync/config.hpp"
#if !WEIGHTSYNC_HAS_CUDA
#error "<weightsync/cuda/delta_source.hpp> needs the CUDA runtime (WEIGHTSYNC_HAS_CUDA=0)"
#endif

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "weightsync/cuda/check.hpp"
#include "weightsync/cuda/delta.hpp"
#include "weightsync/cuda/device_buffer.hpp"
#include "weightsync/delta/source.hpp"
#include "weightsync/detail/format.hpp"
#include "weightsync/error.hpp"

namespace weightsync {

//! Device memory, kernels on `stream` (of `device`). prepare() returns with the blobs written
//! (the stream synchronized); commit() returns with the reference updated.
class CudaDeltaCodec {
 public:
  using Buffer = DeviceBuffer;
  //! What DeltaOptions::automatic assumes before it has measured (an H200 diffs dense8b at
  //! about 1.2-1.7e12 bytes of source per second: BENCHMARKS.md, run 40).
  static constexpr double kEncodeBytesPerS = 1e12;
  //! measure() writes each source into its reference in the same pass (CudaDeltaEncoder::measure
  //! with update_reference): DeltaSource::commit() then has nothing left to do for a delta round.
  static constexpr bool kMeasureUpdatesReference = true;
  //! Measures DeltaJob::low_byte jobs (updating their references in the same pass, as the host
  //! codec does), with buckets a multiple of delta::kLowByteBlock.
  static constexpr bool kLowByteReference = true;
  CudaDeltaCodec(cudaStream_t stream, int device,
                 std::uint32_t bucket_elems = delta::kDefaultBucketElems)
      : s_(stream), device_(device) {
    detail::check(cudaSetDevice(device), "cudaSetDevice");
    enc_ = std::make_unique<delta::CudaDeltaEncoder>(bucket_elems);
    app_ = std::make_unique<delta::CudaDeltaApplier>(bucket_elems);
  }
  Buffer alloc(std::size_t bytes) const { return DeviceBuffer(bytes, device_); }
  //! A low-byte reference made the source's (a whole round).
  void seed_low_byte(void* ref, const void* src, std::uint64_t numel) const {
    delta::low_byte_seed(ref, src, numel, s_);
  }
  static std::byte* data(Buffer& b) { return b.data(); }
  void copy(void* dst, const void* src, std::size_t bytes) const {
    if (bytes > 0)
      detail::check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s_),
                    "cudaMemcpyAsync (delta reference)");
  }
  std::vector<std::uint64_t> measure(std::span<const delta::DeltaJob> jobs,
                                     std::uint32_t bucket_elems) {
    if (bucket_elems != enc_->bucket_elems())
      throw config_error("bucket_elems",
                         detail::cat("the codec was made for ", enc_->bucket_elems(),
                                     ", the options say ", bucket_elems));
    return enc_->measure(jobs, s_, kMeasureUpdatesReference);
  }
  std::uint64_t changed_elements() const { return enc_->changed_elements(); }
  //! Low-byte blocks of the last measure whose check failed.
  std::uint64_t failed_blocks() const { return enc_->failed_blocks(); }
  void encode(std::span<void* const> outs) {
    enc_->encode(outs, s_);
    detail::check(cudaStreamSynchronize(s_), "cudaStreamSynchronize (delta encode)");
  }
  void apply(const void* blob, std::uint64_t bytes, void* dst, std::uint64_t numel,
             unsigned elem_bytes, const std::string& name) {
    app_->apply(blob, bytes, dst, numel, elem_bytes, name, s_);
  }
  void finish() {
    app_->finish(s_);
    detail::check(cudaStreamSynchronize(s_), "cudaStreamSynchronize (delta reference)");
  }

 private:
  cudaStream_t s_;
  int device_;
  std::unique_ptr<delta::CudaDeltaEncoder> enc_;
  std::unique_ptr<delta::CudaDeltaApplier> app_;
};

}  // namespace weightsync
