// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// weightsync._core: the Python binding of the engines (TrainerEngine, WeightTransferEngine), a
// thin layer over the C++ headers: vLLM's dicts in and out (convert.hpp), framework tensors
// without a copy (tensors.hpp, DLPack), every blocking call without the GIL and interruptible by
// Ctrl-C (blocking.hpp), the library's errors as weightsync.errors' classes. The pure-Python
// package (python/weightsync/) wraps it with the framework-facing conveniences.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <weightsync/backends.hpp>
#include <weightsync/engine.hpp>
#if WEIGHTSYNC_HAS_CUDA
#include <weightsync/cuda/check.hpp>
#endif
#if WEIGHTSYNC_HAS_NCCL
#include <weightsync/nccl/check.hpp>
#endif

#include <chrono>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "blocking.hpp"
#include "convert.hpp"
#include "delta.hpp"
#include "engines.hpp"
#include "tensors.hpp"
#include "worker.hpp"

namespace weightsync::python {

namespace {
py::object error_class(const char* name) {
  return py::module_::import("weightsync.errors").attr(name);
}
[[noreturn]] void raise_instance(const char* cls, const std::string& what, const py::dict& attrs) {
  py::object type = error_class(cls);
  py::object e = type(what);
  for (auto [k, v] : attrs) py::setattr(e, k, v);
  PyErr_SetObject(type.ptr(), e.ptr());
  throw py::error_already_set();
}
}  // namespace

void raise_as_python(std::exception_ptr e, double deadline_s) {
  py::dict a;
  try {
    std::rethrow_exception(e);
  } catch (py::error_already_set&) {
    throw;
  } catch (const config_error& x) {
    a["field"] = x.field();
    raise_instance("ConfigError", x.what(), a);
  } catch (const protocol_error& x) {
    a["peer"] = x.peer();
    raise_instance("ProtocolError", x.what(), a);
  } catch (const timeout_error& x) {
    a["phase"] = x.phase();
    a["peer"] = x.peer();
    a["deadline"] = deadline_s >= 0 ? py::object(py::float_(deadline_s)) : py::object(py::none());
    raise_instance("TimeoutError", x.what(), a);
  } catch (const peer_error& x) {
    a["peer"] = x.peer();
    a["rank"] = x.peer();
    raise_instance("PeerError", x.what(), a);
  } catch (const remote_error& x) {
    a["peer"] = x.peer();
    raise_instance("RemoteError", x.what(), a);
  } catch (const state_error& x) {
    raise_instance("StateError", x.what(), a);
  } catch (const system_error& x) {
    a["errno"] = x.code();
    raise_instance("SystemError", x.what(), a);
#if WEIGHTSYNC_HAS_CUDA
  } catch (const cuda_error& x) {
    a["status"] = static_cast<int>(x.status());
    a["api"] = x.api();
    raise_instance("CudaError", x.what(), a);
#endif
#if WEIGHTSYNC_HAS_NCCL
  } catch (const nccl_error& x) {
    a["status"] = static_cast<int>(x.status());
    a["api"] = x.api();
    raise_instance("NcclError", x.what(), a);
#endif
  } catch (const error& x) {
    raise_instance("Error", x.what(), a);
  }
  // anything else: pybind11's own translation (std::bad_alloc -> MemoryError, ...)
  std::rethrow_exception(e);
}

}  // namespace weightsync::python

PYBIND11_MODULE(_core, m) {
  using namespace weightsync::python;
  namespace ws = weightsync;
  m.doc() = "weightsync's C++ engines (the binding; use the package `weightsync`).";
  detail_sig::g_main_ident =
      py::module_::import("threading").attr("main_thread")().attr("ident").cast<unsigned long>();
  py::register_exception_translator([](std::exception_ptr p) {
    if (!p) return;
    try {
      std::rethrow_exception(p);
    } catch (const ws::error&) {
      try {
        raise_as_python(p, -1);
      } catch (py::error_already_set& e) {
        e.restore();
      }
    }
  });
  m.attr("has_cuda") = bool(WEIGHTSYNC_HAS_CUDA);
  m.attr("has_nccl") = bool(WEIGHTSYNC_HAS_NCCL);
  m.def("backends", [] { return ws::BackendRegistry::global().names(); },
        "The backends this build registered (host; nccl, ipc, p2p where CUDA and NCCL are).");
#if WEIGHTSYNC_HAS_NCCL
  m.def(
      "vllm_init_info",
      [](int world_size, int rank_offset, bool packed, std::int64_t buffer, int num_buffers) {
        nlohmann::json j = ws::vllm_init_info(world_size, rank_offset, packed, buffer, num_buffers);
        return from_json(j);
      },
      py::arg("world_size"), py::arg("rank_offset") = 1, py::arg("packed") = true,
      py::arg("packed_buffer_size_bytes") = ws::kDefaultPackedBufferSizeBytes,
      py::arg("packed_num_buffers") = ws::kDefaultPackedNumBuffers,
      "vLLM's init info (a dict) for the unique-id rendezvous, with a fresh NCCL unique id.");
#endif
  bind_tensors(m);
  bind_trainer(m);
  bind_worker(m);
  bind_delta(m);
  bind_load_plan(m);
}
