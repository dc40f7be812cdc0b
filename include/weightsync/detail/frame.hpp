// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The fixed 256-byte frame of this library's wire (handshake, per-chunk status, acknowledgement),
//! the metadata digest both sides compare, and the check of a source tensor against what was
//! declared. Shared by every transport.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "weightsync/detail/format.hpp"
#include "weightsync/detail/hash.hpp"
#include "weightsync/detail/wire.hpp"
#include "weightsync/dtype.hpp"
#include "weightsync/error.hpp"
#include "weightsync/tensor_meta.hpp"

namespace weightsync::detail {

inline constexpr std::uint32_t kFrameMagic = 0x46535357u;  // "WSSF"
inline constexpr std::size_t kFrameBytes = 256;
//! metadata: after a handshake whose metadata digests differ, each rank's size of its metadata
//! list (`total_bytes`, `num_tensors`), before the lists themselves (see metadata_wire).
enum class FrameKind : std::uint16_t { handshake = 1, status = 2, ack = 3, metadata = 4 };
enum class FrameCode : std::uint16_t { ok = 0, failed = 1, mismatch = 2 };
enum class Role : std::uint8_t { producer = 1, consumer = 2 };

//! The fixed-size frame of the handshake, the status and the acknowledgement.
struct Frame {
  std::uint32_t magic = kFrameMagic;
  std::uint16_t version = kProtocolVersion;
  std::uint16_t kind = 0;
  std::uint16_t code = 0;
  std::uint8_t role = 0;
  std::uint8_t packed = 0;
  std::int32_t rank = -1;
  std::uint64_t transfer_id = 0;
  std::uint64_t chunk = 0;
  std::uint64_t tensor = 0;
  std::uint64_t buffer_size = 0;
  std::uint32_t num_buffers = 0;
  std::uint32_t chunk_rule = 0;
  std::uint64_t num_tensors = 0;
  std::uint64_t total_bytes = 0;
  std::uint64_t digest = 0;
  char message[kFrameBytes - 80] = {};

  void set_message(std::string_view m) {
    const std::size_t n = std::min(m.size(), sizeof message - 1);
    std::memcpy(message, m.data(), n);
    message[n] = '\0';
  }
  std::string text() const { return std::string(message, strnlen(message, sizeof message)); }
  bool ok() const { return code == static_cast<std::uint16_t>(FrameCode::ok); }
};
static_assert(sizeof(Frame) == kFrameBytes);
static_assert(std::is_trivially_copyable_v<Frame>);

//! The eager protocol (as MPI's eager sends): each rank's handshake block is its frame followed by
//! eager bytes, the same size on every rank, so ranks that disagree about the root still run the
//! same operation and learn of the disagreement from the frames. A transfer whose bytes fit there
//! travels inside the handshake: one exchange per sync instead of two. The eager bytes of all
//! ranks together are bounded by kHandshakeEagerTotal (a large group pays no more per handshake);
//! with 2 ranks, a transfer of up to 7.75 KiB is eager.
inline constexpr std::size_t kHandshakeEagerTotal = std::size_t{16} << 10;
inline constexpr std::size_t handshake_block_bytes(std::size_t world) {
  const std::size_t share = world == 0 ? 0 : kHandshakeEagerTotal / world / kFrameBytes * kFrameBytes;
  return share > kFrameBytes ? share : kFrameBytes;
}
inline constexpr std::size_t eager_capacity(std::size_t world) {
  return handshake_block_bytes(world) - kFrameBytes;
}
static_assert(eager_capacity(2) == 7936 && eager_capacity(64) == 0 && eager_capacity(1000) == 0);

//! Digest of the ordered metadata: names, dtypes, shapes (Hash64).
inline std::uint64_t metadata_digest(std::span<const TensorMeta> metas) {
  Hash64 h;
  h.u64(metas.size());
  for (const auto& m : metas) {
    h.str(m.name);
    h.u64(static_cast<std::uint64_t>(m.dtype));
    h.u64(m.shape.size());
    h.bytes(m.shape.data(), m.shape.size() * sizeof(std::int64_t));
  }
  return h.value();
}

//! metadata_digest of the last metadata it was asked about, kept with a copy of that metadata: a
//! sync whose metadata did not change (the usual case) pays a comparison, about half the cost of
//! the hash (504 tensors, cold caches: 8.5 against 16 us on this project's CI machine).
class MetadataDigestCache {
 public:
  std::uint64_t operator()(std::span<const TensorMeta> metas) {
    if (valid_ && std::equal(metas.begin(), metas.end(), last_.begin(), last_.end()))
      return digest_;
    digest_ = metadata_digest(metas);
    last_.assign(metas.begin(), metas.end());
    valid_ = true;
    return digest_;
  }

