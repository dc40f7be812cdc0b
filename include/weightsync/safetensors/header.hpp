// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The safetensors header, parsed from bytes with every bound checked: a pure function (no I/O)
//! that a fuzzer can call. Layout: an 8-byte little-endian header length N, N bytes of JSON
//! (`{"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, ...,
//! "__metadata__": {"key": "value"}}`, padded with spaces), then the data buffer. Offsets are
//! relative to the data buffer, which the tensors must cover exactly: no overlap, no hole.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "weightsync/detail/format.hpp"
#include "weightsync/dtype.hpp"
#include "weightsync/error.hpp"
#include "weightsync/tensor_meta.hpp"

namespace weightsync {

//! One tensor of a safetensors file: its meta and its byte range [begin, end) in the data buffer.
struct SafetensorsEntry {
  TensorMeta meta;
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
  friend bool operator==(const SafetensorsEntry&, const SafetensorsEntry&) = default;
};

//! A parsed, validated header.
struct SafetensorsHeader {
  //! The tensors in data-buffer order (by begin offset; zero-size ties by name).
  std::vector<SafetensorsEntry> tensors;
  //! The `__metadata__` string map, sorted by key (empty when absent).
  std::vector<std::pair<std::string, std::string>> metadata;
  //! N, the JSON header's length in bytes.
  std::uint64_t header_bytes = 0;
  //! Where the data buffer starts in the file: 8 + N.
  std::uint64_t data_offset = 0;
  //! Length of the data buffer: the last tensor's end.
  std::uint64_t data_bytes = 0;
};

//! The largest header accepted (the reference implementation's limit, 100 MB).
inline constexpr std::uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;

//! The safetensors spelling of a dtype ("BF16").
inline std::string_view safetensors_dtype_name(DType d) {
  switch (d) {
    case DType::float32:
      return "F32";
    case DType::float16:
      return "F16";
    case DType::bfloat16:
      return "BF16";
    case DType::float64:
      return "F64";
    case DType::int8:
      return "I8";
    case DType::uint8:
      return "U8";
    case DType::int16:
      return "I16";
    case DType::int32:
      return "I32";
    case DType::int64:
      return "I64";
    case DType::bool_:
      return "BOOL";
    case DType::float8_e4m3fn:
      return "F8_E4M3";
    case DType::float8_e5m2:
      return "F8_E5M2";
  }
  throw config_error("dtype", "invalid DType value " + std::to_string(static_cast<int>(d)));
}

//! Parses a safetensors dtype name. @throws config_error naming `field` for a name weightsync has
//! no DType for (U16, U32, U64, F8_E8M0, F4, C64, ...).
inline DType parse_safetensors_dtype(std::string_view name, const std::string& field = "dtype") {
  for (DType d : all_dtypes())
    if (safetensors_dtype_name(d) == name) return d;
  throw config_error(field, "unknown or unsupported safetensors dtype '" + std::string(name) +
                                "' (supported: F32, F16, BF16, F64, I8, U8, I16, I32, I64, BOOL, "
                                "F8_E4M3, F8_E5M2)");
}

namespace detail {

inline std::string st_field(const std::string& tensor, std::string_view key) {
  return "safetensors tensor '" + tensor + "' " + std::string(key);
}

inline std::uint64_t st_uint(const nlohmann::json& v, const std::string& field) {
  if (!v.is_number_unsigned()) {
    if (v.is_number_integer()) throw config_error(field, "must be >= 0, got " + v.dump());
    throw config_error(field, std::string("expected a non-negative integer, got ") + v.type_name());
  }
  return v.get<std::uint64_t>();
}

//! Reads one tensor entry ({"dtype", "shape", "data_offsets"}, nothing else).
inline SafetensorsEntry st_entry(const std::string& name, const nlohmann::json& v) {
  if (!v.is_object())
    throw config_error(st_field(name, ""), std::string("expected an object, got ") + v.type_name());
  for (auto it = v.begin(); it != v.end(); ++it)
    if (it.key() != "dtype" && it.key() != "shape" && it.key() != "data_offsets")
      throw config_error(st_field(name, it.key()),
                         "unknown key (known keys: dtype, shape, data_offsets)");
  auto need = [&](const char* key) -> const nlohmann::json& {
    auto it = v.find(key);
    if (it == v.end()) throw config_error(st_field(name, key), "missing");
    return *it;
  };
  SafetensorsEntry e;
  e.meta.name = name;
  const auto& dt = need("dtype");
  if (!dt.is_string())
    throw config_error(st_field(name, "dtype"),
                       std::string("expected a string, got ") + dt.type_name());
  e.meta.dtype = parse_safetensors_dtype(dt.get_ref<const std::string&>(), st_field(name, "dtype"));
  const auto& shape = need("shape");
  if (!shape.is_array())
    throw config_error(st_field(name, "shape"),
                       std::string("expected an array, got ") + shape.type_name());
  for (std::size_t i = 0; i < shape.size(); ++i) {
    const std::string f = st_field(name, cat("shape[", i, "]"));
    const std::uint64_t d = st_uint(shape[i], f);
    if (d > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      throw config_error(f, "dim " + std::to_string(d) + " is out of range");
    e.meta.shape.push_back(static_cast<std::int64_t>(d));
  }
  const auto& off = need("data_offsets");
  if (!off.is_array() || off.size() != 2)
    throw config_error(st_field(name, "data_offsets"),
                       "expected an array of 2 integers [begin, end]");
  e.begin = st_uint(off[0], st_field(name, "data_offsets[0]"));
  e.end = st_uint(off[1], st_field(name, "data_offsets[1]"));
  if (e.begin > e.end)
    throw config_error(st_field(name, "data_offsets"),
                       cat("begin ", e.begin, " is after end ", e.end));
  std::size_t nbytes = 0;
  try {
    nbytes = e.meta.nbytes();
  } catch (const config_error& err) {
    throw config_error(st_field(name, "shape"), err.what());
  }
  if (e.end - e.begin != nbytes)
    throw config_error(
        st_field(name, "data_offsets"),
        cat("[", e.begin, ", ", e.end, ") holds ", e.end - e.begin, " bytes but ",
            dtype_name(e.meta.dtype), " ", shape_string(e.meta.shape), " needs ", nbytes));
  return e;
}

//! The nesting the format needs: {name: {shape: [dim]}} is 3 containers deep.
inline constexpr int kSafetensorsMaxDepth = 3;

//! One pass over the raw header: throws when containers nest deeper than the format allows, and
//! returns the top-level keys as written (escapes not decoded). Malformed JSON is left to the
//! parser.
inline std::vector<std::string_view> st_prescan(std::string_view json) {
  std::vector<std::string_view> keys;
  int depth = 0;
  std::size_t str_begin = 0;
  bool in_str = false, esc = false, maybe_key = false;
  std::string_view last;
  for (std::size_t i = 0; i < json.size(); ++i) {
    const char c = json[i];
    if (in_str) {
      if (esc)
        esc = false;
      else if (c == '\\')
        esc = true;
      else if (c == '"')
        in_str = false, last = json.substr(str_begin, i - str_begin), maybe_key = depth == 1;
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') continue;
    if (c == ':' && maybe_key) keys.push_back(last);
    maybe_key = false;
    if (c == '"')
      in_str = true, str_begin = i + 1;
    else if (c == '{' || c == '[') {
      if (++depth > kSafetensorsMaxDepth)
        throw config_error("safetensors header", "nested deeper than the format allows");
    } else if (c == '}' || c == ']')
      --depth;
  }
  return keys;
}

}  // namespace detail

//! Parses and validates the JSON part of a header against a data buffer of `data_bytes` bytes.
//! @throws config_error naming the tensor and field at fault (dtype, shape[i], data_offsets, ...).
inline SafetensorsHeader parse_safetensors_json(std::string_view json, std::uint64_t data_bytes) {
  // nlohmann::json (std::map objects): O(log n) inserts; data order comes from the offsets.
  using OJson = nlohmann::json;
  if (json.empty() || json.front() != '{')
    throw config_error("safetensors header", "must be a JSON object starting with '{'");
  // Deep nesting is rejected before parsing; duplicate names after it (nlohmann keeps the last
  // one: the object then has fewer members than the header has keys). A parser callback would do
  // both on the fly but makes nlohmann's parse quadratic in the number of tensors.
  const auto keys = detail::st_prescan(json);
  OJson root;
  try {
    root = OJson::parse(json.begin(), json.end());
  } catch (const nlohmann::json::exception& e) {
    throw config_error("safetensors header", std::string("invalid JSON: ") + e.what());
  }
  if (root.is_object() && root.size() != keys.size()) {
    std::unordered_set<std::string_view> seen;
    for (auto k : keys)
      if (!seen.insert(k).second)
        throw config_error("safetensors tensor '" + std::string(k) + "'",
                           "appears twice in the header");
    throw config_error("safetensors header",
                       "a name appears twice (spelled with different escapes)");
  }
  if (!root.is_object()) throw config_error("safetensors header", "must be a JSON object");
  SafetensorsHeader h;
  for (auto it = root.begin(); it != root.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) throw config_error("safetensors __metadata__", "expected an object");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string())
          throw config_error("safetensors __metadata__." + m.key(),
                             std::string("expected a string, got ") + m->type_name());
        h.metadata.emplace_back(m.key(), m->get<std::string>());
      }
      continue;
    }
    h.tensors.push_back(detail::st_entry(it.key(), *it));
  }
  std::stable_sort(h.tensors.begin(), h.tensors.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  // The tensors tile the data buffer: each begins where the previous one ended.
  std::uint64_t at = 0;
  const std::string* prev = nullptr;
  for (const auto& e : h.tensors) {
    if (e.begin < at)
      throw config_error(detail::st_field(e.meta.name, "data_offsets"),
                         detail::cat("[", e.begin, ", ", e.end, ") overlaps tensor '", *prev,
                                     "' (ends at ", at, ")"));
    if (e.begin > at)
      throw config_error(detail::st_field(e.meta.name, "data_offsets"),
                         detail::cat("begins at ", e.begin, ", leaving a hole after byte ", at));
    if (e.end > data_bytes)
      throw config_error(detail::st_field(e.meta.name, "data_offsets"),
                         detail::cat("end ", e.end, " is past the data buffer (", data_bytes,
                                     " bytes): file truncated?"));
    at = e.end;
    prev = &e.meta.name;
  }
  if (at != data_bytes)
    throw config_error("safetensors data",
                       detail::cat("the tensors cover ", at, " bytes but the data buffer has ",
                                   data_bytes, " (trailing bytes)"));
  h.data_bytes = at;
  return h;
}

