// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The engines: WeightTransferEngine on the inference side (vLLM's worker API: init, start, update,
//! finish with a version, shutdown; engine/worker.hpp) and TrainerEngine on the training side
//! (trainer_init, send_weights; engine/trainer.hpp), over backends chosen by name from a registry
//! (engine/registry.hpp), all behind the Backend interface (engine/backend.hpp). Registers the
//! default backend, "host" (host/backend.hpp); the GPU backends register from their own headers:
//! "nccl" (nccl/backend.hpp), "ipc" and "p2p" (ipc/backend.hpp), or all of them through
//! <weightsync/backends.hpp>.
//!
//! The engines themselves (engine/) take neutral types and include nothing of vLLM; this umbrella
//! also includes <weightsync/vllm.hpp>, so that a program that includes it hands them vLLM's init
//! and update infos and their JSON as before.

#include "weightsync/engine/adapter.hpp"
#include "weightsync/engine/backend.hpp"
#include "weightsync/engine/group_info.hpp"
#include "weightsync/engine/init_request.hpp"
#include "weightsync/engine/registry.hpp"
#include "weightsync/engine/trainer.hpp"
#include "weightsync/engine/update_request.hpp"
#include "weightsync/engine/worker.hpp"
#include "weightsync/host/backend.hpp"
#include "weightsync/vllm.hpp"
