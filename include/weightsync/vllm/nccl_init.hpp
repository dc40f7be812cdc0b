// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! vllm_init_info: the NcclInitInfo a trainer hands a vLLM server, with a fresh NCCL unique id
//! (vLLM's unique-id mode). <weightsync/vllm.hpp> includes it where NCCL is.

#include "weightsync/config.hpp"
#if !WEIGHTSYNC_HAS_NCCL
#error "<weightsync/vllm/nccl_init.hpp> needs NCCL (WEIGHTSYNC_HAS_NCCL=0)"
#endif

#include <cstdint>

#include "weightsync/nccl/unique_id.hpp"
#include "weightsync/tuning.hpp"
#include "weightsync/vllm/init_info.hpp"

namespace weightsync {

//! The init info a trainer hands a vLLM server (POST /init_weight_transfer_engine): a fresh
//! ncclUniqueId in standard base64, so the server's workers and this trainer all enter
//! ncclCommInitRank together. Pair with EngineOptions{.backend = "nccl", .protocol =
//! Protocol::vllm} on the trainer.
inline NcclInitInfo vllm_init_info(int world_size, int rank_offset = 1, bool packed = true,
                                   std::int64_t buffer_size_bytes = kDefaultPackedBufferSizeBytes,
                                   int num_buffers = kDefaultPackedNumBuffers) {
  NcclInitInfo i;
  i.nccl_unique_id_b64 = NcclUniqueId::generate().to_base64();
  i.world_size = world_size;
  i.rank_offset = rank_offset;
  i.packed = packed;
  i.packed_buffer_size_bytes = buffer_size_bytes;
  i.packed_num_buffers = num_buffers;
  i.validate();
  return i;
}

}  // namespace weightsync
