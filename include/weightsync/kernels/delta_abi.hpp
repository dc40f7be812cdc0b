// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The ABI of the delta codec kernels (kernels/delta.cu): the parameter blocks the kernels
//! take by value, the per-tensor records they read and write in device memory, and the error codes
//! of the blob checks. Plain C++17 included by the .cu source (nvcc) and by the launcher
//! (<weightsync/cuda/delta.hpp>, g++), so the static_asserts below check the layout on both sides.
//!
//! Buckets of every tensor of a batch are numbered one after another ("global" buckets). Encode:
//! ws_delta_index, ws_delta_count, ws_delta_chunks, ws_delta_top (measure), ws_delta_encode.
//! Apply: ws_delta_vhead, ws_delta_vbase, ws_delta_vchunks, ws_delta_vtop, ws_delta_vcheck,
//! ws_delta_vdescribe, ws_delta_apply.

#include <cstddef>
#include <cstdint>

#include "../detail/float_bits.hpp"  // WEIGHTSYNC_HOST_DEVICE (relative: nvcc compiles the kernels without -I)

namespace weightsync::kernels {

//! Threads of every CTA but the single-CTA scans (kDeltaScanThreads).
inline constexpr int kDeltaThreads = 256;
inline constexpr int kDeltaScanThreads = 1024;
//! Warps per CTA: ws_delta_apply takes a bucket per warp (ws_delta_encode a bucket per thread for
//! its metadata, then a sparse payload per warp).
inline constexpr int kDeltaWarps = kDeltaThreads / 32;
//! Buckets per chunk of the encoder's payload-offset scan (8 per thread of ws_delta_chunks).
inline constexpr std::uint32_t kDeltaEncodeChunk = 2048;
//! Buckets per chunk of the checker's directory scan (1 per thread); chunks never span blobs.
inline constexpr std::uint32_t kDeltaCheckChunk = 256;

//! DeltaEncodeParams::flags: ws_delta_count also writes the source into the reference (every
//! 16-byte vector whose 32-byte sector changed, so the writes are whole sectors): after the
//! measure the reference is the source, and no separate update pass is needed.
inline constexpr std::uint32_t kDeltaUpdateRef = 1;

//! DeltaApplyParams::flags: sparse buckets are written a 32-byte sector at a time (read, merged,
//! written whole) instead of element by element.
inline constexpr std::uint32_t kDeltaApplySectors = 1;

//! The changed elements a bucket's scratch slot (bucket_elems / 8 bytes, which else holds the
//! bucket's changed bits) can hold as a list: ws_delta_count writes the bucket's sparse payload
//! there when the bucket is sparse with at most this many changes (offsets, uint16, at byte 0;
//! values at delta_list_values_at), so that ws_delta_encode copies it instead of gathering from
//! the source.
WEIGHTSYNC_HOST_DEVICE constexpr std::uint32_t delta_list_cap(std::uint32_t bucket_elems,
                                                              std::uint32_t elem_bytes) {
  return bucket_elems / 8 < 16 ? 0u : (bucket_elems / 8 - 16) / (2 + elem_bytes);
}
//! Where the list's values start in the slot.
WEIGHTSYNC_HOST_DEVICE constexpr std::uint32_t delta_list_values_at(std::uint32_t bucket_elems,
                                                                    std::uint32_t elem_bytes) {
  return (delta_list_cap(bucket_elems, elem_bytes) * 2 + 7) / 8 * 8;
}
static_assert(delta_list_values_at(16384, 2) + delta_list_cap(16384, 2) * 2 <= 16384 / 8 &&
              delta_list_values_at(32, 8) + delta_list_cap(32, 8) * 8 <= 32 / 8 &&
              delta_list_values_at(64, 1) + delta_list_cap(64, 1) <= 64 / 8 &&
              delta_list_values_at(65536, 8) + delta_list_cap(65536, 8) * 8 <= 65536 / 8,
              "the list fits its slot");

//! DeltaApplyState::err when the blob is good. Otherwise err = (position << 8) | code, position 0
//! for the header, b + 1 for bucket b, n_buckets + 1 for the end of the blob: the smallest key is
//! the first error check_delta_blob (<weightsync/delta/codec.hpp>) would report.
inline constexpr std::uint64_t kDeltaNoError = ~std::uint64_t{0};
// header (position 0), in check order
inline constexpr std::uint32_t kDeltaErrShort = 1;  //!< a = blob_bytes
inline constexpr std::uint32_t kDeltaErrMagic = 2;
inline constexpr std::uint32_t kDeltaErrElemBytes = 3;    //!< a = header's, b = tensor's
inline constexpr std::uint32_t kDeltaErrNumel = 4;        //!< a = header's, b = tensor's
inline constexpr std::uint32_t kDeltaErrBucketElems = 5;  //!< a = header's
inline constexpr std::uint32_t kDeltaErrNBuckets = 6;     //!< a = header's, b = needed
inline constexpr std::uint32_t kDeltaErrBlobBytes = 7;    //!< a = header's, b = received
inline constexpr std::uint32_t kDeltaErrDirectory = 8;    //!< directory past the end
// bucket b (position b + 1), in check order
inline constexpr std::uint32_t kDeltaErrKind = 1;       //!< a = kind
inline constexpr std::uint32_t kDeltaErrUnchanged = 2;  //!< unchanged with a payload
inline constexpr std::uint32_t kDeltaErrCount = 3;      //!< a = count, b = len
inline constexpr std::uint32_t kDeltaErrOffset = 4;     //!< a = offset, b = expected
inline constexpr std::uint32_t kDeltaErrPastEnd = 5;    //!< payload past the end
inline constexpr std::uint32_t kDeltaErrBitmask = 6;    //!< a = bits set, b = count
inline constexpr std::uint32_t kDeltaErrSparse = 7;     //!< a = offset, b = len
// position n_buckets + 1
inline constexpr std::uint32_t kDeltaErrTrailing = 1;  //!< a = bytes after the last payload

//! One tensor of an encode batch.
struct DeltaEncodeJob {
  const void* src;
  const void* ref;  //!< written by ws_delta_count under kDeltaUpdateRef (always when low_byte)
  std::uint64_t numel;
  std::uint64_t bucket_base;  //!< its first global bucket
  std::uint32_t n_buckets;
  std::uint32_t elem_bytes;
  //! 1: `ref` is a low-byte reference (<weightsync/delta/low_byte.hpp>; 2-byte elements, buckets a
  //! multiple of kLowByteBlock), measured and updated as low_byte_changes_host does.
  std::uint32_t low_byte;
  std::uint32_t reserved;
};
static_assert(sizeof(DeltaEncodeJob) == 48, "DeltaEncodeJob is an ABI: 2 pointers, 2 u64, 4 u32");
static_assert(offsetof(DeltaEncodeJob, bucket_base) == 24 &&
              offsetof(DeltaEncodeJob, elem_bytes) == 36 && offsetof(DeltaEncodeJob, low_byte) == 40);

//! ws_delta_lowbyte_seed: the low bytes and block hashes of `src` (numel 2-byte elements) into
//! the low-byte reference `ref`.
struct DeltaLowByteSeedParams {
  const void* src;
  void* ref;
  std::uint64_t numel;
};
static_assert(sizeof(DeltaLowByteSeedParams) == 24, "DeltaLowByteSeedParams is an ABI: 2 pointers, u64");

//! Written by ws_delta_top for each job.
struct DeltaEncodeResult {
  std::uint64_t blob_bytes;
  std::uint64_t scan_base;  //!< the batch-wide payload scan at the job's first bucket
};
static_assert(sizeof(DeltaEncodeResult) == 16, "DeltaEncodeResult is an ABI");

struct DeltaEncodeParams {
  const DeltaEncodeJob* jobs;
  DeltaEncodeResult* results;
  void* const* outs;             //!< each job's blob (ws_delta_encode)
  std::uint32_t* bucket_job;     //!< [n_buckets] the job of each global bucket
  std::uint32_t* counts;         //!< [n_buckets] changed elements
  std::uint32_t* mask;           //!< [n_buckets * bucket_elems / 32] per bucket: its changed
                                 //!< bits, or its list (see delta_list_cap)
  std::uint32_t* local;          //!< [n_buckets] payload offset inside the bucket's chunk
  std::uint64_t* chunk_base;     //!< [n_chunks + 1] chunk sums, then their exclusive scan
  std::uint64_t* chunk_changed;  //!< [n_chunks] changed elements per chunk
  std::uint64_t* totals;         //!< [3] changed elements, payload bytes of the batch, low-byte
                                 //!< blocks whose check failed
  std::uint64_t n_buckets;
  std::uint32_t n_jobs;
  std::uint32_t bucket_elems;
  std::uint32_t flags;  //!< kDeltaUpdateRef or 0
  std::uint32_t reserved;
};
static_assert(sizeof(DeltaEncodeParams) == 104,
              "DeltaEncodeParams is an ABI: 10 pointers, u64, 4 u32");
static_assert(offsetof(DeltaEncodeParams, n_buckets) == 80 &&
              offsetof(DeltaEncodeParams, bucket_elems) == 92 &&
              offsetof(DeltaEncodeParams, flags) == 96);

//! Float kinds of DeltaGather's casts (0: the same dtype on both sides, bytes copied).
inline constexpr std::uint32_t kDeltaCastF32 = 1;
inline constexpr std::uint32_t kDeltaCastF16 = 2;
inline constexpr std::uint32_t kDeltaCastBF16 = 3;

//! A blob applied through a load plan's gather (GatherOp of <weightsync/loading/planner.hpp>):
//! element e of the tensor, at source row r = e / src_cols and column c = e % src_cols, lands at
//! dst[d * cols + c - col0] for d = unpermuted(r) - row0 in [0, rows) and c in [col0, col0 + cols)
//! (unpermuted: the inverse rotary permutation of head_rows rows, none when 0), cast from
//! src_kind to dst_kind; other elements are not this rank's.
struct DeltaGather {
  void* dst;
  std::int64_t src_cols, rows, cols, row0, col0, head_rows;
  std::uint32_t src_kind, dst_kind;
};
static_assert(sizeof(DeltaGather) == 64, "DeltaGather is an ABI: a pointer, 6 i64, 2 u32");

//! One blob of an apply batch (blob 8-byte aligned).
struct DeltaApplyJob {
  const void* blob;
  void* dst;  //!< (unused when gather != 0)
  std::uint64_t blob_bytes;
  std::uint64_t numel;
  std::uint32_t elem_bytes;
  std::uint32_t gather;  //!< 0, or 1 + its index in DeltaApplyParams::gathers
};
static_assert(sizeof(DeltaApplyJob) == 40, "DeltaApplyJob is an ABI: 2 pointers, 2 u64, 2 u32");
static_assert(offsetof(DeltaApplyJob, numel) == 24 && offsetof(DeltaApplyJob, elem_bytes) == 32);

//! Written by the check kernels for each blob; read back by the host after the batch.
struct DeltaApplyState {
  std::uint64_t bucket_base;   //!< first global bucket
  std::uint64_t chunk_base;    //!< first global check chunk
  std::uint32_t n_buckets;     //!< the header's, 0 when the header is bad
  std::uint32_t bucket_elems;  //!< the header's
  std::uint64_t err;           //!< kDeltaNoError or the first error's key
  std::uint64_t a, b;          //!< the error's details (see the codes)
  std::uint64_t trail_at;      //!< where the last payload ends (for kDeltaErrTrailing)
  std::uint64_t reserved;
};
static_assert(sizeof(DeltaApplyState) == 64, "DeltaApplyState is an ABI");
static_assert(offsetof(DeltaApplyState, err) == 24 && offsetof(DeltaApplyState, trail_at) == 48);

//! ws_delta_vcheck takes check chunks grid-stride (a CTA each); ws_delta_apply takes check-chunk
//! slots grid-stride, a warp each: slot v is bucket v % kDeltaCheckChunk of chunk
//! v / kDeltaCheckChunk (past its blob's last bucket: nothing).
struct DeltaApplyParams {
  const DeltaApplyJob* jobs;
  DeltaApplyState* state;
  std::uint64_t* chunk_sums;  //!< [n_chunks] payload bytes per check chunk, then their scan
  std::uint32_t* chunk_blob;  //!< [n_chunks] the blob of each check chunk
  std::uint64_t* totals;      //!< [2] global buckets, check chunks
  const DeltaGather* gathers;  //!< the jobs' gathers (DeltaApplyJob::gather)
  std::uint32_t n_jobs;
  std::uint32_t flags;  //!< kDeltaApplySectors or 0
};
static_assert(sizeof(DeltaApplyParams) == 56, "DeltaApplyParams is an ABI: 6 pointers, 2 u32");
static_assert(offsetof(DeltaApplyParams, totals) == 32 && offsetof(DeltaApplyParams, n_jobs) == 48);

//! vLLM's sparse_nccl pairs applied on the GPU (ws_sparse_check, then ws_sparse_scatter):
//! values[k] (elem_bytes each) to dst[idx[k]] for k < n. state[0]: the first entry whose index is
//! outside [0, numel) (kDeltaNoError: none; then nothing is written); state[1]: the first entry
//! whose index is not above the one before it (kDeltaNoError: strictly ascending, so the pairs are
//! written in parallel; otherwise one thread writes them in order, the last of a repeated index
//! winning, as the host does).
struct SparsePairsParams {
  const std::int32_t* idx;
  const void* values;
  void* dst;
  std::uint64_t* state;
  std::uint64_t n;
  std::uint64_t numel;
  std::uint32_t elem_bytes;
  std::uint32_t reserved;
};
static_assert(sizeof(SparsePairsParams) == 56, "SparsePairsParams is an ABI: 4 pointers, 2 u64, 2 u32");

}  // namespace weightsync::kernels
