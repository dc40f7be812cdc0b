// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! @deprecated Moved to <weightsync/ipc/backend.hpp> (from here in 0.1, then from
//! <weightsync/cuda/ipc/backend.hpp>); this forwarding header goes in the next release. Empty
//! without CUDA, as before.

#include "weightsync/config.hpp"

#if WEIGHTSYNC_HAS_CUDA
#include "weightsync/ipc/backend.hpp"
#endif