 private:
  std::vector<TensorMeta> last_;
  std::uint64_t digest_ = 0;
  bool valid_ = false;
};

//! The metadata list on the wire, exchanged only to say which tensor differs when the digests
//! differ: per tensor a u16 name length, the name (at most kMetadataWireMaxName bytes), a u8
//! dtype, a u8 rank, then the dims as i64 (little-endian host order, as every frame). At most
//! kMetadataWireMaxBytes: a longer list is cut after the last whole tensor (the comparison then
//! covers that prefix).
inline constexpr std::size_t kMetadataWireMaxBytes = std::size_t{1} << 20;
inline constexpr std::size_t kMetadataWireMaxName = 1024;

inline std::string metadata_wire(std::span<const TensorMeta> metas, std::size_t& count) {
  std::string out;
  count = 0;
  for (const auto& m : metas) {
    const std::size_t name_len = std::min(m.name.size(), kMetadataWireMaxName);
    const std::size_t ndim = std::min<std::size_t>(m.shape.size(), 255);
    const std::size_t need = 2 + name_len + 2 + ndim * sizeof(std::int64_t);
    if (out.size() + need > kMetadataWireMaxBytes) break;
    const auto n16 = static_cast<std::uint16_t>(name_len);
    out.append(reinterpret_cast<const char*>(&n16), 2);
    out.append(m.name.data(), name_len);
    out.push_back(static_cast<char>(m.dtype));
    out.push_back(static_cast<char>(ndim));
    if (ndim > 0)
      out.append(reinterpret_cast<const char*>(m.shape.data()), ndim * sizeof(std::int64_t));
    ++count;
  }
  return out;
}

//! One tensor of a metadata list read back from the wire (the dtype as its raw code: a peer may
//! send one this build does not know).
struct WireMeta {
  std::string name;
  std::uint8_t dtype = 0;
  std::vector<std::int64_t> shape;
  bool operator==(const WireMeta&) const = default;
};

//! Parses metadata_wire's bytes; stops at the first malformed entry (a peer's bytes are untrusted).
inline std::vector<WireMeta> parse_metadata_wire(std::string_view b) {
  std::vector<WireMeta> out;
  std::size_t at = 0;
  while (at + 2 <= b.size()) {
    std::uint16_t n = 0;
    std::memcpy(&n, b.data() + at, 2);
    at += 2;
    if (n > kMetadataWireMaxName || at + n + 2 > b.size()) break;
    WireMeta w;
    w.name.assign(b.data() + at, n);
    at += n;
    w.dtype = static_cast<std::uint8_t>(b[at]);
    const std::size_t ndim = static_cast<std::uint8_t>(b[at + 1]);
    at += 2;
    if (at + ndim * sizeof(std::int64_t) > b.size()) break;
    w.shape.resize(ndim);
    if (ndim > 0)  // (a 0-dim tensor's empty vector has no data(): no memcpy from/to null)
      std::memcpy(w.shape.data(), b.data() + at, ndim * sizeof(std::int64_t));
    at += ndim * sizeof(std::int64_t);
    out.push_back(std::move(w));
  }
  return out;
}

inline std::string describe_wire_meta(const WireMeta& m) {
  const bool known = m.dtype <= static_cast<std::uint8_t>(DType::float8_e5m2);
  return cat("'", m.name, "' ",
             known ? std::string(dtype_name(static_cast<DType>(m.dtype)))
                   : cat("dtype#", static_cast<int>(m.dtype)),
             " ", shape_string(m.shape));
}

//! The first tensor at which rank `r`'s list differs from rank `ref`'s ("" when the lists agree as
//! far as both were sent). `total_ref` / `total_r`: the tensor counts each rank declared.
inline std::string first_metadata_difference(const std::vector<WireMeta>& want,
                                             std::size_t total_ref, int ref,
                                             const std::vector<WireMeta>& got, std::size_t total_r,
                                             int r) {
  const std::size_t n = std::min(want.size(), got.size());
  for (std::size_t i = 0; i < n; ++i)
    if (!(want[i] == got[i]))
      return cat("first differing tensor: index ", i, ": rank ", ref, " has ",
                 describe_wire_meta(want[i]), ", rank ", r, " has ", describe_wire_meta(got[i]));
  if (total_ref != total_r) {
    if (want.size() > n)
      return cat("first differing tensor: index ", n, ": rank ", ref, " has ",
                 describe_wire_meta(want[n]), ", rank ", r, " has no tensor there (", total_r,
                 " tensors)");
    if (got.size() > n)
      return cat("first differing tensor: index ", n, ": rank ", ref, " has no tensor there (",
                 total_ref, " tensors), rank ", r, " has ", describe_wire_meta(got[n]));
  }
  return "";
}

inline std::string describe_item_mismatch(const TensorMeta& want, const TensorMeta& got,
                                          std::size_t index) {
  std::string d;
  if (got.name != want.name) d += cat("name '", got.name, "' where '", want.name, "' was declared");
  if (got.dtype != want.dtype)
    d += cat(d.empty() ? "" : ", ", "dtype ", dtype_name(got.dtype), " where ",
             dtype_name(want.dtype), " was declared");
  if (got.shape != want.shape)
    d += cat(d.empty() ? "" : ", ", "shape ", shape_string(got.shape), " where ",
             shape_string(want.shape), " was declared");
  return cat("item ", index, " ('", want.name, "') does not match the declared metadata: ", d);
}

//! Checks one source tensor against its declared metadata and returns its bytes.
//! @throws config_error("items", ...) naming the item and what differs, or a missing pointer.
template <class Item>
const void* checked_source(const Item& item, const TensorMeta& want, std::size_t index) {
  const TensorMeta& got = item.meta();
  // An item that points at the declared metadata itself (the usual SourceTensorRef) matches it.
  if (&got != &want &&
      !(got.name == want.name && got.dtype == want.dtype && got.shape == want.shape))
    throw config_error("items", describe_item_mismatch(want, got, index));
  const void* p = item.data();
  if (p == nullptr && want.nbytes() > 0)
    throw config_error("items", cat("item ", index, " ('", want.name, "') has no data"));
  return p;
}

inline config_error too_few_items(std::size_t got, std::size_t declared) {
  return config_error(
      "items", cat("the iterator ended after ", got, " tensors; ", declared, " were declared"));
}
inline config_error too_many_items(std::size_t declared) {
  return config_error("items",
                      cat("the iterator yields more than the ", declared, " tensors declared"));
}

}  // namespace weightsync::detail
