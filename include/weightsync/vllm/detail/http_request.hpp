// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! An HTTP/1.1 request read from bytes as they arrive, before cpp-httplib sees it (ControlServer):
//! the request line and every header checked (RFC 9110/9112 syntax, UTF-8 once percent-decoded),
//! the body framed (a Content-Length, or chunks joined), and the request rewritten in the one
//! form cpp-httplib reads without surprise: no Transfer-Encoding, no Expect, a Content-Length.
//! A malformed request is a status and a message that quotes the offending bytes escaped
//! (printable ASCII only, so a JSON dump of the message cannot throw). No socket here: the
//! fuzzer drives it with bytes.

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <system_error>

#include "weightsync/detail/format.hpp"

namespace weightsync::http::detail {

//! `s` with every byte that is not printable ASCII written as \xHH and a backslash as \\, at
//! most `max` bytes of it (then "..."): safe in a log line, a header and a JSON string.
inline std::string escaped(std::string_view s, std::size_t max = 64) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (std::size_t i = 0; i < s.size() && i < max; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '\\') {
      out += "\\\\";
    } else if (c >= 0x20 && c < 0x7F) {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  if (s.size() > max) out += "...";
  return out;
}

//! True when `s` is well-formed UTF-8 (no overlong forms, no surrogates, nothing past U+10FFFF).
inline bool valid_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t n = 0;
    unsigned lo = 0x80, hi = 0xBF;  // the second byte's range
    if (c >= 0xC2 && c <= 0xDF) n = 1;
    else if (c == 0xE0) n = 2, lo = 0xA0;
    else if (c >= 0xE1 && c <= 0xEF) n = 2, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c == 0xF0) n = 3, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3) n = 3;
    else if (c == 0xF4) n = 3, hi = 0x8F;
    else return false;
    if (s.size() - i <= n) return false;
    for (std::size_t k = 1; k <= n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return false;
    }
    i += n + 1;
  }
  return true;
}

