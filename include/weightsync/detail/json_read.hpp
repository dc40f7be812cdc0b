// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! Strict reading of JSON objects: every key must be known, every value of the expected JSON type,
//! every integer in range. Errors name the field ("shapes[2][0]: expected an integer, got string").

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "weightsync/detail/format.hpp"
#include "weightsync/error.hpp"

namespace weightsync::detail {

inline std::string json_type(const nlohmann::json& j) {
  if (j.is_number_integer() || j.is_number_unsigned()) return "integer";
  if (j.is_number_float()) return "float";
  return j.type_name();
}

[[noreturn]] inline void json_type_mismatch(const std::string& field, std::string_view want,
                                            const nlohmann::json& got) {
  throw config_error(field, cat("expected ", want, ", got ", json_type(got)));
}

inline std::int64_t json_int(const nlohmann::json& j, const std::string& field) {
  if (j.is_number_unsigned()) {
    const auto u = j.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      throw config_error(field, cat("value ", u, " is out of range"));
    return static_cast<std::int64_t>(u);
  }
  if (j.is_number_integer()) return j.get<std::int64_t>();
  json_type_mismatch(field, "an integer", j);
}

inline std::int64_t json_int_in(const nlohmann::json& j, const std::string& field, std::int64_t lo,
                                std::int64_t hi) {
  const auto v = json_int(j, field);
  if (v < lo || v > hi) {
    if (hi >= std::numeric_limits<int>::max())
      throw config_error(field, cat("must be >= ", lo, ", got ", v));
    throw config_error(field, cat("must be in ", lo, "..", hi, ", got ", v));
  }
  return v;
}

inline bool json_bool(const nlohmann::json& j, const std::string& field) {
  if (!j.is_boolean()) json_type_mismatch(field, "a boolean", j);
  return j.get<bool>();
}

inline std::string json_string(const nlohmann::json& j, const std::string& field) {
  if (!j.is_string()) json_type_mismatch(field, "a string", j);
  return j.get<std::string>();
}

inline void require_array(const nlohmann::json& j, const std::string& field) {
  if (!j.is_array()) json_type_mismatch(field, "an array", j);
}

//! Walks a JSON object: rejects unknown keys up front, then hands out values by key.
class JsonObject {
 public:
  JsonObject(const nlohmann::json& j, std::string what, std::initializer_list<std::string_view> keys)
      : j_(j), what_(std::move(what)) {
    if (!j.is_object()) json_type_mismatch(what_, "an object", j);
    for (auto it = j.begin(); it != j.end(); ++it) {
      bool known = false;
      for (auto k : keys) known = known || k == it.key();
      if (!known) {
        std::string list;
        for (auto k : keys) list += (list.empty() ? "" : ", ") + std::string(k);
        throw config_error(it.key(), cat("unknown key in ", what_, " (known keys: ", list, ")"));
      }
    }
  }

  //! The value of `key`, or nullptr when absent or JSON null (Python's None).
  const nlohmann::json* optional(std::string_view key) const {
    auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  const nlohmann::json& required(std::string_view key) const {
    auto it = j_.find(key);
    if (it == j_.end()) throw config_error(std::string(key), "missing required key in " + what_);
    if (it->is_null()) throw config_error(std::string(key), "must not be null in " + what_);
    return *it;
  }

 private:
  const nlohmann::json& j_;
  std::string what_;
};

}  // namespace weightsync::detail
