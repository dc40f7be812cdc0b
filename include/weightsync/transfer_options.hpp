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

//! Where a transfer stands: what a progress callback (TransferOptions::progress,
//! EngineOptions::progress) is handed.
//!
//! When it is called: on the thread that runs the transfer, once with 0 bytes done when the data
//! phase begins (after the handshake), then after each chunk of the plan (chunk_plan's chunks,
//! `chunk` of `chunks`; on the producer a chunk counts once it has been handed to the transport,
//! on a consumer once load_weights returned for it), and last with bytes_done == bytes_total when
//! this rank's part of the data is complete (done()). A transfer that fails stops calling it.
//! The collective backends ("host", "nccl") make every call, for whole-tensor and sharded
//! transfers (a sharded transfer's chunks are its steps: chunk s of every trainer rank at once);
//! the IPC backends make none themselves, and through the engines (EngineOptions::progress) they
//! still give the last one, with the totals. The
//! callback should be cheap (it runs between chunks): print a line, store the numbers. It should
//! not throw: an exception it throws ends the transfer with that exception, and the
//! communicator is aborted as after any failure in the middle of a transfer.
//!
//! @snippet tests/unit/progress_test.cpp progress line
struct TransferProgress {
  std::size_t bytes_done = 0;           //!< payload bytes of the chunks done so far
  std::size_t bytes_total = 0;          //!< payload bytes of the whole transfer
  std::size_t chunk = 0;                //!< chunks done so far (0 .. chunks)
  std::size_t chunks = 0;               //!< chunks in the plan
  std::chrono::nanoseconds elapsed{0};  //!< since the data phase began
  //! Payload bytes per second so far (0 before any time has passed).
  double bytes_per_second() const {
    const double s = std::chrono::duration<double>(elapsed).count();
    return s > 0 ? static_cast<double>(bytes_done) / s : 0.0;
  }
  bool done() const { return bytes_done == bytes_total && chunk == chunks; }
};

//! A progress callback; see TransferProgress for when it runs.
using ProgressFn = std::function<void(const TransferProgress&)>;

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
  //! (single-tensor chunks are received in place) and are not passed to load_weights. It may be
  //! asked before the transfer is known to be accepted (the ipc consumer asks while the plan is on
  //! its way; the collective consumer, before the handshake), and more than once per tensor: it
  //! must answer the same during one call, and asking writes nothing. A transfer refused at the
  //! handshake writes no destination. A throw from it fails that consumer's transfer once the
  //! transfer is accepted (the collective consumer asks again then).
  std::function<void*(const TensorMeta&)> destination;
  //! Consumer, Acknowledge::each_transfer only: a failure that any rank reports in the
  //! acknowledgement fails this rank's call too (a remote_error naming the first such rank), so
  //! that every rank of the group returns the same verdict. Shadow updates commit on it
  //! (engine/shadow.hpp). Off: a consumer fails only for its own failure or the producer's.
  //! Over ipc / p2p with several consumers the producer sends the verdict after the outcomes when
  //! it runs with Acknowledge::each_transfer (a consumer with all_or_nothing refuses a producer
  //! that does not).
  bool all_or_nothing = false;
  //! Protocol::weightsync: each producer (each trainer rank of a sharded transfer) sends the chunk
  //! digest (detail/digest.hpp) of each of its chunks in the chunk's status frame, and each
  //! consumer digests where the chunk's bytes landed and compares; a mismatch is that consumer's
  //! failure (protocol_error naming the producer), reported in the acknowledgement, so with
  //! all_or_nothing no rank commits. Both sides must agree (handshake).
  //! - Host backend: the digests run on the host, and a mismatch is found before load_weights
  //!   sees the chunk.
  //! - CUDA backends (nccl): the digests run on the device (kernels/digest.cu): a root's into its
  //!   status frame before the frame is sent, a consumer's on the unpack stream behind each step's
  //!   data (overlapping the next steps' transfers). A mismatch is found once the data is
  //!   complete, before the acknowledgement, not before load_weights: the chunk may have been
  //!   loaded (or written to its destination) by then. With all_or_nothing (shadow mode) nothing
  //!   is committed on a mismatch.
  //! - ipc / p2p (whole-tensor syncs): one digest per tensor, the producer's sent after the pulls;
  //!   each consumer compares before it reports its outcome (sharded ipc syncs refuse checksums).
  bool checksum = false;
  //! Optional, either side: called as the transfer moves on (see TransferProgress). Needs no
  //! agreement between the sides.
  ProgressFn progress;

  void validate() const {
    if (buffer_size_bytes == 0) throw config_error("buffer_size_bytes", "must be >= 1, got 0");
    if (num_buffers < 1 || num_buffers > kMaxPackedNumBuffers)
      throw config_error("num_buffers", detail::cat("must be in 1..", kMaxPackedNumBuffers,
                                                    ", got ", num_buffers));
    if (timeout.count() <= 0) throw config_error("timeout", "must be > 0");
  }
};

//! What a transfer did, on this rank.
//!
//! Phase times (wall clock on this rank; zero where a transport does not measure them, as the
//! IPC backends do not split their phases): `handshake` is the frame exchange that compares
//! every rank's view before any byte of weights moves (0 on vLLM's wire, which has none); `data`
//! runs from its end until this rank's last chunk is done (a consumer's load_weights calls
//! included, and `load` is the part of it spent inside load_weights); `finish` is what follows:
//! the acknowledgement (Acknowledge::each_transfer) and the wait for the last operations;
//! `total` is the whole call.
struct TransferStats {
  std::size_t tensors = 0;
  std::size_t chunks = 0;
  std::size_t bytes = 0;                  //!< payload bytes (sum of tensor sizes)
  std::size_t slot_bytes = 0;             //!< capacity of one ring slot (0: none needed)
  std::size_t ring_bytes = 0;             //!< memory the ring holds (slots and frames)
  bool reused_ring = false;               //!< the ring of an earlier call was reused
  std::uint64_t contiguous_regions = 0;   //!< producer: regions sent without packing (cumulative)
  std::chrono::nanoseconds handshake{0};  //!< the handshake (see above)
  std::chrono::nanoseconds data{0};       //!< the data phase, load_weights included
  std::chrono::nanoseconds load{0};       //!< consumer: inside load_weights (part of data)
  std::chrono::nanoseconds finish{0};     //!< acknowledgement and the final wait
  std::chrono::nanoseconds total{0};      //!< the whole call
  //! Payload bytes per second of the data phase (0 when it was not measured).
  double data_bytes_per_second() const {
    const double s = std::chrono::duration<double>(data).count();
    return s > 0 ? static_cast<double>(bytes) / s : 0.0;
  }
};

}  // namespace weightsync
