// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The handshake of a sharded transfer, on the framed wire of handshake.hpp: every rank's frame
//! carries, besides what the unsharded handshake compares, the number of trainer ranks M and the
//! digest of the resolved shard pieces (rank, rows, geometry of every piece of every tensor), so
//! that differing shard specs are refused on every rank before any byte of weights moves. Ranks
//! 0..M-1 must run as producers, the others as consumers. Frame fields: `tensor` holds the pieces'
//! digest and the message says "sharded M=<M>" (an unsharded peer's message is empty).

#include <cstddef>
#include <cstdint>
#include <ios>
#include <string>
#include <vector>

#include "weightsync/detail/format.hpp"
#include "weightsync/detail/frame.hpp"
#include "weightsync/detail/pipeline/handshake.hpp"
#include "weightsync/detail/pipeline/run.hpp"
#include "weightsync/detail/pipeline/sharded_plan.hpp"
#include "weightsync/error.hpp"

namespace weightsync::detail {

inline std::string sharded_marker(int trainers) {
  return cat("sharded M=", trainers);
}

//! What differs between rank 0's frame and the others' ("" when nothing); `first_bad` gets the
//! first rank at fault.
inline std::string sharded_differences(const std::vector<Frame>& all, int trainers,
                                       int& first_bad) {
  const Frame& r0 = all[0];
  std::string diffs;
  first_bad = -1;
  auto note = [&](std::size_t r, const std::string& what) {
    if (first_bad < 0) first_bad = static_cast<int>(r);
    diffs += (diffs.empty() ? "" : "; ") + what;
  };
  auto diff = [&](std::size_t r, const char* field, auto want, auto got) {
    if (!(want == got))
      note(r, cat(field, " differs: rank 0 has ", want, ", rank ", r, " has ", got));
  };
  const std::string marker = sharded_marker(trainers);
  for (std::size_t r = 0; r < all.size(); ++r) {
    const Frame& x = all[r];
    const auto want = static_cast<int>(r) < trainers ? Role::producer : Role::consumer;
    if (x.role != static_cast<std::uint8_t>(want))
      note(r, cat("rank ", r, " runs as ", x.role == 1 ? "producer" : "consumer", " but ranks 0..",
                  trainers - 1, " are the trainers"));
    const std::string tag = x.text().substr(0, x.text().find('\n'));  // then: earlier failures
    if (tag != marker) {
      note(r,
           tag.rfind("sharded", 0) == 0
               ? cat("trainer count differs: rank ", r, " says '", tag, "', this is '", marker, "'")
               : cat("rank ", r, " runs an unsharded transfer; the others a sharded one"));
      continue;
    }
    if (r == 0) continue;
    diff(r, "protocol version", r0.version, x.version);
    const bool p0 = r0.packed & kPackedBit, px = x.packed & kPackedBit;
    diff(r, "packed", p0 ? "true" : "false", px ? "true" : "false");
    diff(r, "acknowledge", r0.packed & kAckEachBit ? "each_transfer" : "next_transfer",
         x.packed & kAckEachBit ? "each_transfer" : "next_transfer");
    if (p0 && px) diff(r, "packed_buffer_size_bytes", r0.buffer_size, x.buffer_size);
    diff(r, "packed_num_buffers", r0.num_buffers, x.num_buffers);
    diff(r, "tensor count", r0.num_tensors, x.num_tensors);
    diff(r, "total bytes", r0.total_bytes, x.total_bytes);
    if (r0.digest != x.digest)
      note(r, cat("metadata (names, dtypes, shapes) differs: rank 0 digest 0x", std::hex, r0.digest,
                  ", rank ", std::dec, r, " digest 0x", std::hex, x.digest));
    if (r0.tensor != x.tensor)
      note(r, cat("shard specs differ: rank 0 pieces digest 0x", std::hex, r0.tensor, ", rank ",
                  std::dec, r, " digest 0x", std::hex, x.tensor));
  }
  return diffs;
}

//! Compares every rank's view of the sharded transfer and settles earlier transfers, as
//! handshake() does; the same error on every rank (the communicator stays usable). An earlier
//! failure travels as the frame's code and the message's lines after the marker. @returns the
//! transfer id chosen by rank 0.
template <class C>
std::uint64_t sharded_handshake(PipelineRun<C>& run, const ShardedPlan& plan) {
  Frame mine = handshake_frame(run);
  mine.tensor = plan.digest;
  mine.set_message(sharded_marker(plan.trainers) + mine.text());
  return handshake(run, mine, 0, [&](const std::vector<Frame>& all, int& first_bad) {
    const std::string d = sharded_differences(all, plan.trainers, first_bad);
    return d.empty() ? d : "(sharded) " + d;
  });
}

}  // namespace weightsync::detail
