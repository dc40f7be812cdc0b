// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! @deprecated Moved to <weightsync/ipc/transport.hpp>; this forwarding header goes in the next
//! release.

#include "weightsync/config.hpp"
#if !WEIGHTSYNC_HAS_CUDA
#error "<weightsync/cuda/ipc/transport.hpp> needs the CUDA runtime (WEIGHTSYNC_HAS_CUDA=0)"
#endif

#include "weightsync/ipc/transport.hpp"  // IWYU pragma: export
