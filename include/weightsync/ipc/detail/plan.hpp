// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The IPC transports' plan message (host code, no CUDA): which allocations the producer exports,
//! and where every tensor lies (in an allocation, or in a staging slot of a chunk). The decoder
//! bounds every count by the bytes that can hold it before allocating, and every string by a
//! fixed length: a truncated or corrupt plan is a protocol_error, never a crash.

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "weightsync/detail/format.hpp"
#include "weightsync/detail/hash.hpp"
#include "weightsync/detail/wire.hpp"
#include "weightsync/error.hpp"
#include "weightsync/tensor_meta.hpp"
#include "weightsync/tuning.hpp"

namespace weightsync::detail {

inline constexpr std::uint32_t kIpcPlanMagic = 0x50495357u;  // "WSIP"
//! sizeof(cudaIpcMemHandle_t); checked where CUDA is included.
inline constexpr std::size_t kIpcHandleBytes = 64;

enum class IpcWhere : std::uint8_t { empty = 0, region = 1, staged = 2 };

//! Bits of IpcPlan::flags: what follows the pulls, which both sides must do alike.
//! kIpcPlanChecksum: the producer sends a digest per tensor (TransferOptions::checksum) after the
//! pulls, and each consumer compares before its outcome. kIpcPlanVote: after the outcomes, the
//! producer sends every consumer the verdict (the first failed consumer), so that consumers with
//! all_or_nothing fail together (the producer's Acknowledge::each_transfer).
inline constexpr std::uint8_t kIpcPlanChecksum = 1;
inline constexpr std::uint8_t kIpcPlanVote = 2;

//! The plan the producer sends before every transfer.
struct IpcPlan {
  std::uint8_t same_gpu = 1;
  std::string boot_id, host;
  std::array<char, 16> uuid{};
  std::int32_t pid = 0;
  std::uint64_t digest = 0, num_tensors = 0, total_bytes = 0;
  std::string error;  //!< the producer's items were wrong: nothing else follows
  //! The producer sends at most this many bytes of `error` (a consumer reads up to kErrorLimit).
  static constexpr std::size_t kErrorBytes = 4000;
  static constexpr std::size_t kErrorLimit = std::size_t{1} << 16;
  std::uint8_t flags = 0;  //!< kIpcPlanChecksum, kIpcPlanVote
  struct Region {
    std::uint64_t buffer_id = 0;
    std::string handle;  // kIpcHandleBytes
    std::uint64_t size = 0;
  };
  std::vector<Region> regions;
  std::uint64_t slot_region = ~0ull;  //!< index into regions of the slot ring, or ~0
  std::uint64_t slot_stride = 0;
  std::uint32_t num_slots = 0;
  std::uint64_t num_chunks = 0;
  struct Place {
    IpcWhere where = IpcWhere::empty;
    std::uint64_t index = 0;   //!< region index, or chunk index when staged
    std::uint64_t offset = 0;  //!< within the region, or within the chunk's slot
  };
  std::vector<Place> places;

  std::string encode() const {
    Writer w;
    w.u32(kIpcPlanMagic);
    w.u16(kProtocolVersion);
    w.u8(same_gpu);
    w.str(boot_id);
    w.str(host);
    w.str(std::string_view(uuid.data(), uuid.size()));
    w.i32(pid);
    w.u64(digest);
    w.u64(num_tensors);
    w.u64(total_bytes);
    w.str(error);
    w.u8(flags);
    w.u64(regions.size());
    for (const auto& r : regions) {
      w.u64(r.buffer_id);
      w.str(r.handle);
      w.u64(r.size);
    }
    w.u64(slot_region);
    w.u64(slot_stride);
    w.u32(num_slots);
    w.u64(num_chunks);
    w.u64(places.size());
    for (const auto& p : places) {
      w.u8(static_cast<std::uint8_t>(p.where));
      w.u64(p.index);
      w.u64(p.offset);
    }
    return w.bytes();
  }

