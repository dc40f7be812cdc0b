// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Wire dtypes, spelled as torch spells them ("bfloat16", "float8_e4m3fn", ...).

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "weightsync/error.hpp"

namespace weightsync {

//! A wire dtype. Enumerator names are torch's, except `bool_` (a C++ keyword) whose name is "bool".
enum class DType : std::uint8_t {
  float32,
  float16,
  bfloat16,
  float64,
  int8,
  uint8,
  int16,
  int32,
  int64,
  bool_,
  float8_e4m3fn,
  float8_e5m2,
};

namespace detail {
struct DTypeInfo {
  DType dtype;
  std::string_view name;
  std::size_t size;
};
inline constexpr std::array<DTypeInfo, 12> kDTypes{{
    {DType::float32, "float32", 4},
    {DType::float16, "float16", 2},
    {DType::bfloat16, "bfloat16", 2},
    {DType::float64, "float64", 8},
    {DType::int8, "int8", 1},
    {DType::uint8, "uint8", 1},
    {DType::int16, "int16", 2},
    {DType::int32, "int32", 4},
    {DType::int64, "int64", 8},
    {DType::bool_, "bool", 1},
    {DType::float8_e4m3fn, "float8_e4m3fn", 1},
    {DType::float8_e5m2, "float8_e5m2", 1},
}};

inline const DTypeInfo& dtype_info(DType d) {
  const auto i = static_cast<std::size_t>(d);
  if (i >= kDTypes.size())
    throw config_error("dtype", "invalid DType value " + std::to_string(i));
  return kDTypes[i];
}
}  // namespace detail

//! Every dtype, in enum order.
inline constexpr std::array<DType, 12> all_dtypes() {
  std::array<DType, 12> out{};
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = detail::kDTypes[i].dtype;
  return out;
}

//! The torch name of `d` ("bfloat16").
inline std::string_view dtype_name(DType d) { return detail::dtype_info(d).name; }

//! Bytes per element of `d`.
inline std::size_t dtype_size(DType d) { return detail::dtype_info(d).size; }

//! Parses a torch dtype name. "torch.bfloat16" (what str(torch.bfloat16) prints) is accepted too.
//! @throws config_error naming the unknown name and listing the known ones.
inline DType parse_dtype(std::string_view name) {
  std::string_view bare = name;
  if (bare.starts_with("torch.")) bare.remove_prefix(6);
  for (const auto& d : detail::kDTypes)
    if (d.name == bare) return d.dtype;
  std::string known;
  for (const auto& d : detail::kDTypes) known += (known.empty() ? "" : ", ") + std::string(d.name);
  throw config_error("dtype", "unknown dtype '" + std::string(name) + "' (known: " + known + ")");
}

}  // namespace weightsync
