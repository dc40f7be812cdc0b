// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The engines: WeightTransferEngine on the inference side (vLLM's worker API: init, start, update,
//! finish with a version, shutdown; engine/worker.hpp) and TrainerEngine on the training side
//! (trainer_init, send_weights; engine/trainer.hpp), over backends chosen by name from a registry
//! (engine/registry.hpp): "host" and "nccl" (engine/comm_backend.hpp), "ipc" and "p2p"
//! (engine/ipc_backend.hpp), all behind the Backend interface (engine/backend.hpp).

#include "weightsync/engine/backend.hpp"
#include "weightsync/engine/comm_backend.hpp"
#include "weightsync/engine/ipc_backend.hpp"
#include "weightsync/engine/registry.hpp"
#include "weightsync/engine/trainer.hpp"
#include "weightsync/engine/worker.hpp"
