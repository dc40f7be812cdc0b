// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace weightsync::detail {

//! Standard base64 (RFC 4648 section 4, '+' '/' and '=' padding), as Python's base64.b64encode.
inline std::string base64_encode(std::span<const std::byte> in) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 3 <= in.size(); i += 3) {
    const auto v = (std::uint32_t(in[i]) << 16) | (std::uint32_t(in[i + 1]) << 8) |
                   std::uint32_t(in[i + 2]);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  if (const auto rest = in.size() - i; rest > 0) {
    std::uint32_t v = std::uint32_t(in[i]) << 16;
    if (rest == 2) v |= std::uint32_t(in[i + 1]) << 8;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += rest == 2 ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

//! Strict standard base64 decode: length a multiple of 4, padding only at the end, no whitespace,
//! and the unused bits of the last group zero (so every input has one canonical encoding).
//! @returns std::nullopt with `why` set when the input is not canonical base64.
inline std::optional<std::vector<std::byte>> base64_decode(std::string_view in, std::string& why) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  if (in.size() % 4 != 0) {
    why = "length " + std::to_string(in.size()) + " is not a multiple of 4";
    return std::nullopt;
  }
  std::vector<std::byte> out;
  out.reserve(in.size() / 4 * 3);
  for (std::size_t i = 0; i < in.size(); i += 4) {
    const bool last = i + 4 == in.size();
    int pad = 0;
    std::uint32_t v = 0;
    for (std::size_t k = 0; k < 4; ++k) {
      const char c = in[i + k];
      if (c == '=') {
        if (!last || k < 2) {
          why = "misplaced '=' at offset " + std::to_string(i + k);
          return std::nullopt;
        }
        ++pad;
        v <<= 6;
        continue;
      }
      if (pad > 0) {
        why = "data after '=' at offset " + std::to_string(i + k);
        return std::nullopt;
      }
      const int x = value(c);
      if (x < 0) {
        why = "invalid character at offset " + std::to_string(i + k);
        return std::nullopt;
      }
      v = (v << 6) | std::uint32_t(x);
    }
    if ((pad == 1 && (v & 0xff) != 0) || (pad == 2 && (v & 0xffff) != 0)) {
      why = "non-zero padding bits in the last group";
      return std::nullopt;
    }
    out.push_back(std::byte((v >> 16) & 0xff));
    if (pad < 2) out.push_back(std::byte((v >> 8) & 0xff));
    if (pad < 1) out.push_back(std::byte(v & 0xff));
  }
  return out;
}

}  // namespace weightsync::detail
