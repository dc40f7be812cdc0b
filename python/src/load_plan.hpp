// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The model-aware LoadPlan from Python (loading/planner.hpp): the update's tensors, the
//! worker's parameters (a TensorSet) and a mapping (a Python callable: name, dtype, shape ->
//! a Placement as a dict, or None) make a plan; WorkerEngine.update_weights(plan=...) then lands
//! every tensor the plan places in place and gathers (fuse, TP shard, rotary permute, cast) the
//! others into the parameters. Host backend (host memory) for now.

#include <pybind11/pybind11.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engines.hpp"
#include "weightsync/host/device_policy.hpp"
#include "weightsync/loading/planner.hpp"

namespace weightsync::python {

class PyLoadPlan {
 public:
  PyLoadPlan(const py::dict& update_info, std::shared_ptr<TensorSet> params, py::object mapping,
             bool ignore_unmapped, bool require_full_coverage)
      : params_(std::move(params)) {
    if (!params_) throw config_error("parameters", "none given");
    params_->require(Memory::host, "host (a LoadPlan in the Python binding)");
    const UpdateRequest u = to_update_request(to_json(update_info, "update_info"), UpdateContext{});
    std::vector<ParamInfo> table;
    for (std::size_t i = 0; i < params_->size(); ++i) {
      const auto& m = params_->metas()[i];
      table.push_back({m.name, params_->data()[i], m.dtype, m.shape});
    }
    LoadMap map = [&mapping](const TensorMeta& m) -> std::optional<Placement> {
      py::object r = mapping(m.name, std::string(dtype_name(m.dtype)), m.shape);
      if (r.is_none()) return std::nullopt;
      Options o(r.cast<py::dict>());
      Placement p;
      o.get("param", p.param);
      o.get("expert", p.expert);
      o.get("dst_row", p.dst_row);
      o.get("slice_dim", p.slice_dim);
      o.get("slice_begin", p.slice_begin);
      o.get("slice_len", p.slice_len);
      o.get("permute_heads", p.permute_heads);
      o.get("skip", p.skip);
      o.done();
      return p;
    };
    PlanOptions opt;
    opt.ignore_unmapped = ignore_unmapped;
    opt.require_full_coverage = require_full_coverage;
    plan_.emplace(plan_loading(u.metas, table, map, opt));
  }
  const LoadPlan& plan() const { return *plan_; }
  std::size_t in_place() const { return plan_->in_place_count(); }
  std::size_t gathered() const { return plan_->gather_count(); }

 private:
  std::shared_ptr<TensorSet> params_;  //!< the parameters' memory, kept alive
  std::optional<LoadPlan> plan_;
};

inline void bind_load_plan(py::module_& m) {
  py::class_<PyLoadPlan, std::shared_ptr<PyLoadPlan>>(
      m, "LoadPlan",
      "A model-aware load plan (C++ plan_loading): update info, parameters, mapping.")
      .def(py::init<const py::dict&, std::shared_ptr<TensorSet>, py::object, bool, bool>(),
           py::arg("update_info"), py::arg("parameters"), py::arg("mapping"),
           py::arg("ignore_unmapped") = false, py::arg("require_full_coverage") = false)
      .def_property_readonly("in_place_count", &PyLoadPlan::in_place)
      .def_property_readonly("gather_count", &PyLoadPlan::gathered);
}

}  // namespace weightsync::python