//! `s` with every %XX (two hex digits) decoded; anything else as it is.
inline std::string percent_decoded(std::string_view s) {
  auto digit = [](char c) {
    return c >= '0' && c <= '9' ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
  };
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && digit(s[i + 1]) >= 0 && digit(s[i + 2]) >= 0) {
      out += static_cast<char>(digit(s[i + 1]) * 16 + digit(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

//! ASCII case-insensitive equality (header names, "chunked").
inline bool iequals(std::string_view a, std::string_view b) {
  auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; };
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (lower(a[i]) != lower(b[i])) return false;
  return true;
}

//! RFC 9110's token: one or more of ALPHA, DIGIT and !#$%&'*+-.^_`|~.
inline bool is_token(std::string_view s) {
  if (s.empty()) return false;
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    const bool alnum = (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z');
    if (!alnum && std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) ==
                      std::string_view::npos)
      return false;
  }
  return true;
}

//! What a failed check answers: the status, why (escaped), and the field it names ("" if none).
struct Refusal {
  int status = 0;
  std::string why;
  std::string field;
};

//! The request target's path and query, each checked to be UTF-8 once percent-decoded (what a
//! route reads; a query parameter is named by its key). False with `r` set otherwise.
inline bool check_target_text(std::string_view target, Refusal& r) {
  using weightsync::detail::cat;
  const std::size_t q = target.find('?');
  const std::string path = percent_decoded(target.substr(0, q));
  if (!valid_utf8(path)) {
    r = {400, cat("the request path '", escaped(target.substr(0, q)),
                  "' is not UTF-8 once percent-decoded"), "path"};
    return false;
  }
  if (q == std::string_view::npos) return true;
  std::string_view query = target.substr(q + 1);
  while (!query.empty()) {
    const std::size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    const std::size_t eq = pair.find('=');
    const std::string key = percent_decoded(pair.substr(0, eq));
    const std::string_view value =
        eq == std::string_view::npos ? std::string_view{} : pair.substr(eq + 1);
    if (!valid_utf8(key)) {
      r = {400, cat("a query parameter's name '", escaped(pair.substr(0, eq)),
                    "' is not UTF-8 once percent-decoded"), "query"};
      return false;
    }
    if (!valid_utf8(percent_decoded(value))) {
      r = {400, cat("query parameter '", escaped(key), "': its value '", escaped(value),
                    "' is not UTF-8 once percent-decoded"), key};
      return false;
    }
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
  }
  return true;
}

//! The request line: "METHOD target HTTP/1.x", one space apart, a method cpp-httplib serves, a
//! target of printable ASCII. False with `r` set otherwise (400; 501 for another method; 505 for
//! another HTTP version).
inline bool check_request_line(std::string_view line, Refusal& r) {
  using weightsync::detail::cat;
  constexpr auto npos = std::string_view::npos;
  const std::size_t a = line.find(' ');
  const std::size_t b = a == npos ? npos : line.find(' ', a + 1);
  if (a == npos || b == npos || line.find(' ', b + 1) != npos) {
    r = {400, cat("the request line '", escaped(line),
                  "' is not 'METHOD /target HTTP/1.1' (one space apart)"), "request line"};
    return false;
  }
  const std::string_view method = line.substr(0, a), target = line.substr(a + 1, b - a - 1),
                         version = line.substr(b + 1);
  if (!is_token(method)) {
    r = {400, cat("the request method '", escaped(method), "' is not a token"), "method"};
    return false;
  }
  bool known = false;
  for (const char* m : {"GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH"})
    known = known || method == m;
  if (!known) {
    r = {501, cat("method '", escaped(method), "' is not implemented"), "method"};
    return false;
  }
  bool printable = !target.empty();
  for (const char c : target)
    printable = printable && static_cast<unsigned char>(c) > 0x20 && static_cast<unsigned char>(c) < 0x7F;
  if (!printable) {
    r = {400, cat("the request target '", escaped(target),
                  "' is empty or has a byte that is not printable ASCII"), "target"};
    return false;
  }
  if (version != "HTTP/1.1" && version != "HTTP/1.0") {
    const bool http = version.size() == 8 && version.substr(0, 5) == "HTTP/" &&
                      version[5] >= '0' && version[5] <= '9' && version[6] == '.' &&
                      version[7] >= '0' && version[7] <= '9';
    r = {http ? 505 : 400, cat("the HTTP version '", escaped(version), "' is not HTTP/1.1 or HTTP/1.0"),
         "version"};
    return false;
  }
  return check_target_text(target, r);
}

//! A header line "Name: value": a token name right before the colon, a value without control
//! bytes (a tab aside) that is UTF-8. Sets `name` and `value` (without surrounding blanks).
inline bool check_header_line(std::string_view line, std::string_view& name,
                              std::string_view& value, Refusal& r) {
  using weightsync::detail::cat;
  if (!line.empty() && (line[0] == ' ' || line[0] == '\t')) {
    r = {400, cat("the header line '", escaped(line),
                  "' starts with a blank (obsolete line folding is refused)"), "header"};
    return false;
  }
  const std::size_t colon = line.find(':');
  name = line.substr(0, colon);
  if (colon == std::string_view::npos || !is_token(name)) {
    r = {400, cat("the header line '", escaped(line), "' is not 'Name: value' with a token name"),
         "header"};
    return false;
  }
  value = line.substr(colon + 1);
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
  for (const char ch : value) {
    const auto c = static_cast<unsigned char>(ch);
    if ((c < 0x20 && c != '\t') || c == 0x7F) {
      r = {400, cat("header '", escaped(name), "': its value '", escaped(value),
                    "' has a control byte"), std::string(name)};
      return false;
    }
  }
  if (!valid_utf8(value)) {
    r = {400, cat("header '", escaped(name), "': its value '", escaped(value), "' is not UTF-8"),
         std::string(name)};
    return false;
  }
  return true;
}

//! The limits a request is read under (ServerLimits and the server's payload limit).
struct RequestLimits {
  std::size_t max_header_bytes = std::size_t{64} << 10;
  std::size_t max_header_count = 100;
  std::size_t max_body_bytes = std::numeric_limits<std::size_t>::max();
};

}  // namespace weightsync::http::detail
