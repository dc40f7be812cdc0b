// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The delta codec on a CUDA stream: CudaDeltaEncoder writes the blobs encode_delta_host
//! (<weightsync/delta/codec.hpp>) writes, byte for byte, and CudaDeltaApplier checks and applies
//! blobs as apply_delta_host does (a blob that fails a check writes nothing). The kernels ship as
//! PTX text (detail/delta_ptx.hpp, from kernels/delta.cu, built for compute_75) and are
//! loaded on first use with cudaLibraryLoadData, so including this header needs no nvcc.
//!
//! Encoding is two-phase, because a blob's size must be known (to allocate and announce it)
//! before it is written:
//! @code
//!   CudaDeltaEncoder enc;                              // owns its scratch, reusable
//!   auto sizes = enc.measure(jobs, stream);            // one host synchronization per batch
//!   ... allocate / announce sizes[i] bytes for each blob ...
//!   enc.encode(outs, stream);                          // stream-ordered, no synchronization
//! @endcode
//! measure() keeps, per bucket, either the bucket's sparse payload (a sparse bucket whose list
//! fits: encode() then copies it) or a bit per element, in device scratch of 1/8 byte per element
//! (1/16 of a bf16 tensor's size), so encode() reads the source only where it changed and the
//! reference never. measure(jobs, s, true) also updates the references (see measure()).

#include "weightsync/config.hpp"
#if !WEIGHTSYNC_HAS_CUDA
#error "<weightsync/cuda/delta.hpp> needs the CUDA runtime (WEIGHTSYNC_HAS_CUDA=0)"
#endif

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "weightsync/cuda/check.hpp"
#include "weightsync/cuda/detail/delta_ptx.hpp"
#include "weightsync/cuda/device_buffer.hpp"
#include "weightsync/delta/codec.hpp"
#include "weightsync/delta/format.hpp"
#include "weightsync/delta/gather.hpp"
#include "weightsync/delta/low_byte.hpp"
#include "weightsync/detail/format.hpp"
#include "weightsync/error.hpp"
#include "weightsync/kernels/delta_abi.hpp"

namespace weightsync::delta {

//! One blob to apply: `blob` (device memory, 8-byte aligned, blob_bytes bytes) onto `dst`
//! (device memory, numel elements of elem_bytes bytes). `name` names the tensor in errors.
struct DeltaApplyBlob {
  const void* blob = nullptr;
  std::uint64_t blob_bytes = 0;
  void* dst = nullptr;
  std::uint64_t numel = 0;
  unsigned elem_bytes = 0;
  std::string name;
  //! Instead of `dst`: the load plan's gather the blob is applied through (its dst in device
  //! memory; see <weightsync/delta/gather.hpp>). Must stay valid during the apply() call.
  const GatherOp* gather = nullptr;
};

//! How CudaDeltaApplier writes a sparse bucket's values into the destination.
enum class SparseWrites {
  //! each value where it goes, 2 bytes for bf16 (the memory system merges partial sectors)
  scattered,
  //! each touched 32-byte sector read, merged and written whole (no partial-sector writes; the
  //! destination 32-byte aligned, else element by element)
  sectors,
};

namespace detail {

//! The loaded delta kernels (a context-independent library, loaded on first use, for the life of
//! the process).
class DeltaKernels {
 public:
  static const DeltaKernels& instance() {
    static DeltaKernels k;
    return k;
  }
  cudaKernel_t index = nullptr, count = nullptr, chunks = nullptr, top = nullptr, encode = nullptr,
               vhead = nullptr, vbase = nullptr, vchunks = nullptr, vtop = nullptr,
               vcheck = nullptr, vdescribe = nullptr, apply = nullptr, sparse_check = nullptr,
               sparse_scatter = nullptr, lowbyte_seed = nullptr, count_lowbyte = nullptr;

