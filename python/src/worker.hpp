// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The worker (WeightTransferEngine) for Python: vLLM's verbs over dicts, the load callback
//! given Views of the library's memory, destinations taken from the caller's own tensors, the
//! pause / resume / failure hooks, and shadow mode (parameters, snapshots).

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engines.hpp"
#include "load_plan.hpp"
#if WEIGHTSYNC_HAS_CUDA
#include "weightsync/cuda/device_policy.hpp"
#endif

namespace weightsync::python {

//! A shadow mode snapshot: the live version for one forward pass, its parameters as Views.
class PySnapshot {
 public:
  PySnapshot(std::shared_ptr<const Snapshot> s, Memory memory, int device)
      : s_(std::move(s)), memory_(memory), device_(device), alive_(std::make_shared<bool>(true)) {}
  std::string version() const { return held().version(); }
  std::uint64_t generation() const { return held().generation(); }
  int copy() const { return held().copy(); }
  py::dict parameters(py::object self) const {
    py::dict d;
    for (const auto& p : held().parameters()) {
      d[py::str(p.name())] = View(*p.meta, const_cast<void*>(static_cast<const void*>(p.data)),
                                  memory_, device_, alive_, self);
    }
    return d;
  }
  void release() {
    *alive_ = false;
    py::gil_scoped_release nogil;
    s_.reset();
  }

 private:
  const Snapshot& held() const {
    if (!s_) throw state_error("snapshot already released");
    return *s_;
  }
  std::shared_ptr<const Snapshot> s_;
  Memory memory_;
  int device_;
  std::shared_ptr<bool> alive_;
};

class Worker {
 public:
  Worker(const py::dict& options, py::object progress) : progress_(std::move(progress)) {
    Options o(options);
    WeightTransferEngine::Options w;
    w.engine = engine_options(o);
    o.get("tensor_parallel_size", w.parallel.tensor_parallel_size);
    o.get("pipeline_parallel_size", w.parallel.pipeline_parallel_size);
    o.get("data_parallel_size", w.parallel.data_parallel_size);
    o.get("data_parallel_index", w.parallel.data_parallel_index);
    o.get("local_rank", w.parallel.local_rank);
    o.seconds("liveness_interval", w.liveness_interval, 0);
    o.get("trainer_ranks", w.trainer_ranks);
    o.get("shadow", w.shadow.enabled);
    o.get("shadow_copy_live_at_start", w.shadow.copy_live_at_start);
    o.done();
    w.engine.progress = progress_fn(&progress_);
    timeout_s_ = seconds_of(w.engine.timeout);
    backend_ = w.engine.backend;
    device_ = w.engine.device;
    (void)BackendRegistry::global().make(backend_);  // an unknown backend fails here
#if WEIGHTSYNC_HAS_CUDA
    if (w.shadow.enabled && backend_ != "host")
      w.shadow.memory = std::make_shared<PolicyShadowMemory<CudaPolicy>>(CudaPolicy(device_), "cuda");
#endif
    engine_ = std::make_unique<WeightTransferEngine>(std::move(w));
    engine_->set_hooks({[this](PauseMode m) { call_hook(pause_, pause_mode_name(m)); },
                        [this] { call_hook(resume_, nullptr); },
                        [this](const std::string& why) { failure(why); }});
  }
  ~Worker() {
    py::gil_scoped_release nogil;  // (the watchdog may wait for the GIL in a failure hook)
    engine_.reset();
  }

  void set_hooks(py::object pause, py::object resume, py::object failure) {
    pause_ = std::move(pause);
    resume_ = std::move(resume);
    failure_ = std::move(failure);
  }
  void init_transfer_engine(const py::dict& init_info) {
    const auto j = to_json(init_info, "init_info");
    blocking(timeout_s_, [&] { engine_->init_transfer_engine(j); });
  }
  void start_weight_update() {
    blocking(timeout_s_, [&] { engine_->start_weight_update(); });
  }
  py::dict update_weights(const py::dict& update_info, py::object load,
                          std::shared_ptr<TensorSet> destinations,
                          std::shared_ptr<PyLoadPlan> plan);
  void finish_weight_update(std::optional<std::string> version) {
    blocking(timeout_s_, [&] { engine_->finish_weight_update(std::move(version)); });
  }
  void register_parameters(std::shared_ptr<TensorSet> live, std::shared_ptr<TensorSet> second);
  PySnapshot acquire() const {
    auto s = blocking(timeout_s_, [&] { return engine_->acquire(); });
    return PySnapshot(std::move(s), memory_of(backend_), device_);
  }
  WeightTransferEngine& engine() { return *engine_; }
  const std::string& backend() const { return backend_; }
  double timeout_s() const { return timeout_s_; }

