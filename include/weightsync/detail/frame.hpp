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
//! list (MetadataBody), before the lists themselves (see metadata_wire).
enum class FrameKind : std::uint16_t { handshake = 1, status = 2, ack = 3, metadata = 4 };
enum class FrameCode : std::uint16_t { ok = 0, failed = 1, mismatch = 2 };
enum class Role : std::uint8_t { producer = 1, consumer = 2 };

//! Bits of FrameHeader::flags.
//! kFrameEager (the producer's handshake frame): this transfer's bytes are in the producer's eager
//! bytes of the handshake, and no data phase follows.
inline constexpr std::uint8_t kFrameEager = 1;

//! The header every frame begins with. Its first 16 bytes are laid out as in every earlier
//! protocol version, so that a peer of another version is recognised as such (check_frames).
struct FrameHeader {
  std::uint32_t magic = kFrameMagic;
  std::uint16_t version = kProtocolVersion;
  std::uint16_t kind = 0;  //!< FrameKind
  std::uint16_t code = 0;  //!< FrameCode
  std::uint8_t role = 0;   //!< Role
  std::uint8_t flags = 0;  //!< kFrameEager
  std::int32_t rank = -1;
  std::uint64_t transfer_id = 0;
};
static_assert(sizeof(FrameHeader) == 24 && offsetof(FrameHeader, rank) == 12);
inline constexpr std::size_t kFrameBodyBytes = kFrameBytes - sizeof(FrameHeader);

//! What every rank of a transfer must agree on, compared in the handshake. Derived from the
//! options and the plan by agreement() only; every field is compared by visit_agreement(), and a
//! static_assert there fails the build when a field is added here but not there.
struct Agreement {
  std::uint64_t buffer_size_bytes;       //!< TransferOptions (B); compared when both pack
  std::uint64_t direct_threshold_bytes;  //!< TransferOptions, full width
  std::uint64_t split_min_region_bytes;  //!< TransferOptions, full width
  std::uint64_t num_tensors;
  std::uint64_t total_bytes;
  std::uint64_t metadata_digest;  //!< metadata_digest of names, dtypes, shapes
  std::uint64_t pieces_digest;    //!< sharded: the resolved pieces (PiecePlan::digest); else 0
  std::uint32_t num_buffers;      //!< TransferOptions (K)
  std::int32_t trainers;          //!< 0: one root sends whole tensors; M: ranks 0..M-1 shard
  std::uint8_t packed;
  std::uint8_t acknowledge;  //!< Acknowledge
  std::uint8_t checksum;
  std::uint8_t reserved[5];
  bool operator==(const Agreement&) const = default;
};
static_assert(sizeof(Agreement) == 72 && std::is_trivial_v<Agreement>);

//! FrameKind::handshake: this rank's view of the transfer, and (code failed) its failure of an
//! earlier transfer that no other rank has seen yet.
struct HandshakeBody {
  Agreement agreed;
  char failure[kFrameBodyBytes - sizeof(Agreement)];
};
//! FrameKind::status: one chunk (or sharded step) of a root; code failed: the root failed, and the
//! chunk's bytes are junk.
struct StatusBody {
  std::uint64_t chunk;
  //! The chunk digest (detail/digest.hpp) of the root's pieces of the chunk
  //! (TransferOptions::checksum; written on the root's device before the frame is sent).
  std::uint64_t checksum;
  char message[kFrameBodyBytes - 16];
};
//! FrameKind::ack: a rank's outcome of a transfer (code ok or failed / mismatch, with why).
struct AckBody {
  std::uint64_t message_bytes;  //!< the whole message's length (it may follow the frame)
  char message[kFrameBodyBytes - 8];
};
//! FrameKind::metadata: the size of this rank's metadata list (metadata_wire), sent next.
struct MetadataBody {
  std::uint64_t list_bytes;
  std::uint64_t num_tensors;
};
// The bodies are trivial (a Frame zeroes its whole body): value-initialise one made on its own.
static_assert(sizeof(HandshakeBody) == kFrameBodyBytes && sizeof(StatusBody) == kFrameBodyBytes &&
              sizeof(AckBody) == kFrameBodyBytes && sizeof(MetadataBody) <= kFrameBodyBytes);