 private:
  DeltaKernels() {
    using weightsync::detail::check;
    cudaLibrary_t lib = nullptr;
    check(cudaLibraryLoadData(&lib, weightsync::detail::kDeltaPtx, nullptr, nullptr, 0, nullptr,
                              nullptr, 0),
          "cudaLibraryLoadData(ws_delta)");
    const auto get = [&](cudaKernel_t& k, const char* name) {
      check(cudaLibraryGetKernel(&k, lib, name), "cudaLibraryGetKernel(ws_delta)");
    };
    get(index, "ws_delta_index");
    get(count, "ws_delta_count");
    get(chunks, "ws_delta_chunks");
    get(top, "ws_delta_top");
    get(encode, "ws_delta_encode");
    get(vhead, "ws_delta_vhead");
    get(vbase, "ws_delta_vbase");
    get(vchunks, "ws_delta_vchunks");
    get(vtop, "ws_delta_vtop");
    get(vcheck, "ws_delta_vcheck");
    get(vdescribe, "ws_delta_vdescribe");
    get(apply, "ws_delta_apply");
    get(sparse_check, "ws_sparse_check");
    get(sparse_scatter, "ws_sparse_scatter");
    get(lowbyte_seed, "ws_delta_lowbyte_seed");
    get(count_lowbyte, "ws_delta_count_lowbyte");
  }
};

template <class Params>
void delta_launch(cudaKernel_t k, std::uint64_t grid, int threads, Params& p, cudaStream_t s,
                  const char* what) {
  void* args[] = {&p};
  const auto g = static_cast<unsigned>(std::clamp<std::uint64_t>(grid, 1, 0x7fffffffu));
  weightsync::detail::check(cudaLaunchKernel(reinterpret_cast<const void*>(k), dim3(g),
                                             dim3(static_cast<unsigned>(threads)), args, 0, s),
                            what);
}

//! Grows `b` to at least `bytes` on `device` (the old contents are dropped).
inline void delta_reserve(DeviceBuffer& b, std::size_t bytes, int device) {
  if (b.size() >= bytes && (b.size() == 0 || b.device() == device)) return;
  b = DeviceBuffer();  // free first: the peak stays at the new size
  b = DeviceBuffer(bytes, device);
}

inline std::size_t delta_align256(std::size_t n) {
  return (n + 255) / 256 * 256;
}

inline void check_elem_bytes(unsigned eb, const std::string& field) {
  if (eb != 1 && eb != 2 && eb != 4 && eb != 8)
    throw config_error(field, weightsync::detail::cat("must be 1, 2, 4 or 8, got ", eb));
}

}  // namespace detail

//! Encodes batches of tensors into delta blobs on the GPU. Owns its device scratch (per bucket: a
//! job index, a count, a payload offset and bucket_elems / 8 bytes of changed bits) and reuses
//! it across batches; it grows to the largest batch measured. Not thread-safe. A measure() and
//! the encode() after it run on the same stream (or the caller orders them).
class CudaDeltaEncoder {
 public:
  //! @throws config_error("bucket_elems") unless a multiple of 32 in [32, kMaxBucketElems].
  explicit CudaDeltaEncoder(std::uint32_t bucket_elems = kDefaultBucketElems)
      : bucket_elems_(bucket_elems), device_(weightsync::detail::current_device()) {
    if (bucket_elems == 0 || bucket_elems > kMaxBucketElems || bucket_elems % 32 != 0)
      throw config_error("bucket_elems",
                         weightsync::detail::cat("must be a multiple of 32 in [32, ",
                                                 kMaxBucketElems, "], got ", bucket_elems));
  }
  CudaDeltaEncoder(const CudaDeltaEncoder&) = delete;
  CudaDeltaEncoder& operator=(const CudaDeltaEncoder&) = delete;
  CudaDeltaEncoder(CudaDeltaEncoder&&) noexcept = default;
  CudaDeltaEncoder& operator=(CudaDeltaEncoder&&) noexcept = default;

