// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The framed wire around the data (Protocol::weightsync), written once for every collective
//! transport: the frame all-gather, the handshake (every rank compares every rank's view of the
//! transfer before a byte of weights moves) and the acknowledgement (every rank learns every
//! rank's outcome).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <ios>
#include <random>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "weightsync/detail/format.hpp"
#include "weightsync/detail/frame.hpp"
#include "weightsync/detail/pipeline/run.hpp"
#include "weightsync/error.hpp"
#include "weightsync/host/device_policy.hpp"

namespace weightsync::detail {

//! Checks that `frames[r]` is rank r's weightsync frame; aborts and throws protocol_error if not.
template <class C>
void check_frames(PipelineRun<C>& run, const std::vector<Frame>& frames, const std::string& phase) {
  for (std::size_t r = 0; r < frames.size(); ++r)
    if (frames[r].magic != kFrameMagic || frames[r].rank != static_cast<std::int32_t>(r)) {
      run.abort_comm(phase + ": a peer sent garbage");
      throw protocol_error(static_cast<int>(r), cat(phase, ": rank ", r,
                                                    " sent no valid weightsync frame (is it a "
                                                    "weightsync peer of protocol ",
                                                    kProtocolVersion, "?)"));
    }
}

//! Every rank contributes one block of `block` bytes that begins with its frame `mine` (the rest
//! of its block, if any, it has written on the device already): an all-gather over `dev` (n
//! blocks, which stay on the device) mirrored into `host`. Returns the frames, indexed by rank.
template <class C>
std::vector<Frame> allgather_blocks(PipelineRun<C>& run, std::byte* dev, std::byte* host,
                                    std::size_t block, const Frame& mine,
                                    const std::string& phase) {
  const std::size_t n = run.world();
  const auto me = static_cast<std::size_t>(run.comm.rank());
  std::memcpy(host + me * block, &mine, kFrameBytes);
  run.ws.policy.copy_from_host(dev + me * block, host + me * block, kFrameBytes,
                               run.comm_stream());
  run.group([&] {
    for (std::size_t r = 0; r < n; ++r)
      run.comm.broadcast(dev + r * block, block, static_cast<int>(r), run.comm_stream());
  });
  run.ws.policy.copy_to_host(host, dev, n * block, run.comm_stream());
  run.drain(phase);
  std::vector<Frame> out(n);
  for (std::size_t r = 0; r < n; ++r) std::memcpy(&out[r], host + r * block, kFrameBytes);
  check_frames(run, out, phase);
  return out;
}

//! Every rank contributes `mine`; returns all frames, indexed by rank.
template <class C>
std::vector<Frame> allgather_frames(PipelineRun<C>& run, Frame mine, const std::string& phase) {
  return allgather_blocks(run, run.frame_dev(0), run.ws.frames_host.data(), kFrameBytes, mine,
                          phase);
}

//! The handshake's all-gather: every rank contributes one block of handshake_block_bytes (its
//! frame, then its eager bytes, which the producer may have written already: see
//! PipelineRun::eager_dev). The blocks stay on the device (the consumer reads the producer's
//! eager bytes there); returns the frames, indexed by rank.
template <class C>
std::vector<Frame> exchange_handshake(PipelineRun<C>& run, Frame mine) {
  const std::size_t block = handshake_block_bytes(run.world());
  run.ws.ensure_handshake(run.world() * block);
  return allgather_blocks(run, run.ws.handshake.data(), run.ws.handshake_host.data(), block, mine,
                          "handshake");
}

//! Bits of a handshake frame's `packed` field.
//! kEagerBit (the producer's frame only): this transfer's bytes are in the producer's eager bytes of
//! the handshake, and no data phase follows.
inline constexpr std::uint8_t kPackedBit = 1, kAckEachBit = 2, kChecksumBit = 4, kEagerBit = 8;

//! This rank's handshake frame: its role and its view of the transfer, and (code, message) its
//! failure of an earlier transfer that no other rank has seen yet.
template <class C>
Frame handshake_frame(PipelineRun<C>& run) {
  Frame f;
  f.kind = static_cast<std::uint16_t>(FrameKind::handshake);
  f.role = static_cast<std::uint8_t>(run.role);
  f.rank = run.comm.rank();
  f.packed = static_cast<std::uint8_t>(
      (run.opt.packed ? kPackedBit : 0) |
      (run.opt.acknowledge == Acknowledge::each_transfer ? kAckEachBit : 0) |
      (run.opt.checksum ? kChecksumBit : 0));
  if (!run.ws.pending_failure.empty()) {
    f.code = static_cast<std::uint16_t>(FrameCode::failed);
    f.set_message("\n" + run.ws.pending_failure);  // after the (empty) marker, see sharded_marker
  }
  f.buffer_size = run.opt.buffer_size_bytes;
  f.num_buffers = static_cast<std::uint32_t>(run.opt.num_buffers);
  f.chunk_rule = static_cast<std::uint32_t>(
      std::min<std::size_t>(run.opt.direct_threshold_bytes, 0xffffffffu));
  f.chunk = run.opt.split_min_region_bytes;  // the handshake frame carries the split threshold here
  f.num_tensors = run.metas.size();
  f.total_bytes = run.plan.total_bytes;
  f.digest = run.ws.digests(run.metas);
  if (run.role == Role::producer) {
    // Unique per transfer; no need for /dev/urandom on every call.
    static const std::uint64_t seed =
        (std::uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
    f.transfer_id = seed + 0x9e3779b97f4a7c15ull * ++run.ws.transfers;
  }
  return f;
}

//! What differs between the root's frame and the others' ("" when nothing); `first_bad` gets the
//! first rank at fault.
inline std::string handshake_differences(const std::vector<Frame>& all, int root, int& first_bad) {
  const Frame& r0 = all[static_cast<std::size_t>(root)];
  std::string diffs;
  first_bad = -1;
  auto note = [&](std::size_t r, const std::string& what) {
    if (first_bad < 0) first_bad = static_cast<int>(r);
    diffs += (diffs.empty() ? "" : "; ") + what;
  };
  auto diff = [&](std::size_t r, const char* field, auto root_value, auto value) {
    if (!(root_value == value))
      note(r,
           cat(field, " differs: rank ", root, " has ", root_value, ", rank ", r, " has ", value));
  };
  for (std::size_t r = 0; r < all.size(); ++r) {
    const Frame& x = all[r];
    const auto want = static_cast<int>(r) == root ? Role::producer : Role::consumer;
    if (x.role != static_cast<std::uint8_t>(want))
      note(r, cat("rank ", r, " runs as ", x.role == 1 ? "producer" : "consumer",
                  " but the root is rank ", root));
    if (static_cast<int>(r) == root) continue;
    diff(r, "protocol version", r0.version, x.version);
    const bool p0 = r0.packed & kPackedBit, px = x.packed & kPackedBit;
    diff(r, "packed", p0 ? "true" : "false", px ? "true" : "false");
    diff(r, "acknowledge", r0.packed & kAckEachBit ? "each_transfer" : "next_transfer",
         x.packed & kAckEachBit ? "each_transfer" : "next_transfer");
    diff(r, "checksum", r0.packed & kChecksumBit ? "on" : "off",
         x.packed & kChecksumBit ? "on" : "off");
    if (p0 && px) diff(r, "packed_buffer_size_bytes", r0.buffer_size, x.buffer_size);
    diff(r, "packed_num_buffers", r0.num_buffers, x.num_buffers);
    diff(r, "direct_threshold_bytes", r0.chunk_rule, x.chunk_rule);
    diff(r, "split_min_region_bytes", r0.chunk, x.chunk);
    diff(r, "tensor count", r0.num_tensors, x.num_tensors);
    diff(r, "total bytes", r0.total_bytes, x.total_bytes);
    if (r0.digest != x.digest)
      note(r, cat("metadata (names, dtypes, shapes) differs: rank ", root, " digest 0x", std::hex,
                  r0.digest, ", rank ", std::dec, r, " digest 0x", std::hex, x.digest));
  }
  return diffs;
}

//! The failures of earlier transfers that the handshake frames carry (code failed; the message
//! after its first line says what failed) ("" when none); `first` gets
//! the first rank that failed.
inline std::string earlier_failures(const std::vector<Frame>& all, int& first) {
  std::string out;
  first = -1;
  for (const auto& f : all) {
    if (f.ok()) continue;
    if (first < 0) first = f.rank;
    const std::string t = f.text();
    const auto nl = t.find('\n');
    out += cat(out.empty() ? "" : "; ", "rank ", f.rank,
               " failed an earlier transfer: ", nl == std::string::npos ? t : t.substr(nl + 1));
  }
  return out;
}

//! After a handshake in which some rank's metadata digest differs from rank `ref`'s (every rank
//! sees the same frames, so every rank runs this or none does): every rank sends its metadata list
//! (metadata_wire, at most kMetadataWireMaxBytes) to every other, and each rank names, for each
//! rank that differs, the first tensor that differs. Not run when a protocol version differs (an
//! older peer would not take part). Bounded by the transfer's timeout like every wait.
template <class C>
std::string metadata_differences(PipelineRun<C>& run, const std::vector<Frame>& all, int ref) {
  const std::size_t n = run.world();
  bool differ = false;
  for (const auto& f : all) {
    if (f.version != kProtocolVersion) return "";
    differ = differ || f.digest != all[static_cast<std::size_t>(ref)].digest;
  }
  if (!differ) return "";
  std::size_t count = 0;
  const std::string mine = metadata_wire(run.metas, count);
  Frame f;
  f.kind = static_cast<std::uint16_t>(FrameKind::metadata);
  f.role = static_cast<std::uint8_t>(run.role);
  f.rank = run.comm.rank();
  f.total_bytes = mine.size();
  f.num_tensors = count;
  const auto sizes = allgather_frames(run, f, "handshake (metadata lists)");
  std::vector<std::size_t> offset(n + 1, 0);
  for (std::size_t r = 0; r < n; ++r)
    offset[r + 1] = offset[r] + std::min<std::size_t>(sizes[r].total_bytes, kMetadataWireMaxBytes);
  if (offset[n] == 0) return "";
  auto dev = run.ws.policy.alloc(offset[n]);
  std::string host(offset[n], '\0');
  const auto me = static_cast<std::size_t>(run.comm.rank());
  std::byte* base = dev.data();
  if (!mine.empty())
    run.ws.policy.copy_from_host(base + offset[me], mine.data(), mine.size(), run.comm_stream());
  run.group([&] {
    for (std::size_t r = 0; r < n; ++r)
      if (offset[r + 1] > offset[r])
        run.comm.broadcast(base + offset[r], offset[r + 1] - offset[r], static_cast<int>(r),
                           run.comm_stream());
  });
  run.ws.policy.copy_to_host(host.data(), base, offset[n], run.comm_stream());
  run.drain("handshake (metadata lists)");
  const auto list = [&](std::size_t r) {
    return parse_metadata_wire(std::string_view(host).substr(offset[r], offset[r + 1] - offset[r]));
  };
  const auto want = list(static_cast<std::size_t>(ref));
  std::string out;
  for (std::size_t r = 0; r < n; ++r) {
    if (static_cast<int>(r) == ref || all[r].digest == all[static_cast<std::size_t>(ref)].digest)
      continue;
    const std::string d =
        first_metadata_difference(want, all[static_cast<std::size_t>(ref)].num_tensors, ref,
                                  list(r), all[r].num_tensors, static_cast<int>(r));
    if (!d.empty()) out += (out.empty() ? "" : "; ") + d;
  }
  return out;
}

//! Compares every rank's view of the transfer, and settles the earlier transfers: every rank sees
//! the same frames, so every rank throws the same error or none (the communicator stays usable).
//! @throws protocol_error when the views differ; remote_error when a rank reports that an earlier
//!   transfer failed there (Acknowledge::next_transfer), before any byte of this one moves.
//! @returns the transfer id chosen by rank `id_from`.
template <class C, class Differences>
std::uint64_t handshake(PipelineRun<C>& run, Frame mine, int id_from, Differences&& differences) {
  run.eager = false;
  const auto all = exchange_handshake(run, mine);
  run.ws.pending_failure.clear();  // every rank has seen it now
  int first_bad = -1, first_failed = -1;
  std::string diffs = differences(all, first_bad);
  const std::string failed = earlier_failures(all, first_failed);
  if (const std::string which = metadata_differences(run, all, id_from); !which.empty())
    diffs += "; " + which;
  if (!diffs.empty())
    throw protocol_error(first_bad, "handshake: " + diffs +
                                        (failed.empty() ? "" : " (and earlier: " + failed + ")"));
  if (!failed.empty())
    throw remote_error(first_failed,
                       cat("an earlier transfer failed: ", failed,
                           "; this transfer was refused on every rank before any byte moved"));
  run.eager = (all[static_cast<std::size_t>(id_from)].packed & kEagerBit) != 0;
  return all[static_cast<std::size_t>(id_from)].transfer_id;
}
//! The whole-tensor handshake; `bits` go into this rank's `packed` field (kEagerBit).
template <class C>
std::uint64_t handshake(PipelineRun<C>& run, std::uint8_t bits = 0) {
  Frame mine = handshake_frame(run);
  mine.packed |= bits;
  return handshake(run, mine, run.root,
                   [&](const std::vector<Frame>& all, int& first_bad) {
                     return handshake_differences(all, run.root, first_bad);
                   });
}

//! Per-chunk checksums (TransferOptions::checksum) read the chunk on the host.
//! @throws config_error("checksum") where that cannot work.
template <class C>
void check_checksum_support(const PipelineRun<C>& run) {
  if (!run.opt.checksum) return;
  if (!run.plan.framed)
    throw config_error("checksum", "needs Protocol::weightsync (the status frames carry it)");
  if constexpr (!std::is_same_v<policy_t<C>, HostPolicy>)
    throw config_error("checksum",
                       "per-chunk checksums run on the host: the host backend only, until the GPU "
                       "kernel lands (TODO)");
}

//! Exchanges every rank's outcome of the transfer ("" = ok).
template <class C>
std::vector<Frame> acknowledge(PipelineRun<C>& run, std::uint64_t id, const std::string& failure) {
  Frame f;
  f.kind = static_cast<std::uint16_t>(FrameKind::ack);
  f.role = static_cast<std::uint8_t>(run.role);
  f.rank = run.comm.rank();
  f.transfer_id = id;
  f.code = static_cast<std::uint16_t>(failure.empty() ? FrameCode::ok : FrameCode::failed);
  f.set_message(failure);
  return allgather_frames(run, f, "acknowledgement");
}

//! The end of a transfer for this rank: with Acknowledge::each_transfer, every rank's outcome
//! (exchanged now). Otherwise nothing is exchanged, and a consumer's `failure` (which no other rank
//! has seen) travels in the next handshake. A producer's own failure is not carried: its caller
//! has it, and what it did to the data every consumer read in the status frames.
template <class C>
std::vector<Frame> conclude(PipelineRun<C>& run, std::uint64_t id, const std::string& failure) {
  if (run.opt.acknowledge == Acknowledge::each_transfer) return acknowledge(run, id, failure);
  if (!failure.empty() && run.role == Role::consumer) run.ws.pending_failure = failure;
  return {};
}

}  // namespace weightsync::detail
