// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Umbrella header: everything the current configuration supports.

#include "weightsync/config.hpp"

#include "weightsync/c10d/client.hpp"
#include "weightsync/c10d/server.hpp"
#include "weightsync/c10d/store_group.hpp"
#include "weightsync/c10d/vllm_pickle.hpp"
#include "weightsync/chunk_plan.hpp"
#include "weightsync/concepts.hpp"
#include "weightsync/dtype.hpp"
#include "weightsync/error.hpp"
#include "weightsync/host/communicator.hpp"
#include "weightsync/host/device_policy.hpp"
#include "weightsync/host/rendezvous.hpp"
#include "weightsync/loading.hpp"
#include "weightsync/log.hpp"
#include "weightsync/packed_broadcast.hpp"
#include "weightsync/safetensors.hpp"
#include "weightsync/sealed_metadata.hpp"
#include "weightsync/shard.hpp"
#include "weightsync/sharded_broadcast.hpp"
#include "weightsync/tensor_meta.hpp"
#include "weightsync/vllm.hpp"

#if WEIGHTSYNC_HAS_CUDA
#include "weightsync/cuda/check.hpp"
#include "weightsync/cuda/device_buffer.hpp"
#include "weightsync/cuda/device_policy.hpp"
#include "weightsync/cuda/event.hpp"
#include "weightsync/cuda/gather.hpp"
#include "weightsync/cuda/stream.hpp"
#endif
#if WEIGHTSYNC_HAS_NCCL
#include "weightsync/nccl/check.hpp"
#include "weightsync/nccl/communicator.hpp"
#include "weightsync/nccl/group.hpp"
#include "weightsync/nccl/torch_bootstrap.hpp"
#include "weightsync/nccl/unique_id.hpp"
#endif
#include "weightsync/backends.hpp"
#include "weightsync/engine.hpp"
