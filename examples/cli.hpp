// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// The examples' command lines: "--name value" pairs, --help, and strict parsing of numbers (the
// whole text, in range, or a config_error naming the option and the text; never std::stoi's bare
// "stoi").
#pragma once

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <limits>
#include <string>
#include <string_view>
#include <system_error>

#include <weightsync/detail/format.hpp>
#include <weightsync/error.hpp>

namespace cli {

//! True when argv holds --help or -h (the caller prints its usage and exits 0 before starting
//! anything).
inline bool wants_help(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::string_view(argv[i]) == "--help" || std::string_view(argv[i]) == "-h") return true;
  return false;
}

//! An integer option: all of `text`, within [lo, hi].
inline long long parse_int(const std::string& name, const std::string& text, long long lo,
                           long long hi) {
  long long v = 0;
  const char* end = text.data() + text.size();
  const auto [p, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc{} || p != end || v < lo || v > hi)
    throw weightsync::config_error(name, weightsync::detail::cat("expected an integer in ", lo,
                                                                 "..", hi, ", got '", text, "'"));
  return v;
}

//! A switch: "on" or "off" (also "true"/"false", "1"/"0").
inline bool parse_on_off(const std::string& name, const std::string& text) {
  if (text == "on" || text == "true" || text == "1") return true;
  if (text == "off" || text == "false" || text == "0") return false;
  throw weightsync::config_error(name, "expected on or off, got '" + text + "'");
}

//! A byte count: a whole number, optionally with a binary suffix K, M, G (KiB, MiB, GiB; "KiB",
//! "MiB", "GiB" and a trailing "B" are accepted too): "1M" is 1048576 bytes.
inline std::size_t parse_bytes(const std::string& name, const std::string& text) {
  std::uint64_t v = 0;
  const char* b = text.data();
  const char* end = b + text.size();
  const auto [p, ec] = std::from_chars(b, end, v);
  std::string_view suffix(p, static_cast<std::size_t>(end - p));
  unsigned shift = 0;
  if (suffix == "" || suffix == "B")
    shift = 0;
  else if (suffix == "K" || suffix == "KiB" || suffix == "KB")
    shift = 10;
  else if (suffix == "M" || suffix == "MiB" || suffix == "MB")
    shift = 20;
  else if (suffix == "G" || suffix == "GiB" || suffix == "GB")
    shift = 30;
  else
    shift = 99;
  if (text.empty() || ec != std::errc{} || p == b || shift == 99 ||
      (shift && v > (std::numeric_limits<std::uint64_t>::max() >> shift)))
    throw weightsync::config_error(
        name, weightsync::detail::cat("expected a byte count like 4096, 64K or 1M (K, M, G are "
                                      "KiB, MiB, GiB), got '",
                                      text, "'"));
  return static_cast<std::size_t>(v << shift);
}

//! Walks "--name value" pairs: `on(name, value)` for each. A name not in `known` is "unknown
//! option" listing the known ones, wherever it stands (the last argument too); a known name
//! without a value is an error naming it.
template <class F>
void parse_pairs(int argc, char** argv, std::initializer_list<std::string_view> known, F on) {
  for (int i = 1; i < argc; i += 2) {
    const std::string k = argv[i];
    if (k.rfind("--", 0) != 0)
      throw weightsync::config_error(k, "unexpected argument (options are --name value; --help)");
    if (std::find(known.begin(), known.end(), k) == known.end()) {
      std::string names;
      for (auto n : known) names.append(names.empty() ? "" : " ").append(n);
      throw weightsync::config_error(k, "unknown option (known: " + names + "; --help)");
    }
    if (i + 1 >= argc) throw weightsync::config_error(k, "needs a value (--help)");
    on(k, std::string(argv[i + 1]));
  }
}

}  // namespace cli
