// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The delta blob: how one tensor's changes since a reference version travel. Plain C++17 (no
//! library headers), shared by the host codec (<weightsync/delta/codec.hpp>) and the CUDA
//! kernels (kernels/delta.cu, which compiles the functions below as __host__ __device__),
//! so both sides read the same layout and choose the same encodings.
//!
//! A tensor of `numel` elements of `elem_bytes` bytes is cut into buckets of `bucket_elems`
//! elements (the last one may be shorter). An element has changed when its bytes differ from the
//! reference's (bitwise: -0.0 against 0.0 and NaN payloads are changes like any other). Each
//! bucket is encoded in the smallest of:
//!   - unchanged: nothing;
//!   - raw: every element of the bucket (dense buckets);
//!   - bitmask: one bit per element (LSB first in little-endian uint32 words), then the changed
//!     elements' values in ascending order;
//!   - sparse: each changed element's uint16 offset inside the bucket (ascending), then the
//!     values. (bucket_elems <= 65536, so an offset always fits; offsets rather than running gaps
//!     let every value be placed independently, which is what a GPU decoder wants.)
//! Ties go to the earlier of raw, bitmask, sparse.
//!
//! Layout, little-endian, every section 8-byte aligned:
//!   BlobHeader (32 bytes) | BucketEntry x n_buckets (16 bytes each) | bucket payloads
//! A payload is at BucketEntry::offset (from the blob's start), and its sections are each padded
//! to 8 bytes: bitmask = [words][values], sparse = [offsets][values]. Payloads follow one another
//! in bucket order with no gaps; blob_bytes is the whole blob.
//!
//! Cost of the encoding per changed bf16 element at density d (bucket of 16384 elements):
//! sparse 4 bytes (2 of offset, 2 of value), plus 16 bytes of directory per 32 KiB bucket
//! (0.05 %): 1 % of elements changed -> about 2.05 % of the tensor's bytes.

#include <cstddef>
#include <cstdint>

#include "../detail/float_bits.hpp"  // WEIGHTSYNC_HOST_DEVICE (relative: nvcc compiles the kernels without -I)

namespace weightsync::delta {

//! "WSD1", little-endian.
inline constexpr std::uint32_t kBlobMagic = 0x31445357u;
//! 16384 elements (32 KiB of bf16) per bucket by default.
inline constexpr std::uint32_t kDefaultBucketElems = 16384;
inline constexpr std::uint32_t kMaxBucketElems = 65536;

enum class BucketKind : std::uint8_t { unchanged = 0, raw = 1, bitmask = 2, sparse = 3 };

struct BlobHeader {
  std::uint32_t magic;
  std::uint8_t elem_bytes;
  std::uint8_t reserved[3];
  std::uint32_t bucket_elems;
  std::uint32_t n_buckets;
  std::uint64_t numel;
  std::uint64_t blob_bytes;
};
static_assert(sizeof(BlobHeader) == 32, "BlobHeader is a wire format");

struct BucketEntry {
  std::uint64_t offset;  //!< of the payload, from the blob's start (0 when unchanged)
  std::uint32_t count;   //!< changed elements (raw: every element of the bucket)
  std::uint8_t kind;     //!< a BucketKind
  std::uint8_t reserved[3];
};
static_assert(sizeof(BucketEntry) == 16, "BucketEntry is a wire format");

WEIGHTSYNC_HOST_DEVICE constexpr std::uint64_t align8(std::uint64_t n) {
  return (n + 7) / 8 * 8;
}

//! Elements in bucket `b` of a tensor of `numel` elements.
WEIGHTSYNC_HOST_DEVICE constexpr std::uint64_t bucket_len(std::uint64_t numel,
                                                          std::uint32_t bucket_elems,
                                                          std::uint64_t b) {
  const std::uint64_t begin = b * bucket_elems;
  return numel - begin < bucket_elems ? numel - begin : bucket_elems;
}
WEIGHTSYNC_HOST_DEVICE constexpr std::uint64_t bucket_count(std::uint64_t numel,
                                                            std::uint32_t bucket_elems) {
  return (numel + bucket_elems - 1) / bucket_elems;
}
//! Bytes before the first payload.
WEIGHTSYNC_HOST_DEVICE constexpr std::uint64_t blob_prefix_bytes(std::uint64_t n_buckets) {
  return sizeof(BlobHeader) + n_buckets * sizeof(BucketEntry);
}

//! Payload bytes of a bucket of `len` elements with `count` changed, encoded as `k`.
WEIGHTSYNC_HOST_DEVICE constexpr std::uint64_t payload_bytes(BucketKind k, std::uint64_t len,
                                                             std::uint64_t count,
                                                             std::uint64_t elem_bytes) {
  switch (k) {
    case BucketKind::unchanged:
      return 0;
    case BucketKind::raw:
      return align8(len * elem_bytes);
    case BucketKind::bitmask:
      return align8((len + 31) / 32 * 4) + align8(count * elem_bytes);
    case BucketKind::sparse:
      return align8(count * 2) + align8(count * elem_bytes);
  }
  return 0;
}

//! The smallest encoding (ties: raw, then bitmask, then sparse).
WEIGHTSYNC_HOST_DEVICE constexpr BucketKind choose_kind(std::uint64_t len, std::uint64_t count,
                                                        std::uint64_t elem_bytes) {
  if (count == 0) return BucketKind::unchanged;
  const std::uint64_t raw = payload_bytes(BucketKind::raw, len, count, elem_bytes);
  const std::uint64_t mask = payload_bytes(BucketKind::bitmask, len, count, elem_bytes);
  const std::uint64_t sparse = payload_bytes(BucketKind::sparse, len, count, elem_bytes);
  if (raw <= mask && raw <= sparse) return BucketKind::raw;
  return mask <= sparse ? BucketKind::bitmask : BucketKind::sparse;
}

}  // namespace weightsync::delta
