// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! What every libFuzzer target shares: the entry point's signature and a check that aborts (so
//! libFuzzer keeps the input as a crash) with a message.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#define WS_FUZZ_ENTRY extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)

namespace ws_fuzz {

inline void require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "fuzz property violated: %s\n", what);
  std::abort();
}

inline std::string_view bytes(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace ws_fuzz