  //! Compares every job's src with its ref (stream order on `s`) and returns each job's blob
  //! size in bytes; synchronizes `s` once for the whole batch. The sources must stay unchanged
  //! until the encode() that follows has run (encode() reads the sources, never the references).
  //!
  //! With `update_reference`, the same pass also writes each source into its reference (the
  //! 16-byte vectors whose 32-byte sector changed: whole-sector writes), so that afterwards every
  //! ref equals its src: the trainer's reference update costs about the changed sectors' bytes
  //! of writes inside a pass that reads everything anyway, instead of a separate apply of the
  //! blobs (scattered partial-sector writes, about 3.4 ms for dense8b at 1 % on an H200, run 40).
  //! The references must then be writable device memory, and the caller must treat them as the
  //! new version from here on (DeltaSource does: a round that is not committed is followed by a
  //! whole one).
  //! @throws config_error naming the job's field (elem_bytes, a null pointer, too many buckets);
  //! cuda_error.
  std::vector<std::uint64_t> measure(std::span<const DeltaJob> jobs, cudaStream_t s,
                                     bool update_reference = false) {
    using weightsync::detail::cat;
    using weightsync::detail::check;
    namespace wk = weightsync::kernels;
    jobs_.clear();
    jobs_.reserve(jobs.size());
    std::uint64_t n = 0;
    bool low_byte = false;
    for (std::size_t i = 0; i < jobs.size(); ++i) {
      const DeltaJob& j = jobs[i];
      low_byte = low_byte || j.low_byte;
      const std::string f = cat("jobs[", i, "]");
      detail::check_elem_bytes(j.elem_bytes, f + ".elem_bytes");
      if (j.low_byte && j.elem_bytes != 2)
        throw config_error(f + ".low_byte", cat("needs 2-byte elements, got ", j.elem_bytes));
      if (j.low_byte && bucket_elems_ % kLowByteBlock != 0)
        throw config_error("bucket_elems", cat("a low-byte reference needs a multiple of ",
                                               kLowByteBlock, ", got ", bucket_elems_));
      if (j.numel > 0 && (j.src == nullptr || j.ref == nullptr))
        throw config_error(f + (j.src == nullptr ? ".src" : ".ref"),
                           cat("null for ", j.numel, " elements"));
      const std::uint64_t nb = bucket_count(j.numel, bucket_elems_);
      if (nb > 0xffffffffull)
        throw config_error(f + ".numel", cat(j.numel, " elements make more than 2^32 buckets"));
      jobs_.push_back(wk::DeltaEncodeJob{j.src, j.ref, j.numel, n, static_cast<std::uint32_t>(nb),
                                         j.elem_bytes, j.low_byte ? 1u : 0u, 0u});
      n += nb;
    }
    if (jobs.size() > 0xffffffffull)
      throw config_error("jobs", cat(jobs.size(), " jobs, more than 2^32 - 1"));
    measured_ = false;
    n_buckets_ = n;
    changed_ = 0;
    payload_ = 0;
    failed_ = 0;
    const std::size_t m = jobs.size();
    if (m == 0) {
      measured_ = true;
      return {};
    }
    // scratch: one arena for the small arrays, one for the changed bits
    const std::uint64_t nc = (n + wk::kDeltaEncodeChunk - 1) / wk::kDeltaEncodeChunk;
    std::size_t at = 0;
    const auto take = [&](std::size_t bytes) {
      const std::size_t r = at;
      at += detail::delta_align256(bytes);
      return r;
    };
    const std::size_t o_jobs = take(m * sizeof(wk::DeltaEncodeJob));
    const std::size_t o_results = take(m * sizeof(wk::DeltaEncodeResult));
    const std::size_t o_outs = take(m * sizeof(void*));
    const std::size_t o_bucket_job = take(n * 4);
    const std::size_t o_counts = take(n * 4);
    const std::size_t o_local = take(n * 4);
    const std::size_t o_chunk_base = take((nc + 1) * 8);
    const std::size_t o_chunk_changed = take(nc * 8);
    const std::size_t o_totals = take(3 * 8);
    detail::delta_reserve(arena_, at, device_);
    detail::delta_reserve(mask_, std::max<std::size_t>(n * (bucket_elems_ / 8), 1), device_);
    const std::size_t readback = m * sizeof(wk::DeltaEncodeResult) + 3 * 8;
    if (readback_.size() < readback) {
      readback_ = PinnedBuffer();
      readback_ = PinnedBuffer(readback);
    }
    std::byte* a = arena_.data();
    p_ = wk::DeltaEncodeParams{};
    p_.jobs = reinterpret_cast<const wk::DeltaEncodeJob*>(a + o_jobs);
    p_.results = reinterpret_cast<wk::DeltaEncodeResult*>(a + o_results);
    p_.outs = reinterpret_cast<void* const*>(a + o_outs);
    p_.bucket_job = reinterpret_cast<std::uint32_t*>(a + o_bucket_job);
    p_.counts = reinterpret_cast<std::uint32_t*>(a + o_counts);
    p_.mask = reinterpret_cast<std::uint32_t*>(mask_.data());
    p_.local = reinterpret_cast<std::uint32_t*>(a + o_local);
    p_.chunk_base = reinterpret_cast<std::uint64_t*>(a + o_chunk_base);
    p_.chunk_changed = reinterpret_cast<std::uint64_t*>(a + o_chunk_changed);
    p_.totals = reinterpret_cast<std::uint64_t*>(a + o_totals);
    p_.n_buckets = n;
    p_.n_jobs = static_cast<std::uint32_t>(m);
    p_.bucket_elems = bucket_elems_;
    p_.flags = update_reference ? wk::kDeltaUpdateRef : 0u;
    // (pageable source: staged before cudaMemcpyAsync returns, so jobs_ may change after)
    check(cudaMemcpyAsync(a + o_jobs, jobs_.data(), m * sizeof(wk::DeltaEncodeJob),
                          cudaMemcpyHostToDevice, s),
          "cudaMemcpyAsync(delta jobs)");
    const auto& k = detail::DeltaKernels::instance();
    detail::delta_launch(k.index, std::min<std::uint64_t>(m, 65535), wk::kDeltaThreads, p_, s,
                         "cudaLaunchKernel(ws_delta_index)");
    if (n > 0) {
      detail::delta_launch(k.count, n, wk::kDeltaThreads, p_, s,
                           "cudaLaunchKernel(ws_delta_count)");
      if (low_byte)
        detail::delta_launch(k.count_lowbyte, n, wk::kDeltaThreads, p_, s,
                             "cudaLaunchKernel(ws_delta_count_lowbyte)");
      detail::delta_launch(k.chunks, nc, wk::kDeltaThreads, p_, s,
                           "cudaLaunchKernel(ws_delta_chunks)");
    }
    detail::delta_launch(k.top, 1, wk::kDeltaScanThreads, p_, s, "cudaLaunchKernel(ws_delta_top)");
    check(cudaMemcpyAsync(readback_.data(), p_.results, m * sizeof(wk::DeltaEncodeResult),
                          cudaMemcpyDeviceToHost, s),
          "cudaMemcpyAsync(delta sizes)");
    check(cudaMemcpyAsync(readback_.data() + m * sizeof(wk::DeltaEncodeResult), p_.totals, 24,
                          cudaMemcpyDeviceToHost, s),
          "cudaMemcpyAsync(delta totals)");
    check(cudaStreamSynchronize(s), "cudaStreamSynchronize(delta measure)");
    std::vector<std::uint64_t> sizes(m);
    for (std::size_t i = 0; i < m; ++i) {
      wk::DeltaEncodeResult r;
      std::memcpy(&r, readback_.data() + i * sizeof r, sizeof r);
      sizes[i] = r.blob_bytes;
    }
    std::uint64_t totals[3];
    std::memcpy(totals, readback_.data() + m * sizeof(wk::DeltaEncodeResult), sizeof totals);
    changed_ = totals[0];
    payload_ = totals[1];
    failed_ = totals[2];
    measured_ = true;
    return sizes;
  }

