// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Tuning: every tuning default of the library in one place, as policy types in the manner of
//! CUB's (a struct per subsystem, each default a static constexpr member, read where it is used).
//! Header-only constants with no dependency, so that any layer may read them (the pipeline, the
//! transports, the engines) without pulling in anything else.
//!
//! What is not here:
//! - settings both sides must agree on, and per-call context: TransferOptions
//!   (transfer_options.hpp; its defaults for B and K are Tuning::Packing's);
//! - the kernels' geometry (threads per block, tile bytes, descriptors per launch): it is compiled
//!   into the PTX, so it lives in the kernel ABI headers that the .cu sources and the launchers
//!   share (kernels/gather_abi.hpp, kernels/batched_copy_abi.hpp, kernels/delta_abi.hpp); change
//!   it there and regenerate the PTX (kernels/embed_ptx.sh);
//! - wire and protocol limits (frame sizes, the mailbox layout): detail/frame.hpp, ipc/detail/.

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace weightsync {

struct Tuning {
  //! The packed transfer defaults every side agrees on unless told otherwise: vLLM's.
  struct Packing {
    //! vLLM's DEFAULT_PACKED_BUFFER_SIZE_BYTES (1 GiB): the chunk size B.
    static constexpr std::int64_t buffer_size_bytes = std::int64_t{1} << 30;
    //! vLLM's DEFAULT_PACKED_NUM_BUFFERS: the ring depth K.
    static constexpr int num_buffers = 2;
    //! Upper bound on K (packed_num_buffers).
    static constexpr int max_num_buffers = 8;
  };

  //! Bounded waits: how often a waiting host looks at its completion and at its peers.
  struct Wait {
    //! Peers are checked (and a dead one noticed) this often while a host waits.
    static constexpr std::chrono::microseconds check_every{2000};
    //! A wait spins (yielding) this long before it polls, so that short waits end within
    //! microseconds.
    static constexpr std::chrono::microseconds spin_for{2000};
    //! Then it polls this often.
    static constexpr std::chrono::microseconds poll_every{20};
    //! The shared-memory mailbox spins (yielding) this long before it sleeps on its futex
    //! (ipc/detail/shm_mailbox.hpp), as long as spin_for: a producer waiting for the outcome of a
    //! pull shorter than this sees it within about a microsecond. Asleep on the futex, it returned
    //! about 12 us after the consumer's post (run 81: small1b, a 592 us wait, H200 under MPS).
    static constexpr std::chrono::microseconds mailbox_spin_for{2000};
    //! A shadow copy's completion is polled this often (engine/shadow.hpp).
    static constexpr std::chrono::microseconds shadow_poll_every{100};
  };

  //! CUDA IPC pulls (IpcOptions' defaults, ipc/options.hpp).
  struct Ipc {
    //! Copy-engine streams on the consumer.
    static constexpr int copy_streams = 2;
    //! The piece a pull is cut into between GPUs (p2p), so that several copy engines each take
    //! one: larger pieces cost less per byte (copy_engine_probe, 2x H200: 371 / 391 / 396 GB/s at
    //! 64M / 256M / 1G). On one GPU (ipc) pulls are not cut.
    static constexpr std::size_t p2p_piece_bytes = std::size_t{1} << 30;
    //! Pieces below this go through one launch of the batched copy kernel rather than one
    //! copy-engine operation each.
    static constexpr std::size_t kernel_below_bytes = std::size_t{256} << 10;
    //! A consumer times its pulls on the device (IpcStats::pull_device_us) on one sync in this
    //! many, the first included: the extra event costs a few microseconds of host time under MPS,
    //! on the path of every small sync.
    static constexpr std::uint64_t time_pulls_every = 16;
  };

  //! The host transport (host/communicator.hpp).
  struct Host {
    //! A broadcast is relayed down the ring in pieces of this many bytes.
    static constexpr std::size_t piece_bytes = std::size_t{1} << 20;
  };

  //! Connecting to a peer that is not listening yet: retries back off from `first` to `most`,
  //! doubling (detail/socket.hpp: rendezvous and control channel; c10d/detail/store_connect.hpp).
  struct Connect {
    static constexpr std::chrono::milliseconds first_backoff{5};
    static constexpr std::chrono::milliseconds max_backoff{200};
    static constexpr std::chrono::milliseconds store_first_backoff{10};
    static constexpr std::chrono::milliseconds store_max_backoff{500};
  };
};

//! vLLM's DEFAULT_PACKED_BUFFER_SIZE_BYTES (1 GiB): Tuning::Packing::buffer_size_bytes.
inline constexpr std::int64_t kDefaultPackedBufferSizeBytes = Tuning::Packing::buffer_size_bytes;
//! vLLM's DEFAULT_PACKED_NUM_BUFFERS: Tuning::Packing::num_buffers.
inline constexpr int kDefaultPackedNumBuffers = Tuning::Packing::num_buffers;
//! Upper bound on packed_num_buffers: Tuning::Packing::max_num_buffers.
inline constexpr int kMaxPackedNumBuffers = Tuning::Packing::max_num_buffers;

}  // namespace weightsync
