// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! SLURM host lists (`SLURM_JOB_NODELIST`, `srun -w`, slurm.conf's `Nodes=`) expanded into host
//! names, one by one, as `scontrol show hostnames` prints them; no subprocess, no slurm library.
//!
//! The grammar (SLURM's bracketed host lists, dims = 1, with the name suffixes of SLURM 23.11):
//!   - Names are separated by commas, spaces, tabs or new lines, outside brackets; runs of
//!     separators and separators at either end are ignored (" a,, b\n" is a, b; "" is no name).
//!   - A name holds zero or more bracket groups: `prefix[ranges]suffix`, `rack[1-2]-node[01-02]`,
//!     `127.0.0.[1-4]`, `a[1-2]-ib`. A group is a comma-separated list of numbers (`7`) and
//!     ascending ranges (`3-5`, `3-3`) of decimal digits. A range is as wide as its low bound: it
//!     keeps that many digits, zero-padded (`node[001-004,010]` is node001 .. node004, node010;
//!     `[08-10]` is 08, 09, 10; `[1-010]` is 1 .. 10).
//!   - Several groups multiply, in SLURM's order: the last group varies fastest, the one before
//!     it slowest, then the others from right to left (SLURM expands the prefix recursively from
//!     its last group). For two groups that is the usual order, rack1-node01, rack1-node02,
//!     rack2-node01, ...; `a[1-2]b[3-4]c[5-6]` gives a1b3c5 a1b3c6 a2b3c5 a2b3c6 a1b4c5 ....
//!   - Order and duplicates are kept (`tux2,tux1,tux2` is three names).
//!
//! Refused, each with a weightsync::config_error naming the character and its position (counted
//! from 1) in the list: a `]` with no `[` open, nested or unclosed brackets, an empty group or
//! item (`a[]`, `a[1,]`), a descending range (`a[3-1]`), a range without a bound (`a[1-]`,
//! `a[-1]`), signs, white space or letters inside brackets (SLURM reads `a[ 1-2]` as a01, a02 and
//! `a[1-]` as a1: quirks of strtoul, refused here), SLURM's multi-dimensional boxes
//! (`[000x133]`), slurmctld's hostlist functions (`feature{name}`), control characters and bytes
//! outside ASCII. A range may name at most 65536 hosts (SLURM's MAX_RANGE) and a list at most
//! 1048576 names.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "weightsync/detail/format.hpp"
#include "weightsync/error.hpp"

