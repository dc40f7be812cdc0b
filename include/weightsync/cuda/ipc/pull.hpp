// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! @deprecated Moved to <weightsync/ipc/detail/pull.hpp> (internal now); this forwarding header
//! goes in the next release.

#include "weightsync/config.hpp"
#if !WEIGHTSYNC_HAS_CUDA
#error "<weightsync/cuda/ipc/pull.hpp> needs the CUDA runtime (WEIGHTSYNC_HAS_CUDA=0)"
#endif

#include "weightsync/ipc/detail/pull.hpp"  // IWYU pragma: export