  //! Writes each job of the last measure() into outs[i] (device memory, 8-byte aligned, at least
  //! the measured size; nullptr: that job is not encoded), in stream order on `s`; nothing is
  //! synchronized. May be called again
  //! (the same blobs) until the next measure().
  //! @throws config_error("outs") without a measure() or for a count that differs from its jobs,
  //! config_error("outs[i]") for a misaligned blob; cuda_error.
  void encode(std::span<void* const> outs, cudaStream_t s) {
    using weightsync::detail::cat;
    namespace wk = weightsync::kernels;
    if (!measured_) throw config_error("outs", "encode() needs a measure() first");
    if (outs.size() != jobs_.size())
      throw config_error(
          "outs", cat(outs.size(), " blobs where the last measure() had ", jobs_.size(), " jobs"));
    for (std::size_t i = 0; i < outs.size(); ++i)
      if (reinterpret_cast<std::uintptr_t>(outs[i]) % 8 != 0)
        throw config_error(cat("outs[", i, "]"), "a blob must be 8-byte aligned");
    if (outs.empty()) return;
    outs_.assign(outs.begin(), outs.end());
    weightsync::detail::check(
        cudaMemcpyAsync(const_cast<void**>(p_.outs), outs_.data(), outs_.size() * sizeof(void*),
                        cudaMemcpyHostToDevice, s),
        "cudaMemcpyAsync(delta outs)");
    // a CTA per kDeltaThreads buckets, then a thread per job's header
    const std::uint64_t items = (n_buckets_ + wk::kDeltaThreads - 1) / wk::kDeltaThreads +
                                (jobs_.size() + wk::kDeltaThreads - 1) / wk::kDeltaThreads;
    detail::delta_launch(detail::DeltaKernels::instance().encode, items, wk::kDeltaThreads, p_, s,
                         "cudaLaunchKernel(ws_delta_encode)");
  }

  //! Changed elements of the last measure()'s batch.
  std::uint64_t changed_elements() const noexcept { return changed_; }
  //! Payload bytes (blobs less their headers and directories) of the last measure()'s batch.
  std::uint64_t payload_bytes() const noexcept { return payload_; }
  //! Low-byte blocks of the last measure()'s batch whose hash check failed (sent whole).
  std::uint64_t failed_blocks() const noexcept { return failed_; }
  std::uint32_t bucket_elems() const noexcept { return bucket_elems_; }

