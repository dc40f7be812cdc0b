// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace weightsync::detail {

//! Concatenates streamable values into a string (std::format is not in GCC 12).
template <class... Args>
std::string cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

//! Renders v as hexadecimal digits, no prefix: `digits` wide (zero-padded), or as few as needed
//! when digits is 0.
inline std::string hex(std::uint64_t v, int digits = 16) {
  static constexpr char d[] = "0123456789abcdef";
  std::string s;
  do {
    s.insert(s.begin(), d[v & 15]);
    v >>= 4;
  } while (v != 0 || static_cast<int>(s.size()) < digits);
  return s;
}

//! Renders a shape as "(a, b, c)" the way torch prints it; "()" for a scalar.
inline std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::ostringstream os;
  os << '(';
  for (std::size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  if (shape.size() == 1) os << ',';
  os << ')';
  return os.str();
}

}  // namespace weightsync::detail
