// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// weightsync._wire: the versioned JSON of vLLM's and SGLang's weight-transfer routes
// (<weightsync/vllm/wire.hpp>, <weightsync/vllm/sglang.hpp>) for Python trainers and servers, in
// its own small extension (no engine, no backend: it builds in seconds). The versions are
// wire_version_key's spellings: "vllm-0.27" (vLLM < 0.28), "vllm-0.28" (the default), "sglang";
// "vllm" and "vllm-legacy" are accepted too. Errors are weightsync.errors.ConfigError with the
// field (the key at fault) as attribute.
#include <pybind11/pybind11.h>

#include <weightsync/error.hpp>
#include <weightsync/vllm/wire.hpp>

#include <exception>
#include <optional>
#include <string>

#include "convert.hpp"

namespace weightsync::python {
namespace {

WireVersion version_of(const std::string& key) {
  if (auto v = parse_wire_version(key)) return *v;
  throw config_error("version", detail::cat("unknown wire version \"", key,
                                            "\" (known: vllm-0.27, vllm-0.28, sglang, vllm, "
                                            "vllm-legacy)"));
}

// A dict, or JSON text (str / bytes) as a route's body carries it.
nlohmann::json json_of(py::handle o, const char* what) {
  if (py::isinstance<py::str>(o) || py::isinstance<py::bytes>(o)) {
    const auto text = o.cast<std::string>();
    auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) throw config_error(what, "is not valid JSON text");
    return j;
  }
  return to_json(o, "");
}

template <class T>
T parsed(const nlohmann::json& j, const char* what) {
  try {
    return j.get<T>();
  } catch (const config_error&) {
    throw;
  } catch (const nlohmann::json::exception& e) {
    throw config_error(what, e.what());
  }
}

void translate(std::exception_ptr p) {
  if (!p) return;
  try {
    std::rethrow_exception(p);
  } catch (const config_error& e) {
    py::object type = py::module_::import("weightsync.errors").attr("ConfigError");
    py::object err = type(e.what());
    err.attr("field") = e.field();
    PyErr_SetObject(type.ptr(), err.ptr());
  }
}

}  // namespace
}  // namespace weightsync::python

PYBIND11_MODULE(_wire, m) {
  using namespace weightsync::python;
  namespace ws = weightsync;
  m.doc() = "vLLM's and SGLang's weight-transfer JSON, per wire version (use weightsync.wire).";
  py::register_exception_translator(&translate);
  m.attr("default_version") = std::string(ws::wire_version_key(ws::kDefaultWireVersion));
  m.def(
      "write_init_info",
      [](py::handle info, const std::string& version) {
        const auto i = parsed<ws::NcclInitInfo>(json_of(info, "init_info"), "init_info");
        return from_json(ws::write_init_info(i, version_of(version)));
      },
      py::arg("init_info"), py::arg("version") = "vllm-0.28",
      "The init info `version` takes (SGLang: the init_weights_update_group body), from the "
      "library's init info dict. Raises ConfigError naming a field the version cannot carry.");
  m.def(
      "read_init_info",
      [](py::handle body, const std::string& version) {
        return from_json(nlohmann::json(ws::read_init_info(json_of(body, "init_info"),
                                                           version_of(version))));
      },
      py::arg("init_info"), py::arg("version") = "vllm-0.28",
      "Reads `version`'s init info strictly (unknown keys refused, naming the key and the "
      "version); returns the library's init info dict.");
  m.def(
      "write_update_info",
      [](py::handle update, const std::string& version, py::handle init) {
        const auto u = parsed<ws::NcclUpdateInfo>(json_of(update, "update_info"), "update_info");
        std::optional<ws::NcclInitInfo> i;
        if (!init.is_none()) i = parsed<ws::NcclInitInfo>(json_of(init, "init_info"), "init_info");
        return from_json(ws::write_update_info(u, version_of(version), i ? &*i : nullptr));
      },
      py::arg("update_info"), py::arg("version") = "vllm-0.28", py::arg("init_info") = py::none(),
      "The update info `version` takes, from the library's update info dict (TrainerEngine."
      "update_info); `init_info` puts the packing where the version wants it.");
  m.def(
      "read_update_info",
      [](py::handle body, const std::string& version) {
        return from_json(nlohmann::json(ws::read_update_info(json_of(body, "update_info"),
                                                             version_of(version))));
      },
      py::arg("update_info"), py::arg("version") = "vllm-0.28",
      "Reads `version`'s update info strictly; returns the library's update info dict.");
  m.def(
      "sglang_init_group_request",
      [](py::handle body) {
        return from_json(nlohmann::json(
            parsed<ws::SglangInitGroupRequest>(json_of(body, "body"), "body")));
      },
      py::arg("body"),
      "SGLang's InitWeightsUpdateGroupReqInput checked (unknown keys and bad fields refused, "
      "naming them) and with its defaults filled in.");
  m.def(
      "sglang_update_request",
      [](py::handle body) {
        return from_json(
            nlohmann::json(parsed<ws::SglangUpdateRequest>(json_of(body, "body"), "body")));
      },
      py::arg("body"),
      "SGLang's UpdateWeightsFromDistributedReqInput checked and with its defaults filled in.");
}
