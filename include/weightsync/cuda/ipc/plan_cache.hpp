// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! @deprecated Moved to <weightsync/ipc/detail/plan_cache.hpp> (internal now); this forwarding
//! header goes in the next release.

#include "weightsync/config.hpp"
#if !WEIGHTSYNC_HAS_CUDA
#error "<weightsync/cuda/ipc/plan_cache.hpp> needs the CUDA runtime (WEIGHTSYNC_HAS_CUDA=0)"
#endif

#include "weightsync/ipc/detail/plan_cache.hpp"  // IWYU pragma: export
