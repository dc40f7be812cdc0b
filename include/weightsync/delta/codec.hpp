// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The host delta codec: encode a tensor against its reference into a delta blob
//! (<weightsync/delta/format.hpp>), and apply a blob in place. The CUDA codec
//! (<weightsync/cuda/delta.hpp>) writes the same bytes.
//!
//! apply_delta_host checks the whole blob (header, every directory entry, every payload's bounds)
//! before it writes a byte: a malformed or mismatched blob changes nothing and throws
//! protocol_error naming what is wrong.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "weightsync/delta/format.hpp"
#include "weightsync/detail/format.hpp"
#include "weightsync/error.hpp"

namespace weightsync::delta {

//! One tensor of a batch to diff: `src` against `ref` (numel elements of elem_bytes bytes,
//! compared bitwise; host memory for the host codec, device memory for the CUDA one).
struct DeltaJob {
  const void* src = nullptr;
  const void* ref = nullptr;
  std::uint64_t numel = 0;
  unsigned elem_bytes = 0;
  //! `ref` is a low-byte reference (<weightsync/delta/low_byte.hpp>; 2-byte elements), which the
  //! measure updates to `src` in the same pass (HostDeltaCodec, and CudaDeltaCodec with buckets a
  //! multiple of kLowByteBlock).
  bool low_byte = false;
};

namespace detail {

inline bool elem_differs(const std::byte* a, const std::byte* b, unsigned eb) {
  switch (eb) {
    case 1:
      return a[0] != b[0];
    case 2: {
      std::uint16_t x, y;
      std::memcpy(&x, a, 2);
      std::memcpy(&y, b, 2);
      return x != y;
    }
    case 4: {
      std::uint32_t x, y;
      std::memcpy(&x, a, 4);
      std::memcpy(&y, b, 4);
      return x != y;
    }
    default:
      return std::memcmp(a, b, eb) != 0;
  }
}

inline void check_layout(std::uint64_t numel, unsigned eb, std::uint32_t bucket_elems) {
  if (eb != 1 && eb != 2 && eb != 4 && eb != 8)
    throw config_error("elem_bytes", weightsync::detail::cat("must be 1, 2, 4 or 8, got ", eb));
  if (bucket_elems == 0 || bucket_elems > kMaxBucketElems || bucket_elems % 32 != 0)
    throw config_error("bucket_elems",
                       weightsync::detail::cat("must be a multiple of 32 in [32, ", kMaxBucketElems,
                                               "], got ", bucket_elems));
  if (bucket_count(numel, bucket_elems) > 0xffffffffull)
    throw config_error("numel", weightsync::detail::cat(numel, " elements make more than 2^32 buckets"));
}

}  // namespace detail

//! Changed elements per bucket of `src` against `ref` (numel elements of eb bytes).
inline std::vector<std::uint32_t> bucket_changes_host(const void* src, const void* ref,
                                                      std::uint64_t numel, unsigned eb,
                                                      std::uint32_t bucket_elems) {
  detail::check_layout(numel, eb, bucket_elems);
  const auto* s = static_cast<const std::byte*>(src);
  const auto* r = static_cast<const std::byte*>(ref);
  const std::uint64_t nb = bucket_count(numel, bucket_elems);
  std::vector<std::uint32_t> counts(nb, 0);
  for (std::uint64_t b = 0; b < nb; ++b) {
    const std::uint64_t begin = b * bucket_elems, len = bucket_len(numel, bucket_elems, b);
    if (std::memcmp(s + begin * eb, r + begin * eb, len * eb) == 0) continue;
    std::uint32_t c = 0;
    for (std::uint64_t i = begin; i < begin + len; ++i) c += detail::elem_differs(s + i * eb, r + i * eb, eb);
    counts[b] = c;
  }
  return counts;
}

//! The blob's size for these per-bucket counts.
inline std::uint64_t blob_bytes_for(const std::vector<std::uint32_t>& counts, std::uint64_t numel,
                                    unsigned eb, std::uint32_t bucket_elems) {
  std::uint64_t n = blob_prefix_bytes(counts.size());
  for (std::uint64_t b = 0; b < counts.size(); ++b) {
    const std::uint64_t len = bucket_len(numel, bucket_elems, b);
    n += payload_bytes(choose_kind(len, counts[b], eb), len, counts[b], eb);
  }
  return n;
}

//! Encodes the elements of `src` for which changed(i) holds (i: the element's index in the
//! tensor; counts[b]: how many of bucket b's do) into `out` (which must hold
//! blob_bytes_for(counts, ...) bytes). Returns the blob's size. The full reference's encoder
//! below and the low-byte reference's (<weightsync/delta/low_byte.hpp>) differ only in `changed`.
template <class Changed>
std::uint64_t encode_delta_host_if(const void* src, std::uint64_t numel, unsigned eb,
                                   std::uint32_t bucket_elems,
                                   const std::vector<std::uint32_t>& counts, std::byte* out,
                                   std::uint64_t out_bytes, Changed&& changed) {
  detail::check_layout(numel, eb, bucket_elems);
  const std::uint64_t total = blob_bytes_for(counts, numel, eb, bucket_elems);
  if (out_bytes < total)
    throw config_error("out_bytes", weightsync::detail::cat("the blob needs ", total, " bytes, got ", out_bytes));
  const auto* s = static_cast<const std::byte*>(src);
  const std::uint64_t nb = counts.size();
  BlobHeader h{};
  h.magic = kBlobMagic;
  h.elem_bytes = static_cast<std::uint8_t>(eb);
  h.bucket_elems = bucket_elems;
  h.n_buckets = static_cast<std::uint32_t>(nb);
  h.numel = numel;
  h.blob_bytes = total;
  std::memcpy(out, &h, sizeof h);
  std::uint64_t at = blob_prefix_bytes(nb);
  for (std::uint64_t b = 0; b < nb; ++b) {
    const std::uint64_t begin = b * bucket_elems, len = bucket_len(numel, bucket_elems, b);
    const std::uint32_t c = counts[b];
    const BucketKind k = choose_kind(len, c, eb);
    BucketEntry e{};
    e.kind = static_cast<std::uint8_t>(k);
    e.count = k == BucketKind::raw ? static_cast<std::uint32_t>(len) : c;
    e.offset = k == BucketKind::unchanged ? 0 : at;
    std::memcpy(out + sizeof(BlobHeader) + b * sizeof(BucketEntry), &e, sizeof e);
    const std::uint64_t size = payload_bytes(k, len, c, eb);
    std::byte* p = out + at;
    std::memset(p, 0, size);  // the padding is zeros: the blob's bytes are a function of its input
    const std::byte* sb = s + begin * eb;
    if (k == BucketKind::raw) {
      std::memcpy(p, sb, len * eb);
    } else if (k == BucketKind::bitmask) {
      std::byte* values = p + align8((len + 31) / 32 * 4);
      std::uint32_t word = 0;
      std::uint64_t v = 0;
      for (std::uint64_t i = 0; i < len; ++i) {
        if (changed(begin + i)) {
          word |= std::uint32_t{1} << (i % 32);
          std::memcpy(values + v++ * eb, sb + i * eb, eb);
        }
        if (i % 32 == 31 || i + 1 == len) {
          std::memcpy(p + i / 32 * 4, &word, 4);
          word = 0;
        }
      }
    } else if (k == BucketKind::sparse) {
      std::byte* values = p + align8(std::uint64_t{c} * 2);
      std::uint64_t v = 0;
      for (std::uint64_t i = 0; i < len; ++i)
        if (changed(begin + i)) {
          const auto off = static_cast<std::uint16_t>(i);
          std::memcpy(p + v * 2, &off, 2);
          std::memcpy(values + v * eb, sb + i * eb, eb);
          ++v;
        }
    }
    at += size;
  }
  return total;
}

//! Encodes `src` against `ref` into `out` (which must hold blob_bytes_for(counts, ...) bytes;
//! `counts` from bucket_changes_host). Returns the blob's size.
inline std::uint64_t encode_delta_host(const void* src, const void* ref, std::uint64_t numel,
                                       unsigned eb, std::uint32_t bucket_elems,
                                       const std::vector<std::uint32_t>& counts, std::byte* out,
                                       std::uint64_t out_bytes) {
  const auto* s = static_cast<const std::byte*>(src);
  const auto* r = static_cast<const std::byte*>(ref);
  return encode_delta_host_if(src, numel, eb, bucket_elems, counts, out, out_bytes,
                              [&](std::uint64_t i) {
                                return detail::elem_differs(s + i * eb, r + i * eb, eb);
                              });
}

//! Encodes `src` against `ref` into a new blob.
inline std::vector<std::byte> encode_delta_host(const void* src, const void* ref,
                                                std::uint64_t numel, unsigned eb,
                                                std::uint32_t bucket_elems = kDefaultBucketElems) {
  const auto counts = bucket_changes_host(src, ref, numel, eb, bucket_elems);
  std::vector<std::byte> out(blob_bytes_for(counts, numel, eb, bucket_elems));
  encode_delta_host(src, ref, numel, eb, bucket_elems, counts, out.data(), out.size());
  return out;
}

//! Checks a blob against the tensor it claims to change (`what` names it in errors): header,
//! every directory entry, payloads contiguous and inside the blob, bitmask popcounts and sparse
//! offsets (ascending, inside their bucket). Reads only the blob.
//! @throws protocol_error naming the tensor and the field.
inline void check_delta_blob(const std::byte* blob, std::uint64_t blob_bytes, std::uint64_t numel,
                             unsigned eb, const std::string& what) {
  using weightsync::detail::cat;
  const auto bad = [&](const std::string& why) {
    return protocol_error(-1, cat("delta blob of ", what, ": ", why));
  };
  if (blob_bytes < sizeof(BlobHeader))
    throw bad(cat(blob_bytes, " bytes, shorter than its 32-byte header"));
  BlobHeader h;
  std::memcpy(&h, blob, sizeof h);
  if (h.magic != kBlobMagic) throw bad("bad magic (not a weightsync delta blob)");
  if (h.elem_bytes != eb)
    throw bad(cat("elem_bytes ", unsigned(h.elem_bytes), " where the tensor's dtype has ", eb));
  if (h.numel != numel) throw bad(cat("numel ", h.numel, " where the tensor has ", numel));
  if (h.bucket_elems == 0 || h.bucket_elems > kMaxBucketElems || h.bucket_elems % 32 != 0)
    throw bad(cat("bucket_elems ", h.bucket_elems));
  if (h.n_buckets != bucket_count(numel, h.bucket_elems))
    throw bad(cat("n_buckets ", h.n_buckets, " where ", bucket_count(numel, h.bucket_elems),
                  " are needed"));
  if (h.blob_bytes != blob_bytes)
    throw bad(cat("blob_bytes ", h.blob_bytes, " in the header, ", blob_bytes, " received"));
  const std::uint64_t prefix = blob_prefix_bytes(h.n_buckets);
  if (prefix > blob_bytes) throw bad("directory runs past the blob's end");
  std::uint64_t at = prefix;
  for (std::uint64_t b = 0; b < h.n_buckets; ++b) {
    BucketEntry e;
    std::memcpy(&e, blob + sizeof(BlobHeader) + b * sizeof(BucketEntry), sizeof e);
    const std::uint64_t len = bucket_len(numel, h.bucket_elems, b);
    if (e.kind > static_cast<std::uint8_t>(BucketKind::sparse))
      throw bad(cat("bucket ", b, ": kind ", unsigned(e.kind)));
    const auto k = static_cast<BucketKind>(e.kind);
    if (k == BucketKind::unchanged) {
      if (e.count != 0 || e.offset != 0) throw bad(cat("bucket ", b, ": unchanged with a payload"));
      continue;
    }
    if (e.count == 0 || e.count > len || (k == BucketKind::raw && e.count != len))
      throw bad(cat("bucket ", b, ": count ", e.count, " for ", len, " elements"));
    if (e.offset != at) throw bad(cat("bucket ", b, ": payload at ", e.offset, ", expected ", at));
    const std::uint64_t size = payload_bytes(k, len, e.count, eb);
    if (size > blob_bytes - at) throw bad(cat("bucket ", b, ": payload runs past the blob's end"));
    const std::byte* p = blob + at;
    if (k == BucketKind::bitmask) {
      std::uint64_t ones = 0;
      for (std::uint64_t w = 0; w < (len + 31) / 32; ++w) {
        std::uint32_t word;
        std::memcpy(&word, p + w * 4, 4);
        if (w == (len - 1) / 32 && len % 32 != 0) word &= (std::uint32_t{1} << (len % 32)) - 1;
        ones += static_cast<std::uint64_t>(__builtin_popcount(word));
      }
      if (ones != e.count) throw bad(cat("bucket ", b, ": bitmask has ", ones, " bits, count ", e.count));
    } else if (k == BucketKind::sparse) {
      std::int64_t last = -1;
      for (std::uint64_t v = 0; v < e.count; ++v) {
        std::uint16_t off;
        std::memcpy(&off, p + v * 2, 2);
        if (off <= last || off >= len)
          throw bad(cat("bucket ", b, ": offset ", off, " out of order or past ", len));
        last = off;
      }
    }
    at += size;
  }
  if (at != blob_bytes) throw bad(cat(blob_bytes - at, " bytes after the last payload"));
}

//! Calls fn(i, value) for every element a checked blob carries (i: its index in the tensor;
//! value: its eb bytes in the blob), in ascending i. The blob must have passed check_delta_blob.
template <class F>
void for_each_delta_element(const std::byte* blob, std::uint64_t numel, unsigned eb, F&& fn) {
  BlobHeader h;
  std::memcpy(&h, blob, sizeof h);
  for (std::uint64_t b = 0; b < h.n_buckets; ++b) {
    BucketEntry e;
    std::memcpy(&e, blob + sizeof(BlobHeader) + b * sizeof(BucketEntry), sizeof e);
    const auto k = static_cast<BucketKind>(e.kind);
    if (k == BucketKind::unchanged) continue;
    const std::uint64_t begin = b * h.bucket_elems, len = bucket_len(numel, h.bucket_elems, b);
    const std::byte* p = blob + e.offset;
    if (k == BucketKind::raw) {
      for (std::uint64_t i = 0; i < len; ++i) fn(begin + i, p + i * eb);
    } else if (k == BucketKind::bitmask) {
      const std::byte* values = p + align8((len + 31) / 32 * 4);
      std::uint64_t v = 0;
      for (std::uint64_t w = 0; w < (len + 31) / 32; ++w) {
        std::uint32_t word;
        std::memcpy(&word, p + w * 4, 4);
        while (word != 0) {
          const std::uint64_t i = w * 32 + static_cast<std::uint64_t>(__builtin_ctz(word));
          word &= word - 1;
          if (i >= len) break;
          fn(begin + i, values + v++ * eb);
        }
      }
    } else {
      const std::byte* values = p + align8(std::uint64_t{e.count} * 2);
      for (std::uint64_t v = 0; v < e.count; ++v) {
        std::uint16_t off;
        std::memcpy(&off, p + v * 2, 2);
        fn(begin + off, values + v * eb);
      }
    }
  }
}

//! Applies a blob to `dst` (numel elements of eb bytes) in place, after check_delta_blob.
inline void apply_delta_host(const std::byte* blob, std::uint64_t blob_bytes, void* dst,
                             std::uint64_t numel, unsigned eb, const std::string& what) {
  check_delta_blob(blob, blob_bytes, numel, eb, what);
  BlobHeader h;
  std::memcpy(&h, blob, sizeof h);
  auto* d = static_cast<std::byte*>(dst);
  for (std::uint64_t b = 0; b < h.n_buckets; ++b) {
    BucketEntry e;
    std::memcpy(&e, blob + sizeof(BlobHeader) + b * sizeof(BucketEntry), sizeof e);
    const auto k = static_cast<BucketKind>(e.kind);
    if (k == BucketKind::unchanged) continue;
    const std::uint64_t begin = b * h.bucket_elems, len = bucket_len(numel, h.bucket_elems, b);
    const std::byte* p = blob + e.offset;
    std::byte* db = d + begin * eb;
    if (k == BucketKind::raw) {
      std::memcpy(db, p, len * eb);
    } else if (k == BucketKind::bitmask) {
      const std::byte* values = p + align8((len + 31) / 32 * 4);
      std::uint64_t v = 0;
      for (std::uint64_t w = 0; w < (len + 31) / 32; ++w) {
        std::uint32_t word;
        std::memcpy(&word, p + w * 4, 4);
        while (word != 0) {
          const std::uint64_t i = w * 32 + static_cast<std::uint64_t>(__builtin_ctz(word));
          word &= word - 1;
          if (i >= len) break;
          std::memcpy(db + i * eb, values + v++ * eb, eb);
        }
      }
    } else {
      const std::byte* values = p + align8(std::uint64_t{e.count} * 2);
      for (std::uint64_t v = 0; v < e.count; ++v) {
        std::uint16_t off;
        std::memcpy(&off, p + v * 2, 2);
        std::memcpy(db + std::uint64_t{off} * eb, values + v * eb, eb);
      }
    }
  }
}

}  // namespace weightsync::delta
