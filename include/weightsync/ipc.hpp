// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Transfers through CUDA IPC: the consumer maps the producer's memory and pulls the bytes with
//! copy engines (cudaMemcpyAsync), so neither side launches NCCL kernels.
//!
//! - `ipc`: colocated. Trainer and server are different processes on the same GPU; a pull is a
//!   device-local copy.
//! - `p2p`: one node, another GPU. The pull goes over NVLink (or PCIe) on the consumer's copy
//!   engines; the producer's SMs and copy engines stay idle.
//!
//! What is exported: whole allocations, never single tensors (ipc/detail/exporter.hpp); the
//! consumer opens each once and keeps the mapping between transfers (ipc/detail/mapping.hpp).
//! Memory that cannot be exported (cudaMallocAsync pools, VMM without a shareable handle, host
//! memory) is staged through a ring of K slots, chunk by chunk with the strict-greater rule over B.
//! Of TransferOptions, buffer_size_bytes and num_buffers shape the staging only; packed, protocol
//! and direct_threshold_bytes do not apply (every tensor is pulled from where it is, or staged).
//! Control messages (the plan, slot hand-offs, the final outcome frames) go over a
//! HostCommunicator with its deadlines and peer-death detection; every wait, device or host, is
//! bounded by TransferOptions::timeout. See ipc/transport.hpp.

#include "weightsync/config.hpp"
#if !WEIGHTSYNC_HAS_CUDA
#error "<weightsync/ipc.hpp> needs the CUDA runtime (WEIGHTSYNC_HAS_CUDA=0)"
#endif

#include "weightsync/ipc/detail/driver.hpp"
#include "weightsync/ipc/detail/exporter.hpp"
#include "weightsync/ipc/detail/mapping.hpp"
#include "weightsync/ipc/detail/placement.hpp"
#include "weightsync/ipc/detail/plan.hpp"
#include "weightsync/ipc/detail/pull.hpp"
#include "weightsync/ipc/options.hpp"
#include "weightsync/ipc/sharded.hpp"
#include "weightsync/ipc/transport.hpp"
