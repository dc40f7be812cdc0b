// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// libFuzzer target for the safetensors header parser (self-contained: no test support needed).
// Build: clang++ -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -Iinclude \
//          tests/fuzz/safetensors_header_fuzz.cpp -o st_fuzz && ./st_fuzz -max_total_time=60
// Any input must either parse into a header whose every tensor lies inside the input, or throw
// weightsync::config_error. Anything else (a crash, another exception, a bound outside the input)
// is a finding.
#include <weightsync/safetensors/header.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> file(reinterpret_cast<const std::byte*>(data), size);
  try {
    const auto h = weightsync::parse_safetensors_header(file);
    for (const auto& e : h.tensors)
      if (e.begin > e.end || h.data_offset + e.end > size || e.end - e.begin != e.meta.nbytes())
        std::abort();
  } catch (const weightsync::config_error&) {
  }
  return 0;
}