 private:
  void call_hook(const py::object& f, const char* arg) {
    py::gil_scoped_acquire gil;
    if (f.is_none()) return;
    if (arg)
      f(arg);
    else
      f();
  }
  void failure(const std::string& why) noexcept {
    py::gil_scoped_acquire gil;
    try {
      if (!failure_.is_none()) failure_(why);
    } catch (py::error_already_set& e) {
      e.discard_as_unraisable("weightsync worker failure hook");
    } catch (...) {
    }
  }
  AnyLoadWeights load_fn(const py::object* load) const;

  py::object progress_, pause_ = py::none(), resume_ = py::none(), failure_ = py::none();
  double timeout_s_ = 60;
  std::string backend_;
  int device_ = -1;
  std::shared_ptr<TensorSet> params_, second_;  //!< shadow mode's memory, kept alive
  std::unique_ptr<WeightTransferEngine> engine_;
};

inline int current_cuda_device(int fallback) {
#if WEIGHTSYNC_HAS_CUDA
  int d = 0;
  if (cudaGetDevice(&d) == cudaSuccess) return d;
#endif
  return fallback < 0 ? 0 : fallback;
}

//! load_weights: each chunk's tensors as Views (valid during the call), with the stream (an int,
//! 0 on the host backend), the GIL taken for the call only.
inline AnyLoadWeights Worker::load_fn(const py::object* load) const {
  const int dev = device_;
  return [load, dev](std::span<const TensorView> batch, void* stream) {
    const Memory mem = stream ? Memory::cuda : Memory::host;
    const int device = stream ? current_cuda_device(dev) : 0;
    py::gil_scoped_acquire gil;
    if (load->is_none()) return;
    auto alive = std::make_shared<bool>(true);
    py::list views;
    for (const auto& v : batch) views.append(View(*v.meta, v.data, mem, device, alive));
    try {
      (*load)(views, reinterpret_cast<std::uintptr_t>(stream));
    } catch (...) {
      *alive = false;
      throw;
    }
    *alive = false;
  };
}

inline py::dict Worker::update_weights(const py::dict& update_info, py::object load,
                                       std::shared_ptr<TensorSet> destinations,
                                       std::shared_ptr<PyLoadPlan> plan) {
  const UpdateRequest r = engine_->parse_update_info(to_json(update_info, "update_info"));
  if (plan) {
    if (destinations || !load.is_none())
      throw config_error("plan", "a load plan places every tensor: give no load or destinations");
    if (backend_ != "host")
      throw config_error("plan", "a LoadPlan runs on the host backend in the Python binding");
    const LoadPlan* p = &plan->plan();
    const AnyLoadWeights fn = [p](std::span<const TensorView> v, void*) {
      p->load(v, HostStream{});
    };
    return stats_dict(blocking(timeout_s_, [&] {
      return engine_->update_weights(r, fn, p->destination_fn());
    }));
  }
  AnyDestination dest;
  if (destinations) {
    destinations->require(memory_of(backend_), backend_);
    dest = [d = destinations.get()](const TensorMeta& m) -> void* {
      const auto i = d->find(m.name);
      if (i < 0) return nullptr;
      const auto& mine = d->metas()[static_cast<std::size_t>(i)];
      if (mine.dtype != m.dtype || mine.shape != m.shape)
        throw config_error(m.name, detail::cat("the destination is ", dtype_name(mine.dtype), " ",
                                               detail::shape_string(mine.shape), ", the update ",
                                               dtype_name(m.dtype), " ",
                                               detail::shape_string(m.shape)));
      return d->data()[static_cast<std::size_t>(i)];
    };
  }
  const AnyLoadWeights fn = load_fn(&load);
  return stats_dict(blocking(timeout_s_, [&] { return engine_->update_weights(r, fn, dest); }));
}

inline void Worker::register_parameters(std::shared_ptr<TensorSet> live,
                                        std::shared_ptr<TensorSet> second) {
  if (!live) throw config_error("parameters", "none given");
  live->require(memory_of(backend_), backend_);
  if (second) second->require(memory_of(backend_), backend_);
  std::vector<ShadowParameter> params;
  for (std::size_t i = 0; i < live->size(); ++i) {
    ShadowParameter p{live->metas()[i], live->data()[i], nullptr};
    if (second) {
      const auto j = second->find(p.meta.name);
      if (j >= 0) {
        if (second->metas()[static_cast<std::size_t>(j)] != p.meta)
          throw config_error(p.meta.name, "the second copy's dtype or shape differs");
        p.second = second->data()[static_cast<std::size_t>(j)];
      }
    }
    params.push_back(std::move(p));
  }
  blocking(timeout_s_, [&] { engine_->register_parameters(std::move(params)); });
  params_ = std::move(live);  // (the engine serves from this memory from now on)
  second_ = std::move(second);
}

inline void bind_worker(py::module_& m) {
  py::class_<PySnapshot>(m, "Snapshot", "Shadow mode: the live version for one forward pass.")
      .def_property_readonly("version", &PySnapshot::version)
      .def_property_readonly("generation", &PySnapshot::generation)
      .def_property_readonly("copy", &PySnapshot::copy)
      .def("parameters", [](py::object self) { return self.cast<PySnapshot&>().parameters(self); },
           "{name: View} of this version's parameters (valid until release()).")
      .def("release", &PySnapshot::release)
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PySnapshot& s, py::args) { s.release(); });
  py::class_<Worker>(m, "WorkerEngine", "The inference side (C++ WeightTransferEngine).")
      .def(py::init<const py::dict&, py::object>(), py::arg("options"),
           py::arg("progress") = py::none())
      .def("set_hooks", &Worker::set_hooks, py::arg("pause") = py::none(),
           py::arg("resume") = py::none(), py::arg("failure") = py::none())
      .def("init_transfer_engine", &Worker::init_transfer_engine, py::arg("init_info"))
      .def("start_weight_update", &Worker::start_weight_update)
      .def("update_weights", &Worker::update_weights, py::arg("update_info"),
           py::arg("load") = py::none(), py::arg("destinations") = nullptr,
           py::arg("plan") = nullptr)
      .def("finish_weight_update", &Worker::finish_weight_update,
           py::arg("weight_version") = py::none())
      .def("register_parameters", &Worker::register_parameters, py::arg("parameters"),
           py::arg("second") = nullptr)
      .def("acquire", &Worker::acquire)
      .def("pause", [](Worker& w, const std::string& mode) {
        const PauseMode pm = parse_pause_mode(mode);
        blocking(w.timeout_s(), [&] { w.engine().pause(pm); });
      }, py::arg("mode") = "keep")
      .def("resume", [](Worker& w) { blocking(w.timeout_s(), [&] { w.engine().resume(); }); })
      .def("is_paused", [](Worker& w) { return w.engine().is_paused(); })
      .def("weight_version", [](Worker& w) { return w.engine().weight_version(); })
      .def("delta_base", [](Worker& w) { return w.engine().delta_base(); })
      .def("initialized", [](Worker& w) { return w.engine().initialized(); })
      .def("updating", [](Worker& w) { return w.engine().updating(); })
      .def("world_size", [](Worker& w) { return w.engine().world_size(); })
      .def("rank", [](Worker& w) { return w.engine().rank(); })
      .def("shadow_extra_bytes", [](Worker& w) { return w.engine().shadow_extra_bytes(); })
      .def_property_readonly("backend", &Worker::backend)
      .def("shutdown", [](Worker& w) {
        py::gil_scoped_release nogil;
        w.engine().shutdown();
      });
}

}  // namespace weightsync::python
