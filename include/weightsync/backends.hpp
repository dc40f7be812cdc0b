// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Every built-in backend this build has, each registered with BackendRegistry::global() by its
//! own header: "host" (host/backend.hpp), "nccl" with NCCL (nccl/backend.hpp), "ipc" and "p2p"
//! with CUDA (ipc/backend.hpp). Include it (or weightsync.hpp) in a program that picks its
//! backend by name at run time.

#include "weightsync/config.hpp"

#include "weightsync/host/backend.hpp"
#if WEIGHTSYNC_HAS_CUDA
#include "weightsync/ipc/backend.hpp"
#endif
#if WEIGHTSYNC_HAS_NCCL
#include "weightsync/nccl/backend.hpp"
#endif
