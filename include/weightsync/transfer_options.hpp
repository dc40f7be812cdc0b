// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! What a transfer is asked to do (TransferOptions) and what it did (TransferStats); shared by
//! every transport.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>

#include "weightsync/detail/format.hpp"
#include "weightsync/error.hpp"
#include "weightsync/tensor_meta.hpp"
#include "weightsync/tuning.hpp"

namespace weightsync {

//! What goes on the wire around the data.
enum class Protocol : std::uint8_t {
  weightsync,  //!< handshake, per-chunk status frames, acknowledgement (this library's peers)
  vllm,        //!< exactly vLLM's wire: the data broadcasts only
};

//! When a transfer's outcome reaches the other ranks (Protocol::weightsync; both sides must agree,
//! the handshake checks it).
enum class Acknowledge : std::uint8_t {
  //! In the next transfer's handshake: a transfer returns once this rank's part is done, with no
  //! exchange after the data (the steady state of a training loop costs the data and one frame
  //! exchange). A failure the other ranks could not see (a consumer's load_weights threw) makes
  //! the next transfer fail on every rank with a remote_error naming that rank, before any byte of
  //! it moves; a failure in the last transfer before shutdown is reported by its own rank only.
  //! The consumer's Workspace carries the failure to the next transfer (the engines keep one).
  next_transfer,
  //! At the end of every transfer (one more exchange): every rank returns knowing every rank's
  //! outcome; a consumer's failure is a remote_error on the producer in the same call.
  each_transfer,
};

//! Options shared by producer and consumer. Both sides must agree on packed, B, K and acknowledge
//! (the handshake checks it).
struct TransferOptions {
  //! Chunk size B of the packed plan (vLLM's packed_buffer_size_bytes).
  std::size_t buffer_size_bytes = static_cast<std::size_t>(kDefaultPackedBufferSizeBytes);
  //! Ring slots K (vLLM's packed_num_buffers), 1..8.
  int num_buffers = kDefaultPackedNumBuffers;
  //! false: one broadcast per tensor (vLLM's unpacked path).
  bool packed = true;
  Protocol protocol = Protocol::weightsync;
  Acknowledge acknowledge = Acknowledge::next_transfer;
  //! Bound on every wait for progress (one chunk, the handshake, the acknowledgement).
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
  //! Producer: the stream that produced the weights (cudaStream_t on the CUDA path); the producer
  //! orders its reads after the work already enqueued there. nullptr: none to wait for.
  void* source_stream = nullptr;
  //! Protocol::weightsync only, 0 = off: within a packed chunk, tensors of at least this many
  //! bytes travel as operations of their own (fused into the chunk's group) straight from their
  //! memory into their destination, instead of being copied into and out of a ring slot. The
  //! chunk plan (and so the memory bound) is unchanged. Both sides must agree (handshake).
  std::size_t direct_threshold_bytes = 0;
  //! Protocol::weightsync only: a chunk whose packed region is at least this large and which also
  //! has direct tensors goes out as two launches, so that the region's copy overlaps the direct
  //! tensors' transfer (the first chunk's packing, the last chunk's unpacking). Both sides must
  //! agree (handshake).
  std::size_t split_min_region_bytes = std::size_t{64} << 20;
  //! Consumer, optional: where a tensor should land (device memory of meta.nbytes() bytes), or
  //! nullptr to be handed a view instead. Tensors with a destination are written there directly
  //! (single-tensor chunks are received in place) and are not passed to load_weights.
  std::function<void*(const TensorMeta&)> destination;
  //! Consumer, Acknowledge::each_transfer only: a failure that any rank reports in the
  //! acknowledgement fails this rank's call too (a remote_error naming the first such rank), so
  //! that every rank of the group returns the same verdict. Shadow updates commit on it
  //! (engine/shadow.hpp). Off: a consumer fails only for its own failure or the producer's.
  bool all_or_nothing = false;
  //! Protocol::weightsync, whole-tensor transfers: the producer sends a Hash64 of each chunk's
  //! tensor bytes in the chunk's status frame, and the consumer checks it before loading the chunk;
  //! a mismatch is that consumer's failure (protocol_error naming the producer), reported in the
  //! acknowledgement, so with all_or_nothing no rank commits. Both sides must agree (handshake).
  //! Host memory only for now (the host backend): the hash runs on the host. TODO: a GPU kernel
  //! for the CUDA backends (until then they refuse it with config_error("checksum")), overlapped
  //! with the transfer.
  bool checksum = false;

  void validate() const {
    if (buffer_size_bytes == 0) throw config_error("buffer_size_bytes", "must be >= 1, got 0");
    if (num_buffers < 1 || num_buffers > kMaxPackedNumBuffers)
      throw config_error("num_buffers", detail::cat("must be in 1..", kMaxPackedNumBuffers,
                                                    ", got ", num_buffers));
    if (timeout.count() <= 0) throw config_error("timeout", "must be > 0");
  }
};

//! What a transfer did.
struct TransferStats {
  std::size_t tensors = 0;
  std::size_t chunks = 0;
  std::size_t bytes = 0;                 //!< payload bytes (sum of tensor sizes)
  std::size_t slot_bytes = 0;            //!< capacity of one ring slot (0: none needed)
  std::size_t ring_bytes = 0;            //!< memory the ring holds (slots and frames)
  bool reused_ring = false;              //!< the ring of an earlier call was reused
  std::uint64_t contiguous_regions = 0;  //!< producer: regions sent without packing (cumulative)
};

}  // namespace weightsync
