// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! @deprecated Moved to <weightsync/ipc/detail/shm_mailbox.hpp> (internal now); this forwarding
//! header goes in the next release.

#include "weightsync/ipc/detail/shm_mailbox.hpp"  // IWYU pragma: export
