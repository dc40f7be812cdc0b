// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! @deprecated Moved to <weightsync/c10d/detail/store_engine.hpp> (internal now); this forwarding
//! header goes in the next release.

#include "weightsync/c10d/detail/store_engine.hpp"  // IWYU pragma: export
