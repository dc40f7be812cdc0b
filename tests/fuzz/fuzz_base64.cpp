// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Base64: the strict decoder accepts exactly the canonical encodings (decode then encode gives the
// input back), encoding any bytes decodes back to them, and decode_unique_id_b64 only throws
// config_error.
#include <weightsync/detail/base64.hpp>
#include <weightsync/vllm.hpp>

#include <span>

#include "fuzz_support.hpp"

namespace ws = weightsync;

WS_FUZZ_ENTRY {
  const auto in = ws_fuzz::bytes(data, size);
  std::string why;
  if (auto out = ws::detail::base64_decode(in, why)) {
    ws_fuzz::require(ws::detail::base64_encode(*out) == in, "accepted a non-canonical encoding");
  } else {
    ws_fuzz::require(!why.empty(), "refused without a reason");
  }
  const auto raw = std::as_bytes(std::span(data, size));
  const auto enc = ws::detail::base64_encode(raw);
  why.clear();
  const auto back = ws::detail::base64_decode(enc, why);
  ws_fuzz::require(back && back->size() == size &&
                       std::equal(back->begin(), back->end(), raw.begin()),
                   "decode(encode(x)) != x");
  try {
    (void)ws::decode_unique_id_b64(std::string(in));
  } catch (const ws::config_error&) {
  }
  return 0;
}
