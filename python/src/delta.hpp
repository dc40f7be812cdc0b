// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Delta syncs from Python: DeltaSource (delta/source.hpp) over a TensorSet in host memory (the
//! host backend; HostDeltaCodec). prepare(version, trainer) diffs the tensors against the version
//! every worker holds and returns the update info (vLLM's dict with "delta") to hand the workers;
//! TrainerEngine.send_delta sends the round; commit() makes it the next round's base. Workers
//! need nothing new: update_weights applies the blobs in place (into their destinations).

#include <pybind11/pybind11.h>

#include <memory>
#include <string>
#include <utility>

#include "engines.hpp"
#include "weightsync/delta/source.hpp"

namespace weightsync::python {

class PyDelta {
 public:
  PyDelta(std::shared_ptr<TensorSet> set, const py::dict& options)
      : set_(std::move(set)), src_{set_.get()} {
    if (!set_) throw config_error("source", "none given");
    set_->require(Memory::host, "host delta");
    Options o(options);
    DeltaOptions d;
    std::string mode = "automatic", reference = "full";
    o.get("mode", mode);
    o.get("reference", reference);
    o.get("max_payload_fraction", d.max_payload_fraction);
    o.get("bucket_elems", d.bucket_elems);
    o.get("anchor_every", d.anchor_every);
    o.get("link_bytes_per_s", d.link_bytes_per_s);
    o.done();
    if (mode == "always") d.mode = DeltaMode::always;
    else if (mode == "never") d.mode = DeltaMode::never;
    else if (mode != "automatic")
      throw config_error("mode", "must be automatic, always or never, got '" + mode + "'");
    if (reference == "low_byte") d.reference = DeltaReference::low_byte;
    else if (reference != "full")
      throw config_error("reference", "must be full or low_byte, got '" + reference + "'");
    delta_ = std::make_unique<DeltaSource<SetSource>>(src_, d);
  }
  py::object prepare(const std::string& version, Trainer& trainer) {
    UpdateRequest r = trainer.engine().update_request(set_->metas());
    UpdateRequest out = blocking(-1, [&] { return delta_->prepare(version, std::move(r)); });
    nlohmann::json j = to_update_info(out);
    return from_json(j);
  }
  py::dict send(Trainer& trainer) {
    return stats_dict(blocking(trainer.timeout_s(), [&] {
      return trainer.engine().send_weights(*delta_);
    }));
  }
  void commit() { delta_->commit(); }
  void invalidate() { delta_->invalidate(); }
  py::dict stats() const {
    const DeltaStats& s = delta_->stats();
    py::dict d;
    d["whole_round"] = s.whole_round;
    d["tensor_bytes"] = s.tensor_bytes;
    d["wire_bytes"] = s.wire_bytes;
    d["changed_elements"] = s.changed_elements;
    d["whole"] = s.whole;
    d["blobs"] = s.blobs;
    d["unchanged"] = s.unchanged;
    d["encode_s"] = seconds_of(s.encode);
    d["commit_s"] = seconds_of(s.commit);
    return d;
  }

 private:
  std::shared_ptr<TensorSet> set_;
  SetSource src_;
  std::unique_ptr<DeltaSource<SetSource>> delta_;
};

inline void bind_delta(py::module_& m) {
  py::class_<PyDelta>(m, "DeltaSource",
                      "Delta syncs (host memory): prepare(version, trainer) -> the update info "
                      "for the workers, send(trainer), commit(); see delta/source.hpp.")
      .def(py::init<std::shared_ptr<TensorSet>, const py::dict&>(), py::arg("source"),
           py::arg("options") = py::dict())
      .def("prepare", &PyDelta::prepare, py::arg("version"), py::arg("trainer"))
      .def("send", &PyDelta::send, py::arg("trainer"))
      .def("commit", &PyDelta::commit)
      .def("invalidate", &PyDelta::invalidate)
      .def("stats", &PyDelta::stats);
}

}  // namespace weightsync::python
