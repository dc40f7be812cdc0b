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
#include <ios>
#include <random>
#include <string>
#include <vector>

#include "weightsync/detail/format.hpp"
#include "weightsync/detail/frame.hpp"
#include "weightsync/detail/pipeline/run.hpp"
#include "weightsync/error.hpp"

namespace weightsync::detail {

//! Every rank contributes `mine`; returns all frames, indexed by rank.
template <class C>
std::vector<Frame> allgather_frames(PipelineRun<C>& run, Frame mine, const std::string& phase) {
  const std::size_t n = run.world();
  const auto me = static_cast<std::size_t>(run.comm.rank());
  *run.frame_host(me) = mine;
  run.ws.policy.copy_from_host(run.frame_dev(me), run.frame_host(me), kFrameBytes,
                               run.comm_stream());
  run.group([&] {
    for (std::size_t r = 0; r < n; ++r)
      run.comm.broadcast(run.frame_dev(r), kFrameBytes, static_cast<int>(r), run.comm_stream());
  });
  run.ws.policy.copy_to_host(run.frame_host(0), run.frame_dev(0), n * kFrameBytes,
                             run.comm_stream());
  run.drain(phase);
  std::vector<Frame> out(run.frame_host(0), run.frame_host(0) + n);
  for (std::size_t r = 0; r < n; ++r)
    if (out[r].magic != kFrameMagic || out[r].rank != static_cast<std::int32_t>(r)) {
      run.abort_comm(phase + ": a peer sent garbage");
      throw protocol_error(static_cast<int>(r), cat(phase, ": rank ", r,
                                                    " sent no valid weightsync frame (is it a "
                                                    "weightsync peer of protocol ",
                                                    kProtocolVersion, "?)"));
    }
  return out;
}

//! This rank's handshake frame: its role and its view of the transfer.
template <class C>
Frame handshake_frame(PipelineRun<C>& run) {
  Frame f;
  f.kind = static_cast<std::uint16_t>(FrameKind::handshake);
  f.role = static_cast<std::uint8_t>(run.role);
  f.rank = run.comm.rank();
  f.packed = run.opt.packed ? 1 : 0;
  f.buffer_size = run.opt.buffer_size_bytes;
  f.num_buffers = static_cast<std::uint32_t>(run.opt.num_buffers);
  f.chunk_rule = static_cast<std::uint32_t>(
      std::min<std::size_t>(run.opt.direct_threshold_bytes, 0xffffffffu));
  f.chunk = run.opt.split_min_region_bytes;  // the handshake frame carries the split threshold here
  f.num_tensors = run.metas.size();
  f.total_bytes = run.plan.total_bytes;
  f.digest = metadata_digest(run.metas);
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
    diff(r, "packed", r0.packed ? "true" : "false", x.packed ? "true" : "false");
    if (r0.packed && x.packed) diff(r, "packed_buffer_size_bytes", r0.buffer_size, x.buffer_size);
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

//! Compares every rank's view of the transfer; throws the same protocol_error on every rank (the
//! communicator stays usable). @returns the transfer id chosen by the root.
template <class C>
std::uint64_t handshake(PipelineRun<C>& run) {
  const auto all = allgather_frames(run, handshake_frame(run), "handshake");
  int first_bad = -1;
  const std::string diffs = handshake_differences(all, run.root, first_bad);
  if (!diffs.empty()) throw protocol_error(first_bad, "handshake: " + diffs);
  return all[static_cast<std::size_t>(run.root)].transfer_id;
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

}  // namespace weightsync::detail
