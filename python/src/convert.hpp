// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Python objects <-> nlohmann::json: the dicts of vLLM's routes go in and come out as they are;
//! the library's own parsers (vllm/json.hpp) check them and name the field at fault.

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "weightsync/detail/format.hpp"
#include "weightsync/error.hpp"

namespace weightsync::python {

namespace py = pybind11;

//! A Python value as JSON: None, bool, int, float, str, list/tuple, dict with str keys.
//! @throws config_error naming `where` (a dotted path) for anything else, or JSON nested too deep.
inline nlohmann::json to_json(py::handle o, const std::string& where, int depth = 0) {
  if (depth > 64) throw config_error(where, "nested deeper than 64 levels");
  if (o.is_none()) return nullptr;
  if (py::isinstance<py::bool_>(o)) return o.cast<bool>();
  if (py::isinstance<py::int_>(o)) {
    try {
      return o.cast<std::int64_t>();
    } catch (const py::cast_error&) {
      throw config_error(where, "integer out of the int64 range");
    }
  }
  if (py::isinstance<py::float_>(o)) return o.cast<double>();
  if (py::isinstance<py::str>(o)) return o.cast<std::string>();
  if (py::isinstance<py::dict>(o)) {
    nlohmann::json j = nlohmann::json::object();
    for (auto [k, v] : o.cast<py::dict>()) {
      if (!py::isinstance<py::str>(k))
        throw config_error(where, "dict keys must be str, got " +
                                      std::string(py::str(py::type::of(k).attr("__name__"))));
      const auto key = k.cast<std::string>();
      j[key] = to_json(v, where.empty() ? key : where + "." + key, depth + 1);
    }
    return j;
  }
  if (py::isinstance<py::list>(o) || py::isinstance<py::tuple>(o)) {
    nlohmann::json j = nlohmann::json::array();
    std::size_t i = 0;
    for (auto v : o) j.push_back(to_json(v, detail::cat(where, "[", i++, "]"), depth + 1));
    return j;
  }
  // numpy / torch scalars and anything else that says it is an integer or a number
  if (py::hasattr(o, "__index__") || py::hasattr(o, "__float__")) {
    PyObject* n = py::hasattr(o, "__index__") ? PyNumber_Index(o.ptr()) : PyNumber_Float(o.ptr());
    if (!n) throw py::error_already_set();
    return to_json(py::reinterpret_steal<py::object>(n), where, depth);
  }
  throw config_error(where, "cannot be sent as JSON: a " +
                                std::string(py::str(py::type::of(o).attr("__name__"))));
}

//! JSON as Python values (dict, list, str, int, float, bool, None).
inline py::object from_json(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null: return py::none();
    case nlohmann::json::value_t::boolean: return py::bool_(j.get<bool>());
    case nlohmann::json::value_t::number_integer: return py::int_(j.get<std::int64_t>());
    case nlohmann::json::value_t::number_unsigned: return py::int_(j.get<std::uint64_t>());
    case nlohmann::json::value_t::number_float: return py::float_(j.get<double>());
    case nlohmann::json::value_t::string: return py::str(j.get<std::string>());
    case nlohmann::json::value_t::array: {
      py::list l;
      for (const auto& v : j) l.append(from_json(v));
      return py::object(std::move(l));
    }
    case nlohmann::json::value_t::object: {
      py::dict d;
      for (const auto& [k, v] : j.items()) d[py::str(k)] = from_json(v);
      return py::object(std::move(d));
    }
    default: return py::none();
  }
}

}  // namespace weightsync::python
