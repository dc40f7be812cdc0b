// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The engines' options from Python dicts, TransferStats and TransferProgress as dicts, the
//! TensorSet and View classes, and the trainer (TrainerEngine). The worker: worker.hpp.

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "blocking.hpp"
#include "convert.hpp"
#include "tensors.hpp"
#include "weightsync/engine.hpp"

namespace weightsync::python {

//! Reads the keys of an options dict, refusing unknown ones (config_error naming the key).
class Options {
 public:
  explicit Options(const py::dict& d) : d_(d) {}
  template <class T>
  void get(const char* key, T& out) {
    seen_.insert(key);
    if (!d_.contains(key) || d_[key].is_none()) return;
    try {
      out = d_[key].cast<T>();
    } catch (const py::cast_error&) {
      throw config_error(key, "has the wrong type: " +
                                  std::string(py::str(py::type::of(d_[key]).attr("__name__"))));
    }
  }
  //! Seconds (a float) as milliseconds, >= `min_ms`.
  void seconds(const char* key, std::chrono::milliseconds& out, long long min_ms) {
    double s = -1;
    get(key, s);
    if (s < 0 && !(d_.contains(key) && !d_[key].is_none())) return;
    if (!std::isfinite(s) || s * 1000 < double(min_ms) || s > 1e9)
      throw config_error(key, detail::cat("must be a number of seconds >= ", min_ms / 1000.0,
                                          ", got ", s));
    out = std::chrono::milliseconds(static_cast<long long>(std::llround(s * 1000)));
  }
  //! @throws config_error for a key no get() asked for.
  void done() const {
    for (auto [k, v] : d_) {
      const auto key = py::str(k).cast<std::string>();
      if (!seen_.count(key)) {
        std::string known;
        for (const auto& s : seen_) known += (known.empty() ? "" : ", ") + s;
        throw config_error(key, "unknown option (known: " + known + ")");
      }
    }
  }