 private:
  std::uint32_t bucket_elems_;
  int device_;
  DeviceBuffer arena_, mask_;
  PinnedBuffer readback_;
  std::vector<kernels::DeltaEncodeJob> jobs_;
  std::vector<void*> outs_;
  kernels::DeltaEncodeParams p_{};
  std::uint64_t n_buckets_ = 0, changed_ = 0, payload_ = 0, failed_ = 0;
  bool measured_ = false;
};

//! The low bytes and block hashes of `src` (numel 2-byte elements, device memory) into the
//! low-byte reference `ref` (device memory, low_byte_ref_bytes(numel)), in stream order on `s`:
//! the GPU's low_byte_seed_host.
//! @throws config_error for a null pointer; cuda_error.
inline void low_byte_seed(void* ref, const void* src, std::uint64_t numel, cudaStream_t s) {
  namespace wk = weightsync::kernels;
  if (numel == 0) return;
  if (ref == nullptr || src == nullptr)
    throw config_error(ref == nullptr ? "ref" : "src",
                       weightsync::detail::cat("null for ", numel, " elements"));
  wk::DeltaLowByteSeedParams p{src, ref, numel};
  const std::uint64_t warps = (numel + kLowByteBlock - 1) / kLowByteBlock;
  const std::uint64_t grid = std::min<std::uint64_t>(
      (warps + wk::kDeltaThreads / 32 - 1) / (wk::kDeltaThreads / 32), 65535);
  detail::delta_launch(detail::DeltaKernels::instance().lowbyte_seed, grid, wk::kDeltaThreads, p,
                       s, "cudaLaunchKernel(ws_delta_lowbyte_seed)");
}

//! Checks and applies delta blobs in device memory onto device tensors, in stream order. Every
//! apply() enqueues its checks and writes at once (a blob of any bucket size; 7 launches per
//! call, so batch many blobs into one call); a blob that fails any check of check_delta_blob
//! writes nothing. finish() synchronizes and reports the first bad blob. Between two finish()
//! calls every apply() uses the same stream. Not thread-safe.
class CudaDeltaApplier {
 public:
  //! `bucket_elems_hint`: the bucket size blobs are expected to have (it sizes the grids; any
  //! valid bucket size is applied correctly). `writes`: how sparse buckets are written (the
  //! result is the same bytes either way).
  explicit CudaDeltaApplier(std::uint32_t bucket_elems_hint = kDefaultBucketElems,
                            SparseWrites writes = SparseWrites::scattered)
      : hint_(std::clamp<std::uint32_t>(bucket_elems_hint, 32, kMaxBucketElems)),
        device_(weightsync::detail::current_device()),
        writes_(writes) {}
  CudaDeltaApplier(const CudaDeltaApplier&) = delete;
  CudaDeltaApplier& operator=(const CudaDeltaApplier&) = delete;
  CudaDeltaApplier(CudaDeltaApplier&&) noexcept = default;
  CudaDeltaApplier& operator=(CudaDeltaApplier&&) noexcept = default;

  //! Enqueues one blob: `blob` (blob_bytes bytes) onto `dst` (numel elements of elem_bytes).
  //! The blob must stay in place until the stream has run the call's kernels.
  //! @throws config_error naming the argument; cuda_error.
  void apply(const void* blob, std::uint64_t blob_bytes, void* dst, std::uint64_t numel,
             unsigned elem_bytes, std::string name, cudaStream_t s) {
    DeltaApplyBlob b{blob, blob_bytes, dst, numel, elem_bytes, std::move(name)};
    apply(std::span<const DeltaApplyBlob>(&b, 1), s);
  }