//! A fixed 256-byte frame: the header, then the body of its kind.
struct Frame {
  FrameHeader head;
  union {
    std::byte raw[kFrameBodyBytes] = {};
    HandshakeBody handshake;
    StatusBody status;
    AckBody ack;
    MetadataBody metadata;
  };

  Frame() = default;
  Frame(FrameKind kind, Role role, int rank, std::uint64_t transfer_id = 0) {
    head.kind = static_cast<std::uint16_t>(kind);
    head.role = static_cast<std::uint8_t>(role);
    head.rank = rank;
    head.transfer_id = transfer_id;
  }
  FrameKind kind() const { return static_cast<FrameKind>(head.kind); }
  bool ok() const { return head.code == static_cast<std::uint16_t>(FrameCode::ok); }
  //! The body's text field of `f`'s kind (empty for a kind without one).
  template <class Self>
  static auto text_area(Self& f) {
    using Char = std::conditional_t<std::is_const_v<Self>, const char, char>;
    switch (f.kind()) {
      case FrameKind::handshake: return std::span<Char>(f.handshake.failure);
      case FrameKind::status: return std::span<Char>(f.status.message);
      case FrameKind::ack: return std::span<Char>(f.ack.message);
      case FrameKind::metadata: break;
    }
    return std::span<Char>();
  }
  //! Marks the frame failed (or mismatched) with `why` in its body's text ("" of a kind without).
  void fail(FrameCode code, std::string_view why) {
    head.code = static_cast<std::uint16_t>(code);
    if (const auto t = text_area(*this); !t.empty()) {
      const std::size_t n = std::min(why.size(), t.size() - 1);
      std::memcpy(t.data(), why.data(), n);
      t[n] = '\0';
    }
  }
  //! The text the body of its kind carries ("" for none).
  std::string text() const {
    const auto t = text_area(*this);
    return t.empty() ? std::string() : std::string(t.data(), strnlen(t.data(), t.size()));
  }
};
static_assert(sizeof(Frame) == kFrameBytes && offsetof(Frame, raw) == sizeof(FrameHeader));
static_assert(std::is_trivially_copyable_v<Frame>);

//! How visit_agreement's caller reports a field that differs.
enum class Shown : std::uint8_t {
  number,        //!< as a number
  if_packed,     //!< as a number, compared only when both sides pack (vLLM ignores B unpacked)
  boolean,       //!< true / false
  on_off,        //!< on / off
  acknowledge,   //!< next_transfer / each_transfer
  metadata,      //!< a digest of the metadata (then the first differing tensor is looked for)
  pieces,        //!< a digest of the shard pieces
  trainers,      //!< the sharding itself: reported before every other field
};

//! Calls `f(name, a_field, b_field, Shown)` for every field of Agreement (but `reserved`), in the
//! order a mismatch is reported. The static_assert below fails the build when Agreement gains a
//! field that is not visited here, so a new agreed setting cannot be left out of the comparison.
template <class F>
constexpr void visit_agreement(const Agreement& a, const Agreement& b, F&& f) {
  f("trainers", a.trainers, b.trainers, Shown::trainers);
  f("packed", a.packed, b.packed, Shown::boolean);
  f("acknowledge", a.acknowledge, b.acknowledge, Shown::acknowledge);
  f("checksum", a.checksum, b.checksum, Shown::on_off);
  f("packed_buffer_size_bytes", a.buffer_size_bytes, b.buffer_size_bytes, Shown::if_packed);
  f("packed_num_buffers", a.num_buffers, b.num_buffers, Shown::number);
  f("direct_threshold_bytes", a.direct_threshold_bytes, b.direct_threshold_bytes, Shown::number);
  f("split_min_region_bytes", a.split_min_region_bytes, b.split_min_region_bytes, Shown::number);
  f("tensor count", a.num_tensors, b.num_tensors, Shown::number);
  f("total bytes", a.total_bytes, b.total_bytes, Shown::number);
  f("metadata", a.metadata_digest, b.metadata_digest, Shown::metadata);
  f("shard pieces", a.pieces_digest, b.pieces_digest, Shown::pieces);
}
constexpr std::size_t visited_agreement_bytes() {
  std::size_t n = 0;
  visit_agreement(Agreement{}, Agreement{},
                  [&](const char*, const auto& x, const auto&, Shown) { n += sizeof(x); });
  return n;
}
static_assert(visited_agreement_bytes() + sizeof(Agreement::reserved) == sizeof(Agreement),
              "a field of Agreement is not compared: add it to visit_agreement()");

