// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Deprecated (kept for one release): the IPC backends moved to <weightsync/ipc/backend.hpp>.
//! Empty without CUDA, as before.

#include "weightsync/config.hpp"

#if WEIGHTSYNC_HAS_CUDA
#include "weightsync/ipc/backend.hpp"
#endif