  //! Enqueues a batch of blobs (7 launches for the whole batch).
  //! @throws config_error naming the blob's field, or "stream" for a stream other than the one of
  //! the apply() calls since the last finish(); cuda_error.
  void apply(std::span<const DeltaApplyBlob> blobs, cudaStream_t s) {
    using weightsync::detail::cat;
    using weightsync::detail::check;
    namespace wk = weightsync::kernels;
    if (!calls_.empty() && s != stream_)
      throw config_error("stream", "every apply() before a finish() must use the same stream");
    std::uint64_t est_slots = 0, max_chunks = 0;
    for (std::size_t i = 0; i < blobs.size(); ++i) {
      const DeltaApplyBlob& b = blobs[i];
      const std::string f = cat("blobs[", i, "] (", b.name, ")");
      detail::check_elem_bytes(b.elem_bytes, f + ".elem_bytes");
      if (b.blob_bytes > 0 && b.blob == nullptr) throw config_error(f + ".blob", "null");
      if (reinterpret_cast<std::uintptr_t>(b.blob) % 8 != 0)
        throw config_error(f + ".blob", "a blob must be 8-byte aligned");
      if (b.numel > 0 && b.dst == nullptr && b.gather == nullptr)
        throw config_error(f + ".dst", "null");
      if (b.gather != nullptr && b.gather->src_cols <= 0 && b.numel > 0)
        throw config_error(f + ".gather", "src_cols must be > 0");
      constexpr std::uint64_t cc = kernels::kDeltaCheckChunk;
      est_slots += (bucket_count(b.numel, hint_) + cc - 1) / cc * cc;
      // a good header has n_buckets = ceil(numel / bucket_elems), bucket_elems >= 32
      max_chunks +=
          (bucket_count(b.numel, 32) + kernels::kDeltaCheckChunk - 1) / kernels::kDeltaCheckChunk;
    }
    const std::size_t m = blobs.size();
    if (m == 0) return;
    if (m > 0xffffffffull) throw config_error("blobs", "more than 2^32 - 1 blobs in one call");
    // the states live until finish(): a block of the pool per call, never reallocated meanwhile
    if (block_ < state_blocks_.size() && used_ + m > state_blocks_[block_].size() / kStateBytes) {
      ++block_;
      used_ = 0;
    }
    if (block_ >= state_blocks_.size())
      state_blocks_.emplace_back(std::max<std::size_t>(m, 4096) * kStateBytes, device_);
    else if (used_ == 0 && state_blocks_[block_].size() / kStateBytes < m)
      state_blocks_[block_] = DeviceBuffer(m * kStateBytes, device_);
    auto* state = reinterpret_cast<wk::DeltaApplyState*>(state_blocks_[block_].data()) + used_;
    // the per-call scratch is reused in stream order; growing it must not free memory that
    // enqueued calls still use
    std::size_t at = 0;
    const auto take = [&](std::size_t bytes) {
      const std::size_t r = at;
      at += detail::delta_align256(bytes);
      return r;
    };
    const std::size_t o_jobs = take(m * sizeof(wk::DeltaApplyJob));
    const std::size_t o_chunks = take(std::max<std::uint64_t>(max_chunks, 1) * 8);
    const std::size_t o_chunk_blob = take(std::max<std::uint64_t>(max_chunks, 1) * 4);
    const std::size_t o_totals = take(16);
    gathers_.clear();
    for (const DeltaApplyBlob& b : blobs)
      if (b.gather != nullptr) gathers_.push_back(to_kernel(*b.gather));
    const std::size_t o_gathers = take(std::max<std::size_t>(gathers_.size(), 1) *
                                       sizeof(wk::DeltaGather));
    if (scratch_.size() < at) {
      if (!calls_.empty()) check(cudaStreamSynchronize(s), "cudaStreamSynchronize(delta apply)");
      detail::delta_reserve(scratch_, at, device_);
    }
    jobs_.clear();
    std::uint32_t g = 0;
    for (const DeltaApplyBlob& b : blobs)
      jobs_.push_back(wk::DeltaApplyJob{b.blob, b.dst, b.blob_bytes, b.numel, b.elem_bytes,
                                        b.gather != nullptr ? ++g : 0u});
    std::byte* a = scratch_.data();
    wk::DeltaApplyParams p{};
    p.jobs = reinterpret_cast<const wk::DeltaApplyJob*>(a + o_jobs);
    p.state = state;
    p.chunk_sums = reinterpret_cast<std::uint64_t*>(a + o_chunks);
    p.chunk_blob = reinterpret_cast<std::uint32_t*>(a + o_chunk_blob);
    p.totals = reinterpret_cast<std::uint64_t*>(a + o_totals);
    p.gathers = reinterpret_cast<const wk::DeltaGather*>(a + o_gathers);
    p.n_jobs = static_cast<std::uint32_t>(m);
    p.flags = writes_ == SparseWrites::sectors ? wk::kDeltaApplySectors : 0u;
    check(cudaMemcpyAsync(a + o_jobs, jobs_.data(), m * sizeof(wk::DeltaApplyJob),
                          cudaMemcpyHostToDevice, s),
          "cudaMemcpyAsync(delta apply jobs)");
    if (!gathers_.empty())
      check(cudaMemcpyAsync(a + o_gathers, gathers_.data(), gathers_.size() * sizeof(wk::DeltaGather),
                            cudaMemcpyHostToDevice, s),
            "cudaMemcpyAsync(delta apply gathers)");
    const auto& k = detail::DeltaKernels::instance();
    const std::uint64_t per_blob = (m + wk::kDeltaThreads - 1) / wk::kDeltaThreads;
    const int t = wk::kDeltaThreads;
    detail::delta_launch(k.vhead, per_blob, t, p, s, "cudaLaunchKernel(ws_delta_vhead)");
    detail::delta_launch(k.vbase, 1, wk::kDeltaScanThreads, p, s,
                         "cudaLaunchKernel(ws_delta_vbase)");
    detail::delta_launch(k.vchunks, est_slots / kernels::kDeltaCheckChunk, t, p, s,
                         "cudaLaunchKernel(ws_delta_vchunks)");
    detail::delta_launch(k.vtop, 1, wk::kDeltaScanThreads, p, s, "cudaLaunchKernel(ws_delta_vtop)");
    // vcheck: a CTA per check chunk; apply: a warp per check-chunk slot (per bucket, when the
    // blobs have the hinted bucket size)
    detail::delta_launch(k.vcheck, est_slots / kernels::kDeltaCheckChunk, t, p, s,
                         "cudaLaunchKernel(ws_delta_vcheck)");
    detail::delta_launch(k.vdescribe, per_blob, t, p, s, "cudaLaunchKernel(ws_delta_vdescribe)");
    detail::delta_launch(k.apply, est_slots / wk::kDeltaWarps, t, p, s,
                         "cudaLaunchKernel(ws_delta_apply)");
    stream_ = s;
    calls_.push_back(Call{block_, used_, m});
    used_ += m;
    for (const DeltaApplyBlob& b : blobs) pending_.push_back(Pending{b.name, b.blob_bytes});
  }

