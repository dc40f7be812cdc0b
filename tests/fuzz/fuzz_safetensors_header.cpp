// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// The safetensors header parser (parse_safetensors_header, what SafetensorsFile::open runs on a
// checkpoint): any bytes either parse into a header whose tensors tile the data buffer inside the
// input, or throw config_error; nothing else. A parsed header written again by the writer's
// safetensors_prefix parses back to the same tensors and metadata.
#include <weightsync/safetensors/header.hpp>
#include <weightsync/safetensors/writer.hpp>

#include <span>

#include "fuzz_support.hpp"

namespace ws = weightsync;

WS_FUZZ_ENTRY {
  const std::span<const std::byte> file(reinterpret_cast<const std::byte*>(data), size);
  ws::SafetensorsHeader h;
  try {
    h = ws::parse_safetensors_header(file);
  } catch (const ws::config_error&) {
    return 0;
  }
  ws_fuzz::require(h.data_offset == 8 + h.header_bytes && h.data_offset + h.data_bytes == size,
                   "data buffer is not the rest of the input");
  std::uint64_t at = 0;
  std::vector<ws::TensorMeta> metas;
  for (const auto& e : h.tensors) {
    ws_fuzz::require(e.begin == at && e.begin <= e.end && e.end <= h.data_bytes,
                     "tensors do not tile the data buffer");
    ws_fuzz::require(e.end - e.begin == e.meta.nbytes(), "byte range does not match dtype x shape");
    at = e.end;
    metas.push_back(e.meta);
  }
  ws_fuzz::require(at == h.data_bytes, "tensors do not cover the data buffer");
  // Round trip through the writer (names and metadata re-escaped by nlohmann).
  std::vector<std::uint64_t> offsets;
  const std::string prefix = ws::detail::safetensors_prefix(metas, h.metadata, offsets);
  ws::SafetensorsHeader again;
  try {
    again = ws::parse_safetensors_json(std::string_view(prefix).substr(8), h.data_bytes);
  } catch (const ws::config_error& e) {
    std::fprintf(stderr, "re-parse: %s\n", e.what());
    ws_fuzz::require(false, "the writer's header for a parsed header does not parse");
  }
  ws_fuzz::require(again.tensors == h.tensors, "tensors changed in a write/parse round trip");
  ws_fuzz::require(again.metadata == h.metadata, "metadata changed in a write/parse round trip");
  return 0;
}
