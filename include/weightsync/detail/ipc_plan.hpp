// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! The IPC transports' plan (what a producer sends its consumers before every transfer) and its
//! wire format, host-only (no CUDA headers) so that it can be tested and fuzzed without CUDA.
//! The decoder bounds every length and count by what the message can hold.

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "weightsync/detail/format.hpp"
#include "weightsync/detail/wire.hpp"
#include "weightsync/error.hpp"

namespace weightsync::detail {

inline constexpr std::uint32_t kIpcPlanMagic = 0x50495357u;  // "WSIP"
//! sizeof(cudaIpcMemHandle_t) (checked where CUDA is included).
inline constexpr std::size_t kIpcHandleBytes = 64;

enum class IpcWhere : std::uint8_t { empty = 0, region = 1, staged = 2 };
enum class IpcStatus : std::uint8_t { ok = 0, protocol = 1, failed = 2 };

//! The plan the producer sends before every transfer.
struct IpcPlan {
  std::uint8_t same_gpu = 1;
  std::string boot_id, host;
  std::array<char, 16> uuid{};
  std::int32_t pid = 0;
  std::uint64_t digest = 0, num_tensors = 0, total_bytes = 0;
  std::string error;  //!< the producer's items were wrong: nothing else follows
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
    p.error = r.str(1 << 16);
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

}  // namespace weightsync::detail
