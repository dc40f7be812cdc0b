// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! py_json_dumps: the text Python's `json.dumps(obj, sort_keys=True, separators=(",", ":"))`
//! writes for the same value, byte for byte, so that a digest of it (vLLM's M2N source_digest)
//! matches. Python's defaults hold: ensure_ascii=True (every character outside ' '..'~' as
//! \uXXXX in lower-case hex, a surrogate pair above U+FFFF, and \" \\ \n \r \t \b \f short),
//! allow_nan=True (NaN, Infinity, -Infinity), floats as repr() writes them (the shortest text
//! that reads back, exponent form below 1e-4 and from 1e16 on, "1.0" for whole numbers). Keys come
//! out in code point order, which is the UTF-8 byte order nlohmann's object keeps.

#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "weightsync/detail/format.hpp"
#include "weightsync/error.hpp"

namespace weightsync::detail {

//! The code point at s[i] (UTF-8), advancing i. @throws config_error(field) for bytes that are not
//! UTF-8 (a Python str cannot hold them).
inline char32_t next_code_point(std::string_view s, std::size_t& i, const std::string& field) {
  const auto bad = [&] { throw config_error(field, cat("is not valid UTF-8 (byte ", i, ")")); };
  const auto b0 = static_cast<unsigned char>(s[i]);
  int len = 0;
  char32_t cp = 0;
  if (b0 < 0x80) {
    ++i;
    return b0;
  } else if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
    cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    cp = b0 & 0x0F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    cp = b0 & 0x07;
  } else {
    bad();
  }
  if (i + len > s.size()) bad();
  for (int k = 1; k < len; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) bad();
    cp = (cp << 6) | (b & 0x3F);
  }
  // Overlong forms, surrogates and code points past U+10FFFF are not UTF-8.
  if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
      (cp >= 0xD800 && cp <= 0xDFFF))
    bad();
  i += len;
  return cp;
}

//! `s` as Python's json writes a str with ensure_ascii=True, quotes included.
inline void py_json_string(std::string& out, std::string_view s, const std::string& field) {
  static constexpr char kHex[] = "0123456789abcdef";
  const auto u4 = [&](unsigned v) {
    out += "\\u";
    for (int shift = 12; shift >= 0; shift -= 4) out += kHex[(v >> shift) & 15];
  };
  out += '"';
  for (std::size_t i = 0; i < s.size();) {
    const char32_t c = next_code_point(s, i, field);
    switch (c) {
      case '"':
        out += "\\\"";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      case '\b':
        out += "\\b";
        continue;
      case '\f':
        out += "\\f";
        continue;
      default:
        break;
    }
    if (c >= 0x20 && c <= 0x7E) {
      out += static_cast<char>(c);
    } else if (c <= 0xFFFF) {
      u4(static_cast<unsigned>(c));
    } else {
      const auto v = static_cast<unsigned>(c) - 0x10000;
      u4(0xD800 | (v >> 10));
      u4(0xDC00 | (v & 0x3FF));
    }
  }
  out += '"';
}

//! `x` as Python's float.__repr__ (and so json.dumps) writes it.
inline void py_json_float(std::string& out, double x) {
  if (std::isnan(x)) {
    out += "NaN";
    return;
  }
  if (std::isinf(x)) {
    out += x < 0 ? "-Infinity" : "Infinity";
    return;
  }
  // The shortest digits that read back, as d[.ddd]e[+-]XX; then Python's layout of them.
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  const std::string_view sci(buf, static_cast<std::size_t>(r.ptr - buf));
  const auto epos = sci.find('e');
  std::string_view mant = sci.substr(0, epos);
  const int exp10 = std::atoi(std::string(sci.substr(epos + 1)).c_str());
  if (!mant.empty() && mant[0] == '-') {
    out += '-';
    mant.remove_prefix(1);
  }
  std::string digits;
  for (const char ch : mant)
    if (ch != '.') digits += ch;
  const int n = static_cast<int>(digits.size());
  if (exp10 < -4 || exp10 >= 16) {
    out += digits[0];
    if (n > 1) out += "." + digits.substr(1);
    out += exp10 < 0 ? "e-" : "e+";
    const int a = exp10 < 0 ? -exp10 : exp10;
    if (a < 10) out += '0';
    out += std::to_string(a);
  } else if (exp10 < 0) {
    out += "0." + std::string(static_cast<std::size_t>(-exp10 - 1), '0') + digits;
  } else if (n <= exp10 + 1) {
    out += digits + std::string(static_cast<std::size_t>(exp10 + 1 - n), '0') + ".0";
  } else {
    out += digits.substr(0, static_cast<std::size_t>(exp10 + 1)) + "." +
           digits.substr(static_cast<std::size_t>(exp10 + 1));
  }
}

inline void py_json_dump(std::string& out, const nlohmann::json& j, const std::string& field) {
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      out += "null";
      return;
    case nlohmann::json::value_t::boolean:
      out += j.get<bool>() ? "true" : "false";
      return;
    case nlohmann::json::value_t::number_integer:
      out += std::to_string(j.get<std::int64_t>());
      return;
    case nlohmann::json::value_t::number_unsigned:
      out += std::to_string(j.get<std::uint64_t>());
      return;
    case nlohmann::json::value_t::number_float:
      py_json_float(out, j.get<double>());
      return;
    case nlohmann::json::value_t::string:
      py_json_string(out, j.get_ref<const std::string&>(), field);
      return;
    case nlohmann::json::value_t::array: {
      out += '[';
      for (std::size_t i = 0; i < j.size(); ++i) {
        if (i) out += ',';
        py_json_dump(out, j[i], cat(field, "[", i, "]"));
      }
      out += ']';
      return;
    }
    case nlohmann::json::value_t::object: {
      out += '{';
      bool first = true;
      for (auto it = j.begin(); it != j.end(); ++it) {  // std::map: sorted keys
        if (!first) out += ',';
        first = false;
        py_json_string(out, it.key(), field);
        out += ':';
        py_json_dump(out, it.value(), field.empty() ? it.key() : cat(field, ".", it.key()));
      }
      out += '}';
      return;
    }
    default:
      throw config_error(field, "has no JSON text (binary value)");
  }
}

//! Python's `json.dumps(j, sort_keys=True, separators=(",", ":"))`.
//! @throws config_error naming the entry whose string is not valid UTF-8.
inline std::string py_json_dumps(const nlohmann::json& j) {
  std::string out;
  py_json_dump(out, j, "");
  return out;
}

}  // namespace weightsync::detail