 private:
  py::dict d_;
  std::set<std::string> seen_;
};

inline EngineOptions engine_options(Options& o) {
  EngineOptions e;
  o.get("backend", e.backend);
  o.get("device", e.device);
  o.seconds("timeout", e.timeout, 1);
  o.get("token", e.token);
  std::string protocol = "weightsync", ack = "next_transfer";
  o.get("protocol", protocol);
  if (protocol == "vllm")
    e.protocol = Protocol::vllm;
  else if (protocol != "weightsync")
    throw config_error("protocol", "must be weightsync or vllm, got '" + protocol + "'");
  o.get("acknowledge", ack);
  if (ack == "each_transfer")
    e.acknowledge = Acknowledge::each_transfer;
  else if (ack != "next_transfer")
    throw config_error("acknowledge", "must be next_transfer or each_transfer, got '" + ack + "'");
  o.get("direct_threshold_bytes", e.direct_threshold_bytes);
  o.get("checksum", e.checksum);
  o.get("nccl_blocking", e.nccl_blocking);
  return e;
}

inline double seconds_of(std::chrono::nanoseconds d) { return std::chrono::duration<double>(d).count(); }

inline py::dict stats_dict(const TransferStats& s) {
  py::dict d;
  d["tensors"] = s.tensors;
  d["chunks"] = s.chunks;
  d["bytes"] = s.bytes;
  d["slot_bytes"] = s.slot_bytes;
  d["ring_bytes"] = s.ring_bytes;
  d["reused_ring"] = s.reused_ring;
  d["handshake_s"] = seconds_of(s.handshake);
  d["data_s"] = seconds_of(s.data);
  d["load_s"] = seconds_of(s.load);
  d["finish_s"] = seconds_of(s.finish);
  d["total_s"] = seconds_of(s.total);
  d["data_bytes_per_second"] = s.data_bytes_per_second();
  return d;
}

//! The progress callback every engine of the binding runs: Ctrl-C ends the transfer at the next
//! chunk (blocking.hpp), and the user's callable, if any, gets a dict (with the GIL).
inline ProgressFn progress_fn(const py::object* user) {
  return [user](const TransferProgress& p) {
    throw_if_interrupted();
    if (!user || user->is_none()) return;
    py::gil_scoped_acquire gil;
    py::dict d;
    d["bytes_done"] = p.bytes_done;
    d["bytes_total"] = p.bytes_total;
    d["chunk"] = p.chunk;
    d["chunks"] = p.chunks;
    d["elapsed_s"] = seconds_of(p.elapsed);
    d["bytes_per_second"] = p.bytes_per_second();
    d["done"] = p.done();
    (*user)(d);
  };
}

inline Memory memory_of(const std::string& backend) {
  return backend == "host" ? Memory::host : Memory::cuda;
}

inline py::list metas_list(const std::vector<TensorMeta>& metas) {
  py::list l;
  for (const auto& m : metas) {
    py::dict d;
    d["name"] = m.name;
    d["dtype"] = std::string(dtype_name(m.dtype));
    d["shape"] = m.shape;
    l.append(d);
  }
  return l;
}

inline void bind_tensors(py::module_& m) {
  py::class_<TensorSet, std::shared_ptr<TensorSet>>(
      m, "TensorSet",
      "Named tensors taken without a copy from anything with __dlpack__ (torch, NumPy, CuPy): a "
      "trainer's source, a worker's destinations, shadow mode's parameters. Holds the tensors' "
      "memory alive until dropped; re-sent each step without walking Python objects.")
      .def(py::init<>())
      .def("add", &TensorSet::add, py::arg("name"), py::arg("tensor"), py::arg("dtype") = "",
           "Adds `tensor` as `name`; `dtype` (a torch dtype name) re-types raw bytes (FP8 "
           "passed as a uint8 view).")
      .def("__len__", &TensorSet::size)
      .def_property_readonly("names", [](const TensorSet& s) {
        std::vector<std::string> n;
        for (const auto& x : s.metas()) n.push_back(x.name);
        return n;
      })
      .def_property_readonly("metas", [](const TensorSet& s) { return metas_list(s.metas()); },
                             "[{'name', 'dtype', 'shape'}] in order.")
      .def_property_readonly("nbytes", &TensorSet::nbytes)
      .def("data_ptr", [](const TensorSet& s, std::size_t i) {
        if (i >= s.size()) throw py::index_error("tensor index out of range");
        return reinterpret_cast<std::uintptr_t>(s.data()[i]);
      });
  py::class_<View>(m, "View",
                   "A library tensor (a received chunk's tensor, a snapshot's parameter) exported "
                   "through DLPack: torch.from_dlpack(view), numpy.from_dlpack(view).")
      .def_property_readonly("name", &View::name)
      .def_property_readonly("dtype", &View::dtype)
      .def_property_readonly("shape", &View::shape)
      .def_property_readonly("nbytes", &View::nbytes)
      .def_property_readonly("data_ptr", &View::data_ptr)
      .def_property_readonly("valid", &View::valid)
      .def_property_readonly("is_cuda", &View::is_cuda)
      .def(
          "__dlpack__",
          [](const View& v, py::object, py::object, py::object, py::object) {
            return v.capsule(false);
          },
          py::arg("stream") = py::none(), py::arg("max_version") = py::none(),
          py::arg("dl_device") = py::none(), py::arg("copy") = py::none())
      .def("__dlpack_device__", &View::dlpack_device)
      .def("bytes_capsule", [](const View& v) { return v.capsule(true); },
           "A DLPack capsule of the bytes as a 1-D uint8 tensor (FP8 where the framework's "
           "DLPack has none).");
}

//! A TensorSet as a WeightSource (trainer.hpp).
struct SetSource {
  const TensorSet* set;
  std::vector<TensorMeta> metas() const { return set->metas(); }
  std::vector<SourceTensorRef> iterate() const {
    std::vector<SourceTensorRef> v(set->size());
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = {&set->metas()[i], set->data()[i]};
    return v;
  }
};

class Trainer {
 public:
  Trainer(const py::dict& options, py::object progress) : progress_(std::move(progress)) {
    Options o(options);
    TrainerEngine::Options t;
    t.engine = engine_options(o);
    o.get("trainer_rank", t.trainer_rank);
    o.get("trainer_world", t.trainer_world);
    o.done();
    t.engine.progress = progress_fn(&progress_);
    timeout_s_ = seconds_of(t.engine.timeout);
    backend_ = t.engine.backend;
    (void)BackendRegistry::global().make(backend_);  // an unknown backend fails here
    engine_ = std::make_unique<TrainerEngine>(std::move(t));
  }
  ~Trainer() {
    py::gil_scoped_release nogil;
    engine_.reset();
  }
  void trainer_init(const py::dict& init_info) {
    const InitRequest r = to_init_request(to_json(init_info, "init_info"), InitContext{});
    blocking(timeout_s_, [&] { engine_->trainer_init(r); });
  }
  py::dict send_weights(const TensorSet& source, const py::object& update_info) {
    source.require(memory_of(backend_), backend_);
    PackingOverrides over;
    if (!update_info.is_none())
      over = to_update_request(to_json(update_info, "update_info"), UpdateContext{}).packing;
    SetSource s{&source};
    return stats_dict(blocking(timeout_s_, [&] { return engine_->send_weights(s, over); }));
  }
  py::object update_info(const TensorSet& source) const {
    nlohmann::json j = engine_->update_info(source.metas());
    return from_json(j);
  }
  TrainerEngine& engine() { return *engine_; }
  const std::string& backend() const { return backend_; }
  double timeout_s() const { return timeout_s_; }

 private:
  py::object progress_;
  double timeout_s_ = 60;
  std::string backend_;
  std::unique_ptr<TrainerEngine> engine_;
};

inline void bind_trainer(py::module_& m) {
  py::class_<Trainer>(m, "TrainerEngine", "The training side (C++ TrainerEngine).")
      .def(py::init<const py::dict&, py::object>(), py::arg("options"),
           py::arg("progress") = py::none())
      .def("trainer_init", &Trainer::trainer_init, py::arg("init_info"),
           "Joins the transfer group (blocks until every rank joined; the GIL is released).")
      .def("send_weights", &Trainer::send_weights, py::arg("source"),
           py::arg("update_info") = py::none(),
           "Sends a TensorSet; `update_info` (vLLM's dict) may override the packing of this "
           "round. Returns the TransferStats as a dict.")
      .def("update_info", &Trainer::update_info, py::arg("source"),
           "The update info (vLLM's dict) a worker needs for `source`.")
      .def_property_readonly("is_sender", [](Trainer& t) { return t.engine().is_sender(); })
      .def_property_readonly("trainers", [](Trainer& t) { return t.engine().trainers(); })
      .def_property_readonly("backend", &Trainer::backend)
      .def("healthy", [](Trainer& t) { return t.engine().healthy(); })
      .def("shutdown", [](Trainer& t) {
        py::gil_scoped_release nogil;
        t.engine().shutdown();
      });
}

}  // namespace weightsync::python