  //! Synchronizes the stream of the apply() calls since the last finish() (`s`) and reports the
  //! first blob, in apply order, that failed a check (nothing of it was written; the good blobs
  //! were applied). Nothing pending: returns at once.
  //! @throws protocol_error(-1, "delta blob of <name>: <what>"), the message check_delta_blob
  //! would give; config_error("stream") for another stream; cuda_error.
  void finish(cudaStream_t s) {
    namespace wk = weightsync::kernels;
    if (calls_.empty()) return;
    if (s != stream_)
      throw config_error("stream", "finish() must get the stream of the apply() calls");
    // the pending work is over whatever happens below
    struct Reset {
      CudaDeltaApplier& a;
      ~Reset() {
        a.calls_.clear();
        a.pending_.clear();
        a.block_ = 0;
        a.used_ = 0;
      }
    } reset{*this};
    const std::size_t bytes = pending_.size() * kStateBytes;
    if (readback_.size() < bytes) {
      readback_ = PinnedBuffer();
      readback_ = PinnedBuffer(bytes);
    }
    std::size_t at = 0;
    for (const Call& c : calls_) {
      weightsync::detail::check(
          cudaMemcpyAsync(readback_.data() + at,
                          state_blocks_[c.block].data() + c.first * kStateBytes,
                          c.count * kStateBytes, cudaMemcpyDeviceToHost, s),
          "cudaMemcpyAsync(delta apply state)");
      at += c.count * kStateBytes;
    }
    weightsync::detail::check(cudaStreamSynchronize(s), "cudaStreamSynchronize(delta apply)");
    for (std::size_t i = 0; i < pending_.size(); ++i) {
      wk::DeltaApplyState st;
      std::memcpy(&st, readback_.data() + i * kStateBytes, sizeof st);
      if (st.err != wk::kDeltaNoError)
        throw protocol_error(-1, weightsync::detail::cat("delta blob of ", pending_[i].name, ": ",
                                                         describe(st, pending_[i].blob_bytes)));
    }
  }

  //! Blobs enqueued since the last finish().
  std::size_t pending() const noexcept { return pending_.size(); }

 private:
  static constexpr std::size_t kStateBytes = sizeof(kernels::DeltaApplyState);
  struct Call {
    std::size_t block, first, count;
  };
  struct Pending {
    std::string name;
    std::uint64_t blob_bytes;
  };

  static std::uint32_t cast_kind(DType src, DType dst, DType t) {
    if (src == dst) return 0;
    return t == DType::float32 ? kernels::kDeltaCastF32
           : t == DType::float16 ? kernels::kDeltaCastF16
                                 : kernels::kDeltaCastBF16;
  }
  static kernels::DeltaGather to_kernel(const GatherOp& op) {
    if (op.src_dtype != op.dst_dtype &&
        !(weightsync::castable_dtype(op.src_dtype) &&
          weightsync::castable_dtype(op.dst_dtype)))
      throw config_error("gather", weightsync::detail::cat("cannot cast ", dtype_name(op.src_dtype),
                                                          " to ", dtype_name(op.dst_dtype)));
    return kernels::DeltaGather{op.dst, op.src_cols, op.rows, op.cols, op.row0, op.col0,
                                op.head_rows, cast_kind(op.src_dtype, op.dst_dtype, op.src_dtype),
                                cast_kind(op.src_dtype, op.dst_dtype, op.dst_dtype)};
  }

  //! check_delta_blob's words for an error the kernels found.
  static std::string describe(const kernels::DeltaApplyState& st, std::uint64_t blob_bytes) {
    using weightsync::detail::cat;
    namespace wk = weightsync::kernels;
    const std::uint64_t position = st.err >> 8;
    const auto code = static_cast<std::uint32_t>(st.err & 0xff);
    if (position == 0) {
      switch (code) {
        case wk::kDeltaErrShort:
          return cat(blob_bytes, " bytes, shorter than its 32-byte header");
        case wk::kDeltaErrMagic:
          return "bad magic (not a weightsync delta blob)";
        case wk::kDeltaErrElemBytes:
          return cat("elem_bytes ", st.a, " where the tensor's dtype has ", st.b);
        case wk::kDeltaErrNumel:
          return cat("numel ", st.a, " where the tensor has ", st.b);
        case wk::kDeltaErrBucketElems:
          return cat("bucket_elems ", st.a);
        case wk::kDeltaErrNBuckets:
          return cat("n_buckets ", st.a, " where ", st.b, " are needed");
        case wk::kDeltaErrBlobBytes:
          return cat("blob_bytes ", st.a, " in the header, ", st.b, " received");
        case wk::kDeltaErrDirectory:
          return "directory runs past the blob's end";
        default:
          return cat("header error ", code);
      }
    }
    if (position == std::uint64_t{st.n_buckets} + 1)
      return cat(st.a, " bytes after the last payload");
    const std::uint64_t b = position - 1;
    switch (code) {
      case wk::kDeltaErrKind:
        return cat("bucket ", b, ": kind ", st.a);
      case wk::kDeltaErrUnchanged:
        return cat("bucket ", b, ": unchanged with a payload");
      case wk::kDeltaErrCount:
        return cat("bucket ", b, ": count ", st.a, " for ", st.b, " elements");
      case wk::kDeltaErrOffset:
        return cat("bucket ", b, ": payload at ", st.a, ", expected ", st.b);
      case wk::kDeltaErrPastEnd:
        return cat("bucket ", b, ": payload runs past the blob's end");
      case wk::kDeltaErrBitmask:
        return cat("bucket ", b, ": bitmask has ", st.a, " bits, count ", st.b);
      case wk::kDeltaErrSparse:
        return cat("bucket ", b, ": offset ", st.a, " out of order or past ", st.b);
      default:
        return cat("bucket ", b, ": error ", code);
    }
  }

