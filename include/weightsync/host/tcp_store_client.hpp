// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! @deprecated Moved to <weightsync/c10d/client.hpp>; this forwarding header goes in the next
//! release.

#include "weightsync/c10d/client.hpp"  // IWYU pragma: export