//! The eager protocol (as MPI's eager sends): each rank's handshake block is its frame followed by
//! eager bytes, the same size on every rank, so ranks that disagree about the root still run the
//! same operation and learn of the disagreement from the frames. A transfer whose bytes fit there
//! travels inside the handshake: one exchange per sync instead of two. The eager bytes of all
//! ranks together are bounded by kHandshakeEagerTotal (a large group pays no more per handshake),
//! and a block by kHandshakeBlockMax: with 2 ranks, a transfer of up to 4 KiB is eager.
inline constexpr std::size_t kHandshakeEagerTotal = std::size_t{16} << 10;
//! A block's largest size: a frame and 4 KiB. NCCL's all-gather costs a small message's latency
//! up to about this size a rank, and much more above it: over its socket transport (two ranks
//! sharing an H200 under MPS, run 84), 29-35 us for 256 to 4352 bytes a rank, 52-62 us for 8192.
inline constexpr std::size_t kHandshakeBlockMax = kFrameBytes + 4096;
inline constexpr std::size_t handshake_block_bytes(std::size_t world) {
  const std::size_t share = world == 0 ? 0 : kHandshakeEagerTotal / world / kFrameBytes * kFrameBytes;
  return share > kHandshakeBlockMax ? kHandshakeBlockMax : share > kFrameBytes ? share : kFrameBytes;
}
inline constexpr std::size_t eager_capacity(std::size_t world) {
  return handshake_block_bytes(world) - kFrameBytes;
}
static_assert(eager_capacity(2) == 4096 && eager_capacity(4) == 3840 && eager_capacity(64) == 0 &&
              eager_capacity(1000) == 0);

//! Wide blocks (protocol 8). A sync of more than eager_capacity bytes costs two exchanges (the
//! handshake, then the data), and larger blocks for every rank would cost every small sync more
//! (an all-gather of 33 KiB a rank takes about two broadcasts of it over NCCL's socket transport,
//! run 105). So only the roots' blocks grow, and only where the last handshake agreed on a sync
//! whose every root's bytes fit a wide block and not a base one (most syncs repeat the last one):
//! every rank decides that from the frames every rank saw and keeps it in its communicator
//! (WireState, concepts.hpp). A wide block holds a frame and 32 KiB; all wide blocks together
//! hold at most kHandshakeWideTotal of eager bytes (at most 4 roots).
inline constexpr std::size_t kWideEagerBytes = std::size_t{32} << 10;
inline constexpr std::size_t kHandshakeWideBlock = kFrameBytes + kWideEagerBytes;
inline constexpr std::size_t kHandshakeWideTotal = std::size_t{128} << 10;
inline constexpr std::size_t kMaxWideBlocks = kHandshakeWideTotal / kWideEagerBytes;

//! Where each rank's block lies in a handshake's area: every rank's is `base` bytes, but ranks
//! first .. first + count - 1 have wide ones (kHandshakeWideBlock). Every rank computes the same
//! layout (from the same WireState), so ranks that disagree about the root still run the same
//! operation and learn of it from the frames.
struct HandshakeLayout {
  std::size_t world = 0;
  std::size_t base = 0;
  std::size_t first = 0;
  std::size_t count = 0;

