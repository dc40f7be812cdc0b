// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Settings of the IPC transports (IpcOptions) and what they did with handles (IpcStats).

#include "weightsync/config.hpp"
#if !WEIGHTSYNC_HAS_CUDA
#error "<weightsync/ipc/options.hpp> needs the CUDA runtime (WEIGHTSYNC_HAS_CUDA=0)"
#endif

#include <cstddef>
#include <cstdint>

#include "weightsync/tuning.hpp"

namespace weightsync {

//! Settings of an IPC transport.
struct IpcOptions {
  //! true: `ipc`, producer and consumers must share one GPU. false: `p2p`, one node, any GPU the
  //! consumer can reach (peer access).
  bool same_gpu = true;
  //! Copy-engine streams on the consumer; large pulls are split over them so several engines work.
  int copy_streams = Tuning::Ipc::copy_streams;
  //! Pulls are cut into pieces of at most this many bytes, spread over the copy streams. Larger
  //! pieces cost less per byte (copy_engine_probe, 2x H200: 371 / 391 / 396 GB/s at 64M / 256M /
  //! 1G). 0 (the default): 1 GiB between GPUs (p2p), where several copy engines each take a piece;
  //! not cut on one GPU (ipc), where one copy runs at the device's copy rate and a cut pull only
  //! adds a fork and a join (run 51: small1b pulled in 568.5 us as two pieces, 563.6 us copied
  //! whole; dense8b 7718 against 7645 us).
  std::size_t piece_bytes = 0;
  //! The piece size in effect (see piece_bytes).
  std::size_t piece() const noexcept {
    return piece_bytes ? piece_bytes : same_gpu ? ~std::size_t{0} : Tuning::Ipc::p2p_piece_bytes;
  }
  //! Pieces smaller than this go through one launch of the batched copy kernel instead of one
  //! copy-engine operation each (hundreds of small tensors); 0: copy engines only, no SM used.
  std::size_t kernel_below_bytes = Tuning::Ipc::kernel_below_bytes;
  //! false: stage every tensor through the slots (for tests and comparison).
  bool export_sources = true;
  //! true: the host sleeps until device work is done (a host function enqueued behind it wakes
  //! it) instead of polling an event; no CPU is spent waiting, at the cost of the wake-up.
  bool blocking_waits = false;
  //! true: the per-sync messages of whole-tensor syncs (the plan, or "same plan as round N", and
  //! every consumer's outcome) go through a shared-memory mailbox (ipc/detail/shm_mailbox.hpp):
  //! about a microsecond each instead of a TCP round trip on loopback. Used only when every member of the
  //! group wants it and could open the segment; otherwise TCP, as with false.
  bool shared_memory_control = true;
  //! TransferOptions::checksum on one GPU (ipc): true (the default), a tensor with a destination
  //! is copied by the digest kernel (kernels/digest.cu), which digests the bytes it copies: one
  //! read of the producer's memory serves the copy and the consumer's digest. false: copy engines
  //! copy it, then the digest reads the destination (one more pass over the weights' bytes).
  bool checksum_copy = true;
};

//! What an IPC transport did with handles (for leak checks).
struct IpcStats {
  std::uint64_t exported = 0;      //!< producer: allocations exported (once each)
  std::uint64_t opened = 0;        //!< consumer: cudaIpcOpenMemHandle calls
  std::uint64_t closed = 0;        //!< consumer: cudaIpcCloseMemHandle calls
  std::size_t mapped = 0;          //!< consumer: mappings held now
  std::size_t regions = 0;         //!< last transfer: allocations named by the plan
  std::size_t staged = 0;          //!< last transfer: tensors that went through the slots
  std::uint64_t plans_reused = 0;  //!< plans not re-sent ("same plan as round N"), cumulative
  //! Consumer: pulls that ran again as the last one did, from the batched copy kernel's
  //! descriptor table without a list (the same plan and destinations), cumulative.
  std::uint64_t pulls_repeated = 0;
  //! Consumer, last transfer, host microseconds: its own checks and the copies of the last plan,
  //! made ahead while the producer prepares (ahead); waiting for the plan, mapping and checking it,
  //! enqueueing the pulls, waiting for them, exchanging the final status; and the device time of
  //! the pulls from the producer's own memory (between events on the consumer's stream; taken on
  //! one sync in Tuning::Ipc::time_pulls_every, the first included: the last one taken).
  double ahead_us = 0, plan_us = 0, prepare_us = 0, enqueue_us = 0, wait_us = 0, status_us = 0,
         pull_device_us = 0;
  //! Producer, last transfer, host microseconds: checking the items, waiting for the source
  //! stream, placing the tensors (exports, staging layout), sending the plan, staging, and waiting
  //! for every consumer's outcome.
  double check_us = 0, source_us = 0, place_us = 0, send_plan_us = 0, staging_us = 0,
         outcomes_us = 0;
};

}  // namespace weightsync