  std::uint32_t hint_;
  int device_;
  SparseWrites writes_;
  DeviceBuffer scratch_;
  std::vector<DeviceBuffer> state_blocks_;
  std::size_t block_ = 0, used_ = 0;
  PinnedBuffer readback_;
  std::vector<kernels::DeltaApplyJob> jobs_;
  std::vector<kernels::DeltaGather> gathers_;
  std::vector<Call> calls_;
  std::vector<Pending> pending_;
  cudaStream_t stream_ = nullptr;
};

//! Applies vLLM sparse_nccl pairs (int32 flat indices, then values) onto a device tensor, as
//! apply_sparse_host (<weightsync/delta/receive.hpp>) does on the host: every index is checked
//! first (one out of range: nothing written, protocol_error naming the tensor, the entry and the
//! index); strictly ascending indices (torch.nonzero's, what vLLM sends) are written in parallel,
//! others in order on one thread (the last of a repeated index wins). Not thread-safe.
class CudaSparseApplier {
 public:
  CudaSparseApplier() : device_(weightsync::detail::current_device()) {}

  //! Keeps a copy of `n` indices (device memory) in stream order on `s`: the memory they arrived
  //! in may be reused before their values arrive.
  void indices(const void* idx, std::uint64_t n, cudaStream_t s) {
    detail::delta_reserve(idx_, (n * 4 + 7) / 8 * 8 + 16, device_);
    if (n > 0)
      weightsync::detail::check(cudaMemcpyAsync(idx_.data(), idx, n * 4, cudaMemcpyDeviceToDevice, s),
                                "cudaMemcpyAsync(sparse indices)");
    n_ = n;
  }
  //! Checks the kept indices and writes `values` (n elements of eb bytes, device memory) into
  //! `dst` (numel elements); synchronizes `s`.
  //! @throws config_error("values") when n differs from the kept indices' count;
  //! protocol_error(-1, "sparse update of <name>: index <i> (entry <k>) outside its <numel>
  //! elements"); cuda_error.
  void apply(const void* values, std::uint64_t n, void* dst, std::uint64_t numel, unsigned eb,
             const std::string& name, cudaStream_t s) {
    using weightsync::detail::cat;
    using weightsync::detail::check;
    namespace wk = weightsync::kernels;
    if (n != n_)
      throw config_error("values", cat(n, " values of ", name, " after ", n_, " indices"));
    detail::check_elem_bytes(eb, "elem_bytes");
    if (n == 0) return;
    if (readback_.size() < 16) readback_ = PinnedBuffer(16);
    auto* state = reinterpret_cast<std::uint64_t*>(idx_.data() + (n * 4 + 7) / 8 * 8);
    check(cudaMemsetAsync(state, 0xff, 16, s), "cudaMemsetAsync(sparse state)");
    wk::SparsePairsParams p{reinterpret_cast<const std::int32_t*>(idx_.data()), values, dst, state,
                            n, numel, eb, 0};
    const auto& k = detail::DeltaKernels::instance();
    const std::uint64_t grid = std::min<std::uint64_t>((n + 255) / 256, 65536);
    detail::delta_launch(k.sparse_check, grid, wk::kDeltaThreads, p, s,
                         "cudaLaunchKernel(ws_sparse_check)");
    detail::delta_launch(k.sparse_scatter, grid, wk::kDeltaThreads, p, s,
                         "cudaLaunchKernel(ws_sparse_scatter)");
    check(cudaMemcpyAsync(readback_.data(), state, 16, cudaMemcpyDeviceToHost, s),
          "cudaMemcpyAsync(sparse state)");
    check(cudaStreamSynchronize(s), "cudaStreamSynchronize(sparse apply)");
    std::uint64_t st[2];
    std::memcpy(st, readback_.data(), 16);
    if (st[0] != wk::kDeltaNoError) {
      std::int32_t bad = 0;
      check(cudaMemcpy(&bad, idx_.data() + st[0] * 4, 4, cudaMemcpyDeviceToHost),
            "cudaMemcpy(sparse index)");
      throw protocol_error(-1, cat("sparse update of ", name, ": index ", bad, " (entry ", st[0],
                                   ") outside its ", numel, " elements"));
    }
  }

 private:
  int device_;
  DeviceBuffer idx_;  // the indices, then (8-byte aligned) 16 bytes of state
  PinnedBuffer readback_;
  std::uint64_t n_ = 0;
};

}  // namespace weightsync::delta