//! Parses the header of a whole safetensors file held in `file` (the length prefix, the JSON, and
//! the bounds of every tensor against the rest of the file). Pure: the fuzz target's entry point.
//! @throws config_error naming the tensor and field at fault; never reads outside `file`.
inline SafetensorsHeader parse_safetensors_header(std::span<const std::byte> file) {
  if (file.size() < 8)
    throw config_error(
        "safetensors header length",
        detail::cat("file is ", file.size(), " bytes, shorter than the 8-byte length prefix"));
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i)
    n = (n << 8) | std::to_integer<std::uint64_t>(file[static_cast<std::size_t>(i)]);
  if (n > kSafetensorsMaxHeaderBytes)
    throw config_error("safetensors header length",
                       detail::cat(n, " bytes is over the limit of ", kSafetensorsMaxHeaderBytes));
  if (n > file.size() - 8)
    throw config_error(
        "safetensors header length",
        detail::cat(n, " bytes but only ", file.size() - 8, " follow the prefix: file truncated?"));
  const std::string_view json(reinterpret_cast<const char*>(file.data() + 8),
                              static_cast<std::size_t>(n));
  SafetensorsHeader h = parse_safetensors_json(json, file.size() - 8 - n);
  h.header_bytes = n;
  h.data_offset = 8 + n;
  return h;
}

}  // namespace weightsync