  static IpcPlan decode(std::string_view data) {
    Reader r(data, 0, "ipc plan");
    IpcPlan p;
    if (r.u32() != kIpcPlanMagic)
      throw protocol_error(0, "ipc plan: wrong magic (not an IPC producer?)");
    if (const auto v = r.u16(); v != kProtocolVersion)
      throw protocol_error(
          0, cat("ipc plan: protocol version ", v, ", this side speaks ", kProtocolVersion));
    p.same_gpu = r.u8();
    p.boot_id = r.str(256);
    p.host = r.str(256);
    const std::string u = r.str(16);
    if (u.size() != 16) throw protocol_error(0, "ipc plan: bad GPU UUID");
    std::memcpy(p.uuid.data(), u.data(), 16);
    p.pid = r.i32();
    p.digest = r.u64();
    p.num_tensors = r.u64();
    p.total_bytes = r.u64();
    p.error = r.str(kErrorLimit);
    p.flags = r.u8();
    // A bit this side does not know would announce a step it would not take: refuse it at once
    // rather than let the control channel go out of step.
    if (const unsigned unknown = p.flags & ~unsigned{kIpcPlanChecksum | kIpcPlanVote})
      throw protocol_error(0, cat("ipc plan: unknown flags 0x", detail::hex(unknown, 2), " in 0x",
                                  detail::hex(p.flags, 2), " (a newer peer?)"));
    const auto nr = r.u64();
    // Each region takes at least 84 bytes on the wire, each placement 17: a count the message
    // cannot hold is refused before anything is allocated for it.
    if (nr > (1u << 20) || nr > r.remaining() / 84)
      throw protocol_error(
          0, cat("ipc plan: ", nr, " regions announced in ", r.remaining(), " bytes"));
    p.regions.resize(nr);
    for (auto& reg : p.regions) {
      reg.buffer_id = r.u64();
      reg.handle = r.str(kIpcHandleBytes);
      if (reg.handle.size() != kIpcHandleBytes) throw protocol_error(0, "ipc plan: bad handle");
      reg.size = r.u64();
    }
    p.slot_region = r.u64();
    p.slot_stride = r.u64();
    p.num_slots = r.u32();
    p.num_chunks = r.u64();
    const auto np = r.u64();
    if (np > (1u << 26) || np > r.remaining() / 17)
      throw protocol_error(
          0, cat("ipc plan: ", np, " placements announced in ", r.remaining(), " bytes"));
    p.places.resize(np);
    for (auto& pl : p.places) {
      pl.where = static_cast<IpcWhere>(r.u8());
      pl.index = r.u64();
      pl.offset = r.u64();
    }
    r.expect_done();
    return p;
  }
};

//! Checks every placement of `plan` against the consumer's tensors and what it mapped (region
//! sizes already clamped to the mappings): no read can leave the producer's memory, whatever the
//! plan claims. @returns the number of staged tensors. @throws protocol_error naming the tensor.
inline std::size_t check_places(const IpcPlan& plan, std::span<const TensorMeta> metas) {
  std::size_t staged = 0;
  if (plan.places.size() != metas.size())
    throw protocol_error(
        0, cat("ipc plan: ", plan.places.size(), " placements for ", metas.size(), " tensors"));
  if (plan.num_chunks > 0 && (plan.num_slots < 1 || plan.num_slots > kMaxPackedNumBuffers))
    throw protocol_error(0, cat("ipc plan: ", plan.num_slots, " slots"));
  for (std::size_t i = 0; i < metas.size(); ++i) {
    const auto& pl = plan.places[i];
    const std::size_t nb = metas[i].nbytes();
    bool ok = true;
    if (pl.where == IpcWhere::empty)
      ok = nb == 0;
    else if (pl.where == IpcWhere::region)  // written so that nothing can wrap around
      ok = pl.index < plan.regions.size() && pl.offset <= plan.regions[pl.index].size &&
           nb <= plan.regions[pl.index].size - pl.offset;
    else if (pl.where == IpcWhere::staged) {
      ok = plan.slot_region < plan.regions.size() && pl.index < plan.num_chunks &&
           plan.num_slots >= 1 &&
           plan.slot_stride <= plan.regions[plan.slot_region].size / plan.num_slots &&
           pl.offset <= plan.slot_stride && nb <= plan.slot_stride - pl.offset;
      ++staged;
    } else
      ok = false;
    if (!ok)
      throw protocol_error(0, cat("ipc plan: tensor ", i, " ('", metas[i].name,
                                  "') is placed outside the producer's memory"));
  }
  return staged;
}

inline constexpr std::uint32_t kIpcSamePlanMagic = 0x53495357u;  // "WSIS"

//! Digest of a plan's bytes (the check behind "same plan as round N").
inline std::uint64_t plan_hash(std::string_view bytes) {
  return Hash64().bytes(bytes.data(), bytes.size()).value();
}

//! "Same plan as round N": sent instead of a plan that is byte for byte the last one.
struct SamePlan {
  std::uint64_t round = 0;
  std::uint64_t hash = 0;
};
inline std::string encode_same_plan(std::uint64_t round, std::uint64_t hash) {
  Writer w;
  w.u32(kIpcSamePlanMagic);
  w.u16(kProtocolVersion);
  w.u64(round);
  w.u64(hash);
  return w.bytes();
}
//! The message, if `data` is one (nullopt: a full plan, or garbage for IpcPlan::decode to refuse).
inline std::optional<SamePlan> decode_same_plan(std::string_view data) {
  if (data.size() < 4) return std::nullopt;
  Reader r(data, 0, "ipc same-plan message");
  if (r.u32() != kIpcSamePlanMagic) return std::nullopt;
  if (const auto v = r.u16(); v != kProtocolVersion)
    throw protocol_error(
        0, cat("ipc plan: protocol version ", v, ", this side speaks ", kProtocolVersion));
  SamePlan s;
  s.round = r.u64();
  s.hash = r.u64();
  r.expect_done();
  return s;
}

}  // namespace weightsync::detail