namespace weightsync {

//! The most hosts one range of a host list may name (SLURM's MAX_RANGE).
inline constexpr std::uint64_t kHostlistMaxRange = 65536;
//! The most names one host list may expand to.
inline constexpr std::size_t kHostlistMaxNames = std::size_t{1} << 20;

namespace detail {

//! One name of a host list: literals[0] group[0] literals[1] ... group[n-1] literals[n], each
//! group's numbers already formatted (zero-padded) in their order.
struct HostlistName {
  std::vector<std::string> literals{std::string{}};
  std::vector<std::vector<std::string>> groups;
};

inline bool hostlist_separator(char c) {
  return c == ',' || c == ' ' || c == '\t' || c == '\n';
}

//! A character as an error message shows it: ']' or, unprintable, "byte 0x0d".
inline std::string hostlist_char(char c) {
  const auto u = static_cast<unsigned char>(c);
  if (u < 0x20 || u >= 0x7f) return cat("byte 0x", hex(u, 2));
  return cat('\'', c, '\'');
}

//! The list, quoted, printable bytes as they are and others as \xNN; a long list as the 60
//! characters either side of pos.
inline std::string hostlist_quote(std::string_view s, std::size_t pos) {
  std::size_t from = 0, to = s.size();
  if (s.size() > 120) {
    from = pos > 60 ? pos - 60 : 0;
    to = pos + 60 < s.size() ? pos + 60 : s.size();
  }
  std::string out = from > 0 ? "'..." : "'";
  for (std::size_t i = from; i < to; ++i) {
    const auto u = static_cast<unsigned char>(s[i]);
    if (u < 0x20 || u >= 0x7f)
      out += cat("\\x", hex(u, 2));
    else
      out += s[i];
  }
  return out + (to < s.size() ? "...'" : "'");
}

//! Throws the host list's config_error: "<what>: <message> at position <pos + 1> in
//! '<list>'<tail>".
[[noreturn]] inline void hostlist_fail(std::string_view what, std::string_view s, std::size_t pos,
                                       const std::string& message, const std::string& tail = {}) {
  throw config_error(std::string(what),
                     cat(message, " at position ", pos + 1, " in ", hostlist_quote(s, pos), tail));
}

//! What a character that may not stand where it stands is: the message's tail explains it.
[[noreturn]] inline void hostlist_unexpected(std::string_view what, std::string_view s,
                                             std::size_t pos, bool in_brackets) {
  const char c = s[pos];
  const auto u = static_cast<unsigned char>(c);
  std::string tail;
  if (u < 0x20 || u >= 0x7f)
    tail = " (host lists are printable ASCII)";
  else if (c == ']')
    tail = " (no '[' is open)";
  else if (c == '[')
    tail = " (brackets do not nest)";
  else if (c == '{' || c == '}')
    tail = " (hostlist functions such as feature{name} are expanded by slurmctld, not here)";
  else if (c == ' ' || c == '\t' || c == '\n')
    tail = " (no white space inside brackets)";
  else if (c == 'x' && in_brackets)
    tail = " (multi-dimensional boxes are not supported)";
  else if (in_brackets)
    tail = " (brackets hold numbers and ranges: '1', '3-5', separated by ',')";
  hostlist_fail(what, s, pos, cat("unexpected ", hostlist_char(c)), tail);
}

inline bool hostlist_digit(char c) {
  return c >= '0' && c <= '9';
}

//! The digits from i on (at least one, at most 18); i is left past them.
inline std::uint64_t hostlist_number(std::string_view what, std::string_view s, std::size_t& i) {
  const std::size_t begin = i;
  if (i >= s.size()) hostlist_fail(what, s, i, "unexpected end of the list inside brackets");
  if (!hostlist_digit(s[i])) {
    if (s[i] == ',' || s[i] == ']' || s[i] == '-')
      hostlist_fail(what, s, i, cat("expected a number, found ", hostlist_char(s[i])));
    hostlist_unexpected(what, s, i, true);
  }
  std::uint64_t v = 0;
  while (i < s.size() && hostlist_digit(s[i])) {
    if (i - begin == 18) hostlist_fail(what, s, begin, "a number of more than 18 digits");
    v = v * 10 + static_cast<std::uint64_t>(s[i] - '0');
    ++i;
  }
  return v;
}

//! Appends lo..hi, each zero-padded to width digits.
inline void hostlist_append_range(std::vector<std::string>& out, std::uint64_t lo, std::uint64_t hi,
                                  std::size_t width) {
  for (std::uint64_t v = lo;; ++v) {
    std::string d = std::to_string(v);
    if (d.size() < width) d.insert(0, width - d.size(), '0');
    out.push_back(std::move(d));
    if (v == hi) break;
  }
}

//! The group opened at s[i] == '['; i is left past its ']'. Its numbers, formatted, in order.
inline std::vector<std::string> hostlist_group(std::string_view what, std::string_view s,
                                               std::size_t& i) {
  const std::size_t open = i++;
  std::vector<std::string> values;
  for (;;) {
    if (i >= s.size()) hostlist_fail(what, s, open, "'[' never closed");
    const std::size_t item = i;
    const std::uint64_t lo = hostlist_number(what, s, i);
    const std::size_t width = i - item;
    std::uint64_t hi = lo;
    if (i < s.size() && s[i] == '-') {
      ++i;
      if (i >= s.size()) hostlist_fail(what, s, open, "'[' never closed");
      hi = hostlist_number(what, s, i);
      if (hi < lo)
        hostlist_fail(what, s, item, cat("descending range '", s.substr(item, i - item), "'"));
      if (hi - lo >= kHostlistMaxRange)
        hostlist_fail(what, s, item, cat("range '", s.substr(item, i - item), "'"),
                      cat(" names ", hi - lo + 1, " hosts, more than ", kHostlistMaxRange));
    }
    if (values.size() + (hi - lo + 1) > kHostlistMaxNames)
      hostlist_fail(what, s, open,
                    cat("a bracket group of more than ", kHostlistMaxNames, " numbers"));
    hostlist_append_range(values, lo, hi, width);
    if (i >= s.size()) hostlist_fail(what, s, open, "'[' never closed");
    if (s[i] == ']') {
      ++i;
      return values;
    }
    if (s[i] != ',') hostlist_unexpected(what, s, i, true);
    ++i;
  }
}

//! The name that starts at s[i] (not a separator); i is left at the separator or the end after it.
inline HostlistName hostlist_name(std::string_view what, std::string_view s, std::size_t& i) {
  HostlistName name;
  while (i < s.size() && !hostlist_separator(s[i])) {
    const char c = s[i];
    const auto u = static_cast<unsigned char>(c);
    if (c == '[') {
      name.groups.push_back(hostlist_group(what, s, i));
      name.literals.emplace_back();
      continue;
    }
    if (c == ']' || c == '{' || c == '}' || u < 0x20 || u >= 0x7f)
      hostlist_unexpected(what, s, i, false);
    name.literals.back() += c;
    ++i;
  }
  return name;
}

//! Appends the names one name of the list expands to, in SLURM's order (see the file comment):
//! an odometer whose wheels, slowest first, are groups n-2, n-3, ..., 0, then n-1.
inline void hostlist_expand_name(const HostlistName& name, std::vector<std::string>& out,
                                 std::string_view what) {
  const std::size_t n = name.groups.size();
  std::size_t count = 1;
  for (const auto& g : name.groups) {
    if (g.size() > kHostlistMaxNames / count)
      throw config_error(std::string(what),
                         cat("expands to more than ", kHostlistMaxNames, " host names"));
    count *= g.size();
  }
  if (out.size() + count > kHostlistMaxNames)
    throw config_error(std::string(what),
                       cat("expands to more than ", kHostlistMaxNames, " host names"));
  std::vector<std::size_t> wheel;  // group index of each wheel, slowest first
  for (std::size_t k = n; k-- > 1;) wheel.push_back(k - 1);
  if (n > 0) wheel.push_back(n - 1);
  std::vector<std::size_t> at(n, 0);
  for (std::size_t done = 0; done < count; ++done) {
    std::string host = name.literals[0];
    for (std::size_t g = 0; g < n; ++g) host += name.groups[g][at[g]] + name.literals[g + 1];
    out.push_back(std::move(host));
    for (std::size_t w = wheel.size(); w-- > 0;) {  // advance, fastest wheel first
      const std::size_t g = wheel[w];
      if (++at[g] < name.groups[g].size()) break;
      at[g] = 0;
    }
  }
}

}  // namespace detail

//! Expands a SLURM host list into its host names, in order, as `scontrol show hostnames` prints
//! them (the grammar and what is refused: see this file's comment). `what` names the list in
//! errors (e.g. "SLURM_JOB_NODELIST"). An empty list, or one of separators only, is no name.
//! @throws config_error naming `what`, the offending character and its position (from 1), e.g.
//!   "[weightsync.config] SLURM_JOB_NODELIST: unexpected ']' at position 5 in 'node]1['
//!   (no '[' is open)".
inline std::vector<std::string> expand_hostlist(std::string_view list,
                                                std::string_view what = "host list") {
  std::vector<std::string> out;
  std::size_t i = 0;
  for (;;) {
    while (i < list.size() && detail::hostlist_separator(list[i])) ++i;
    if (i >= list.size()) return out;
    detail::hostlist_expand_name(detail::hostlist_name(what, list, i), out, what);
  }
}

}  // namespace weightsync