  //! The layout for `world` ranks with `wide_count` wide blocks from rank `wide_first` (none when
  //! that range is empty, too many, or outside the group).
  static constexpr HandshakeLayout of(std::size_t world, int wide_first, int wide_count) {
    HandshakeLayout l{world, handshake_block_bytes(world), 0, 0};
    if (wide_first >= 0 && wide_count > 0 &&
        static_cast<std::size_t>(wide_count) <= kMaxWideBlocks &&
        static_cast<std::size_t>(wide_first) + static_cast<std::size_t>(wide_count) <= world &&
        kHandshakeWideBlock > l.base) {
      l.first = static_cast<std::size_t>(wide_first);
      l.count = static_cast<std::size_t>(wide_count);
    }
    return l;
  }
  //! Every rank's block of `bytes` bytes (the frames' all-gather).
  static constexpr HandshakeLayout uniform(std::size_t world, std::size_t bytes) {
    return HandshakeLayout{world, bytes, 0, 0};
  }
  constexpr bool wide(std::size_t r) const { return r >= first && r < first + count; }
  constexpr std::size_t bytes(std::size_t r) const { return wide(r) ? kHandshakeWideBlock : base; }
  constexpr std::size_t offset(std::size_t r) const {
    const std::size_t wide_before = r <= first ? 0 : (r - first < count ? r - first : count);
    return r * base + wide_before * (kHandshakeWideBlock - base);
  }
  constexpr std::size_t total() const { return offset(world); }
  //! The eager bytes rank r can send.
  constexpr std::size_t capacity(std::size_t r) const { return bytes(r) - kFrameBytes; }
  //! The largest area any layout of `world` ranks needs.
  static constexpr std::size_t largest(std::size_t world) {
    const std::size_t n = world < kMaxWideBlocks ? world : kMaxWideBlocks;
    const std::size_t base = handshake_block_bytes(world);
    return world * base + (kHandshakeWideBlock > base ? n * (kHandshakeWideBlock - base) : 0);
  }
};
static_assert(HandshakeLayout::of(2, 0, 1).offset(1) == kHandshakeWideBlock &&
              HandshakeLayout::of(2, 0, 1).total() == kHandshakeWideBlock + kFrameBytes + 4096 &&
              HandshakeLayout::of(3, 1, 1).offset(1) == kFrameBytes + 4096 &&
              HandshakeLayout::of(3, 1, 1).offset(2) == kFrameBytes + 4096 + kHandshakeWideBlock &&
              HandshakeLayout::of(2, 1, 2).count == 0 && HandshakeLayout::of(8, 0, 5).count == 0 &&
              HandshakeLayout::of(2, 0, 0).total() == 2 * (kFrameBytes + 4096));

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

//! A metadata list's digest (metadata_digest) and byte count (the sum of its nbytes()).
struct MetadataSummary {
  std::uint64_t digest = 0;
  std::uint64_t bytes = 0;
};

//! metadata_digest of the last metadata it was asked about, kept with a copy of that metadata: a
//! sync whose metadata did not change (the usual case) pays a comparison, about half the cost of
//! the hash (504 tensors, cold caches: 8.5 against 16 us on this project's CI machine). A
//! SealedMetadata needs neither (weightsync/sealed_metadata.hpp).
class MetadataDigestCache {
 public:
  std::uint64_t operator()(std::span<const TensorMeta> metas) { return of(metas).digest; }
  MetadataSummary of(std::span<const TensorMeta> metas) {
    if (valid_ && std::equal(metas.begin(), metas.end(), last_.begin(), last_.end()))
      return summary_;
    valid_ = false;  // (nbytes() throws on an invalid shape: nothing is kept then)
    MetadataSummary s{metadata_digest(metas), 0};
    for (const auto& m : metas) s.bytes += m.nbytes();
    last_.assign(metas.begin(), metas.end());
    summary_ = s;
    valid_ = true;
    return summary_;
  }

 private:
  std::vector<TensorMeta> last_;
  MetadataSummary summary_;
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
