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
#include <vector>

#include "weightsync/detail/format.hpp"
#include "weightsync/detail/frame.hpp"
#include "weightsync/pipeline/detail/run.hpp"
#include "weightsync/error.hpp"

namespace weightsync::detail {

//! Checks that `frames[r]` is rank r's weightsync frame; aborts and throws protocol_error if not.
template <class C>
void check_frames(PipelineRun<C>& run, const std::vector<Frame>& frames, const std::string& phase) {
  for (std::size_t r = 0; r < frames.size(); ++r)
    if (frames[r].head.magic != kFrameMagic || frames[r].head.rank != static_cast<std::int32_t>(r)) {
      run.abort_comm(phase + ": a peer sent garbage");
      throw protocol_error(static_cast<int>(r), cat(phase, ": rank ", r,
                                                    " sent no valid weightsync frame (is it a "
                                                    "weightsync peer of protocol ",
                                                    kProtocolVersion, "?)"));
    }
}

//! Every rank contributes one block, laid out by `layout` (rank r's: layout.bytes(r) bytes at
//! layout.offset(r)), that begins with its frame `mine` (the rest of its block, if any, it has
//! written already, on the communication stream): one broadcast from every rank, grouped. When
//! run.host_exchange it runs in `host` (pinned), where the host reads the frames and a consumer's
//! copies read the eager bytes: no copy on either side of it. Otherwise it runs over `dev` (the
//! blocks stay on the device) and is mirrored into `host`. Returns the frames, indexed by rank.
template <class C>
std::vector<Frame> allgather_blocks(PipelineRun<C>& run, std::byte* dev, std::byte* host,
                                    const HandshakeLayout& layout, const Frame& mine,
                                    const std::string& phase) {
  const std::size_t n = run.world();
  const auto me = static_cast<std::size_t>(run.comm.rank());
  // (The host block is free: the last exchange through it was drained, and what the stream may
  // still write into this rank's block, its eager bytes, lies after the frame.)
  std::memcpy(host + layout.offset(me), &mine, kFrameBytes);
  std::byte* area = run.host_exchange ? host : dev;
  if (!run.host_exchange)
    run.ws.policy.copy_from_host(dev + layout.offset(me), host + layout.offset(me), kFrameBytes,
                                 run.comm_stream());
  run.trace.mark("exchange-begin");
  run.group([&] {
    for (std::size_t r = 0; r < n; ++r)
      run.comm.broadcast(area + layout.offset(r), layout.bytes(r), static_cast<int>(r),
                         run.comm_stream());
  });
  if (!run.host_exchange) run.ws.policy.copy_to_host(host, dev, layout.total(), run.comm_stream());
  run.trace.mark("exchange-enqueued");
  run.drain(phase);
  run.trace.mark("exchanged");
  std::vector<Frame> out(n);
  for (std::size_t r = 0; r < n; ++r) std::memcpy(&out[r], host + layout.offset(r), kFrameBytes);
  check_frames(run, out, phase);
  return out;
}

//! Every rank contributes `mine`; returns all frames, indexed by rank.
template <class C>
std::vector<Frame> allgather_frames(PipelineRun<C>& run, Frame mine, const std::string& phase) {
  return allgather_blocks(run, run.frame_dev(0), run.ws.frames_host.data(),
                          HandshakeLayout::uniform(run.world(), kFrameBytes), mine, phase);
}

//! The handshake's all-gather: every rank contributes one block laid out by run.layout (its frame,
//! then its eager bytes, which the producer may have written already: see PipelineRun::eager_at).
//! The blocks stay where they were exchanged (the consumer reads the producer's eager bytes
//! there); returns the frames, indexed by rank.
template <class C>
std::vector<Frame> exchange_handshake(PipelineRun<C>& run, Frame mine) {
  run.ensure_handshake_area();
  return allgather_blocks(run, run.ws.handshake.data(), run.ws.handshake_host.data(), run.layout,
                          mine, "handshake");
}

//! The next handshake's wide blocks: this transfer's roots', when its every root's bytes fit a
//! wide block and some root's do not fit a base one. Decided from the agreed plan and options
//! alone, so every rank decides alike.
template <class C>
WireState next_wire_state(const PipelineRun<C>& run) {
  WireState next;
  const auto& roots = run.plan.root_rank;
  if (!run.plan.framed || run.opt.checksum || run.metas.empty() || roots.empty() ||
      roots.size() > kMaxWideBlocks)
    return next;
  std::size_t most = 0;
  for (std::size_t r = 0; r < roots.size(); ++r) {
    if (roots[r] != roots[0] + static_cast<int>(r)) return next;  // (roots are one run of ranks)
    most = std::max(most, run.plan.root_bytes(static_cast<int>(r)));
  }
  if (most <= eager_capacity(run.world()) || most > kWideEagerBytes) return next;
  next.wide_first = roots[0];
  next.wide_count = static_cast<int>(roots.size());
  return next;
}

//! What this rank must agree on with every other: the one place the handshake is derived from the
//! options and the plan (visit_agreement compares every field). `trainers` is 0 for a whole-tensor
//! transfer (one root), M for a sharded one (trainer ranks 0..M-1, their pieces' digest).
template <class C>
Agreement agreement(PipelineRun<C>& run) {
  Agreement a{};
  a.buffer_size_bytes = run.opt.buffer_size_bytes;
  a.direct_threshold_bytes = run.opt.direct_threshold_bytes;
  a.split_min_region_bytes = run.opt.split_min_region_bytes;
  a.num_tensors = run.metas.size();
  a.total_bytes = run.plan.total_bytes;
  a.metadata_digest = run.metadata_digest ? *run.metadata_digest : run.ws.digests(run.metas);
  a.pieces_digest = run.plan.sharded ? run.plan.digest : 0;
  a.num_buffers = static_cast<std::uint32_t>(run.opt.num_buffers);
  a.trainers = run.plan.sharded ? run.plan.trainers : 0;
  a.packed = run.opt.packed ? 1 : 0;
  a.acknowledge = static_cast<std::uint8_t>(run.opt.acknowledge);
  a.checksum = run.opt.checksum ? 1 : 0;
  return a;
}

//! This rank's handshake frame: its role and its view of the transfer, and (code failed) its
//! failure of an earlier transfer that no other rank has seen yet.
template <class C>
Frame handshake_frame(PipelineRun<C>& run) {
  Frame f(FrameKind::handshake, run.role, run.comm.rank());
  f.handshake.agreed = agreement(run);
  if (!run.ws.pending_failure.empty()) f.fail(FrameCode::failed, run.ws.pending_failure);
  if (run.role == Role::producer) {
    // Unique per transfer; no need for /dev/urandom on every call.
    static const std::uint64_t seed =
        (std::uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
    f.head.transfer_id = seed + 0x9e3779b97f4a7c15ull * ++run.ws.transfers;
  }
  return f;
}

//! The rank whose view the others are compared with: the root, or rank 0 of a sharded transfer.
inline int reference_rank(int root, const Agreement& mine) { return mine.trainers > 0 ? 0 : root; }

//! One field of `want` (rank ref's) against rank r's, described ("" when they agree).
template <class T>
std::string describe_field(const char* field, T want, T got, Shown how, const Agreement& a,
                           const Agreement& b, int ref, std::size_t r) {
  if (want == got) return "";
  const auto u = [](auto v) { return static_cast<std::uint64_t>(v); };
  switch (how) {
    case Shown::trainers: return "";  // reported before the other fields
    case Shown::if_packed:
      if (!(a.packed && b.packed)) return "";
      break;
    case Shown::number: break;
    case Shown::boolean:
      return cat(field, " differs: rank ", ref, " has ", want ? "true" : "false", ", rank ", r,
                 " has ", got ? "true" : "false");
    case Shown::on_off:
      return cat(field, " differs: rank ", ref, " has ", want ? "on" : "off", ", rank ", r, " has ",
                 got ? "on" : "off");
    case Shown::acknowledge: {
      const auto name = [](auto v) {
        return v == static_cast<decltype(v)>(Acknowledge::each_transfer) ? "each_transfer"
                                                                         : "next_transfer";
      };
      return cat(field, " differs: rank ", ref, " has ", name(want), ", rank ", r, " has ",
                 name(got));
    }
    case Shown::metadata:
      return cat("metadata (names, dtypes, shapes) differs: rank ", ref, " digest 0x", std::hex,
                 u(want), ", rank ", std::dec, r, " digest 0x", std::hex, u(got));
    case Shown::pieces:
      return cat("shard specs differ: rank ", ref, " pieces digest 0x", std::hex, u(want),
                 ", rank ", std::dec, r, " digest 0x", std::hex, u(got));
  }
  return cat(field, " differs: rank ", ref, " has ", u(want), ", rank ", r, " has ", u(got));
}

//! What differs between rank `ref`'s frame and the others' ("" when nothing), as this rank
//! (`mine`) sees it; `first_bad` gets the first rank at fault. Every rank sees the same frames, so
//! a difference makes every rank throw (a rank whose sharding differs from this rank's is named
//! here and its other fields are not compared).
inline std::string handshake_differences(const std::vector<Frame>& all, int ref,
                                         const Agreement& mine, int& first_bad) {
  const Frame& r0 = all[static_cast<std::size_t>(ref)];
  std::string diffs;
  first_bad = -1;
  auto note = [&](std::size_t r, const std::string& what) {
    if (what.empty()) return;
    if (first_bad < 0) first_bad = static_cast<int>(r);
    diffs += (diffs.empty() ? "" : "; ") + what;
  };
  const int m = mine.trainers;
  for (std::size_t r = 0; r < all.size(); ++r) {
    const Frame& x = all[r];
    const Agreement& got = x.handshake.agreed;
    const bool producer = m > 0 ? static_cast<int>(r) < m : static_cast<int>(r) == ref;
    if (x.head.role != static_cast<std::uint8_t>(producer ? Role::producer : Role::consumer))
      note(r, cat("rank ", r, " runs as ", x.head.role == 1 ? "producer" : "consumer",
                  m > 0 ? cat(" but ranks 0..", m - 1, " are the trainers")
                        : cat(" but the root is rank ", ref)));
    if (x.head.version != kProtocolVersion) {
      note(r, cat("protocol version differs: rank ", r, " speaks ", x.head.version, ", this rank ",
                  kProtocolVersion));
      continue;  // its body may be laid out otherwise
    }
    if (got.trainers != m) {
      note(r, got.trainers == 0 ? cat("rank ", r, " runs an unsharded transfer; this rank a sharded one (M=", m, ")")
              : m == 0 ? cat("rank ", r, " runs a sharded transfer (M=", got.trainers, "); this rank an unsharded one")
                       : cat("trainer count differs: rank ", r, " has M=", got.trainers, ", this rank M=", m));
      continue;
    }
    if (static_cast<int>(r) == ref) continue;
    visit_agreement(r0.handshake.agreed, got, [&](const char* field, auto want, auto have, Shown how) {
      note(r, describe_field(field, want, have, how, r0.handshake.agreed, got, ref, r));
    });
  }
  return diffs.empty() || m == 0 ? diffs : "(sharded) " + diffs;
}

//! The failures of earlier transfers that the handshake frames carry (code failed; the body's
//! failure says what failed) ("" when none); `first` gets the first rank that failed.
inline std::string earlier_failures(const std::vector<Frame>& all, int& first) {
  std::string out;
  first = -1;
  for (const auto& f : all) {
    if (f.ok()) continue;
    if (first < 0) first = f.head.rank;
    out += cat(out.empty() ? "" : "; ", "rank ", f.head.rank, " failed an earlier transfer: ",
               f.text());
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
  const auto digest = [&](std::size_t r) { return all[r].handshake.agreed.metadata_digest; };
  for (std::size_t r = 0; r < n; ++r) {
    if (all[r].head.version != kProtocolVersion) return "";
    differ = differ || digest(r) != digest(static_cast<std::size_t>(ref));
  }
  if (!differ) return "";
  std::size_t count = 0;
  const std::string mine = metadata_wire(run.metas, count);
  Frame f(FrameKind::metadata, run.role, run.comm.rank());
  f.metadata.list_bytes = mine.size();
  f.metadata.num_tensors = count;
  const auto sizes = allgather_frames(run, f, "handshake (metadata lists)");
  std::vector<std::size_t> offset(n + 1, 0);
  for (std::size_t r = 0; r < n; ++r)
    offset[r + 1] = offset[r] + std::min<std::size_t>(sizes[r].metadata.list_bytes, kMetadataWireMaxBytes);
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
    if (static_cast<int>(r) == ref || digest(r) == digest(static_cast<std::size_t>(ref))) continue;
    const std::string d = first_metadata_difference(
        want, all[static_cast<std::size_t>(ref)].handshake.agreed.num_tensors, ref, list(r),
        all[r].handshake.agreed.num_tensors, static_cast<int>(r));
    if (!d.empty()) out += (out.empty() ? "" : "; ") + d;
  }
  return out;
}

//! Compares every rank's view of the transfer, and settles the earlier transfers: every rank sees
//! the same frames, so every rank throws the same error or none (the communicator stays usable).
//! One handshake for whole-tensor and sharded transfers; `flags` go into this rank's header
//! (kFrameEager: this root's bytes are in its eager bytes; the transfer is eager when every root
//! says so, see PipelineRun::eager).
//! @throws protocol_error when the views differ; remote_error when a rank reports that an earlier
//!   transfer failed there (Acknowledge::next_transfer), before any byte of this one moves.
//! @returns the transfer id chosen by the reference rank (the root; rank 0 when sharded).
template <class C>
std::uint64_t handshake(PipelineRun<C>& run, std::uint8_t flags = 0) {
  run.eager = false;
  Frame mine = handshake_frame(run);
  mine.head.flags = flags;
  run.trace.mark("frame");
  const Agreement agreed = mine.handshake.agreed;
  const int ref = reference_rank(run.root, agreed);
  const auto all = exchange_handshake(run, mine);
  run.ws.pending_failure.clear();  // every rank has seen it now
  int first_bad = -1, first_failed = -1;
  std::string diffs = handshake_differences(all, ref, agreed, first_bad);
  const std::string failed = earlier_failures(all, first_failed);
  if (const std::string which = metadata_differences(run, all, ref); !which.empty())
    diffs += "; " + which;
  if (!diffs.empty())
    throw protocol_error(first_bad, "handshake: " + diffs +
                                        (failed.empty() ? "" : " (and earlier: " + failed + ")"));
  if (!failed.empty())
    throw remote_error(first_failed,
                       cat("an earlier transfer failed: ", failed,
                           "; this transfer was refused on every rank before any byte moved"));
  run.trace.mark("checked");
  // Every rank passed this handshake: every rank sizes the next one alike.
  if constexpr (WireStateCommunicator<C>) run.comm.wire_state() = next_wire_state(run);
  bool eager = !run.plan.root_rank.empty();
  for (const int r : run.plan.root_rank)
    eager = eager && (all[static_cast<std::size_t>(r)].head.flags & kFrameEager) != 0;
  run.eager = eager;
  return all[static_cast<std::size_t>(ref)].head.transfer_id;
}

//! Per-chunk checksums (TransferOptions::checksum) travel in the status frames.
//! @throws config_error("checksum") on vLLM's wire, which has none.
template <class C>
void check_checksum_support(const PipelineRun<C>& run) {
  if (!run.opt.checksum) return;
  if (!run.plan.framed)
    throw config_error("checksum", "needs Protocol::weightsync (the status frames carry it)");
}

//! Exchanges every rank's outcome of the transfer ("" = ok).
template <class C>
std::vector<Frame> acknowledge(PipelineRun<C>& run, std::uint64_t id, const std::string& failure) {
  Frame f(FrameKind::ack, run.role, run.comm.rank(), id);
  if (!failure.empty()) f.fail(FrameCode::failed, failure);
  f.ack.message_bytes = failure.size();
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
