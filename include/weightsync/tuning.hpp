// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The transfer defaults every side agrees on by default: vLLM's packed chunk size and ring depth,
//! and their bounds. Header-only constants with no dependency, so that the generic pipeline
//! (transfer_options.hpp) needs nothing of vLLM's JSON (info.hpp re-exports them).

#include <cstddef>
#include <cstdint>

namespace weightsync {

//! vLLM's DEFAULT_PACKED_BUFFER_SIZE_BYTES (1 GiB).
inline constexpr std::int64_t kDefaultPackedBufferSizeBytes = std::int64_t{1} << 30;
//! vLLM's DEFAULT_PACKED_NUM_BUFFERS.
inline constexpr int kDefaultPackedNumBuffers = 2;
//! Upper bound on packed_num_buffers.
inline constexpr int kMaxPackedNumBuffers = 8;

}  // namespace weightsync
