// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! @deprecated Split by idea into <weightsync/vllm/init_info.hpp>,
//! <weightsync/vllm/update_info.hpp>, <weightsync/vllm/m2n_info.hpp> and
//! <weightsync/vllm/json.hpp>, all included by <weightsync/vllm.hpp>; this forwarding header goes
//! in the next release.

#include "weightsync/vllm.hpp"  // IWYU pragma: export
