// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Framework tensors in and out without a copy, over DLPack (dlpack.hpp):
//! - TensorSet: named tensors taken from anything with __dlpack__ (torch, NumPy, CuPy) or a
//!   "dltensor" capsule: their TensorMeta and their memory, the producers' DLManagedTensors held
//!   (so the memory stays alive) until the set is dropped. A trainer's source, a worker's
//!   destinations, shadow mode's parameters.
//! - View: a library tensor (a received chunk's view, a snapshot's parameter) exported through
//!   __dlpack__, valid while its owner says so.

#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "dlpack.hpp"
#include "weightsync/detail/format.hpp"
#include "weightsync/error.hpp"
#include "weightsync/tensor_meta.hpp"

namespace weightsync::python {

namespace py = pybind11;

//! Where a tensor's memory is, as the backends need it.
enum class Memory { host, cuda };

//! Named tensors over their producers' memory (see the file comment).
class TensorSet {
 public:
  TensorSet() = default;
  TensorSet(const TensorSet&) = delete;
  TensorSet& operator=(const TensorSet&) = delete;
  ~TensorSet() {
    for (auto* m : owned_)
      if (m && m->deleter) m->deleter(m);
  }

  //! Adds `tensor` as `name`; `dtype` (a torch name, "" for the DLPack one) re-types raw bytes
  //! (a uint8 view of FP8 on a framework whose DLPack has no FP8).
  //! @throws config_error naming the tensor for a non-contiguous tensor, an unknown dtype, or a
  //!   dtype whose size differs from the bytes'.
  void add(const std::string& name, py::handle tensor, const std::string& dtype) {
    ManagedTensor* m = take(tensor, name);
    owned_.push_back(m);
    const auto& t = m->dl_tensor;
    TensorMeta meta;
    meta.name = name;
    meta.shape.assign(t.shape, t.shape + t.ndim);
    DType from{};
    const bool known = dl::to_dtype(t.dtype, from);
    if (!dtype.empty()) {
      meta.dtype = parse_dtype(dtype);
      const std::size_t bits = static_cast<std::size_t>(t.dtype.bits) * t.dtype.lanes;
      if (bits != dtype_size(meta.dtype) * 8)
        throw config_error(name, detail::cat("dtype ", dtype, " has ", dtype_size(meta.dtype) * 8,
                                             "-bit elements, the tensor ", bits, "-bit ones"));
    } else if (known) {
      meta.dtype = from;
    } else {
      throw config_error(name, detail::cat("DLPack dtype (code ", int(t.dtype.code), ", ",
                                           int(t.dtype.bits), " bits, ", t.dtype.lanes,
                                           " lanes) is not a wire dtype"));
    }
    check_contiguous(t, name);
    meta.validate();
    const auto dev = t.device.device_type;
    memory_.push_back(dev == dl::kCUDA || dev == dl::kCUDAManaged ? Memory::cuda : Memory::host);
    if (dev != dl::kCPU && dev != dl::kCUDAHost && dev != dl::kCUDA && dev != dl::kCUDAManaged)
      throw config_error(name, detail::cat("DLPack device type ", dev,
                                           " is neither host memory nor CUDA memory"));
    device_.push_back(t.device.device_id);
    data_.push_back(static_cast<char*>(t.data) + t.byte_offset);
    index_.emplace(name, metas_.size());
    metas_.push_back(std::move(meta));
  }

  //! @throws config_error naming the first tensor that is not in `want` memory (with why).
  void require(Memory want, const std::string& backend) const {
    for (std::size_t i = 0; i < metas_.size(); ++i)
      if (memory_[i] != want)
        throw config_error(metas_[i].name,
                           detail::cat("the ", backend, " backend needs ",
                                       want == Memory::host ? "host (CPU)" : "CUDA device",
                                       " memory; this tensor is in ",
                                       memory_[i] == Memory::host ? "host" : "CUDA", " memory"));
  }

  const std::vector<TensorMeta>& metas() const { return metas_; }
  const std::vector<void*>& data() const { return data_; }
  std::size_t size() const { return metas_.size(); }
  //! The index of `name`, or -1.
  std::ptrdiff_t find(const std::string& name) const {
    auto it = index_.find(name);
    return it == index_.end() ? -1 : static_cast<std::ptrdiff_t>(it->second);
  }
  std::size_t nbytes() const {
    std::size_t n = 0;
    for (const auto& m : metas_) n += m.nbytes();
    return n;
  }

 private:
  using ManagedTensor = dl::ManagedTensor;

  //! Takes over the DLManagedTensor of `o` (a "dltensor" capsule, or an object's __dlpack__()).
  static ManagedTensor* take(py::handle o, const std::string& name) {
    py::object cap = py::reinterpret_borrow<py::object>(o);
    if (!PyCapsule_CheckExact(cap.ptr())) {
      if (!py::hasattr(o, "__dlpack__"))
        throw config_error(name, "is not a tensor: a " +
                                     std::string(py::str(py::type::of(o).attr("__name__"))) +
                                     " has no __dlpack__ (pass a torch, NumPy or CuPy array)");
      cap = o.attr("__dlpack__")();
    }
    if (!PyCapsule_IsValid(cap.ptr(), dl::kCapsuleName))
      throw config_error(name, "__dlpack__ gave no unused \"dltensor\" capsule");
    auto* m = static_cast<ManagedTensor*>(PyCapsule_GetPointer(cap.ptr(), dl::kCapsuleName));
    if (!m) throw py::error_already_set();
    // Ours now: the capsule's destructor must no longer free it.
    if (PyCapsule_SetName(cap.ptr(), dl::kUsedCapsuleName) != 0) throw py::error_already_set();
    return m;
  }

  static void check_contiguous(const dl::Tensor& t, const std::string& name) {
    if (!t.strides) return;
    for (int d = 0; d < t.ndim; ++d)
      if (t.shape[d] == 0) return;  // (an empty tensor has no layout)
    std::int64_t expect = 1;
    for (int d = t.ndim - 1; d >= 0; --d) {
      // (a dim of size 1 may have any stride)
      if (t.shape[d] != 1 && t.strides[d] != expect)
        throw config_error(name, detail::cat("is not contiguous (dim ", d, " has stride ",
                                             t.strides[d], ", row-major needs ", expect,
                                             "): pass tensor.contiguous()"));
      expect *= t.shape[d];
    }
  }

  std::vector<TensorMeta> metas_;
  std::vector<void*> data_;
  std::vector<Memory> memory_;
  std::vector<int> device_;
  std::vector<ManagedTensor*> owned_;
  std::unordered_map<std::string, std::size_t> index_;
};

//! A library tensor exported through DLPack (see the file comment). Its memory is the library's
//! (a received chunk, a snapshot) and valid while `alive` is true: a View made for one call of
//! load_weights is closed after it, and exporting it then is a state_error.
class View {
 public:
  View(TensorMeta meta, void* data, Memory memory, int device, std::shared_ptr<bool> alive,
       py::object keep = py::none())
      : meta_(std::move(meta)),
        data_(data),
        memory_(memory),
        device_(device),
        alive_(std::move(alive)),
        keep_(std::move(keep)) {}

  const std::string& name() const { return meta_.name; }
  std::string dtype() const { return std::string(dtype_name(meta_.dtype)); }
  const std::vector<std::int64_t>& shape() const { return meta_.shape; }
  std::size_t nbytes() const { return meta_.nbytes(); }
  std::uintptr_t data_ptr() const { return reinterpret_cast<std::uintptr_t>(data_); }
  bool valid() const { return *alive_; }
  bool is_cuda() const { return memory_ == Memory::cuda; }
  py::tuple dlpack_device() const {
    return py::make_tuple(memory_ == Memory::cuda ? int(dl::kCUDA) : int(dl::kCPU),
                          memory_ == Memory::cuda ? device_ : 0);
  }

  //! A "dltensor" capsule over this tensor's memory; `as_bytes`: a 1-D uint8 tensor of its bytes
  //! (for a framework whose DLPack has no FP8).
  py::capsule capsule(bool as_bytes) const {
    if (!*alive_)
      throw state_error("tensor '" + meta_.name +
                        "' is no longer valid (a view of a received chunk lives only during the "
                        "load call: copy what you keep)");
    auto* ctx = new Ctx;
    ctx->shape = as_bytes ? std::vector<std::int64_t>{static_cast<std::int64_t>(nbytes())}
                          : meta_.shape;
    auto& t = ctx->managed.dl_tensor;
    t.data = data_;
    t.device = {memory_ == Memory::cuda ? dl::kCUDA : dl::kCPU,
                memory_ == Memory::cuda ? device_ : 0};
    t.ndim = static_cast<std::int32_t>(ctx->shape.size());
    t.dtype = as_bytes ? dl::DataType{dl::kUInt, 8, 1} : dl::from_dtype(meta_.dtype);
    t.shape = ctx->shape.data();
    t.strides = nullptr;
    t.byte_offset = 0;
    ctx->managed.manager_ctx = ctx;
    ctx->managed.deleter = [](dl::ManagedTensor* self) { delete static_cast<Ctx*>(self->manager_ctx); };
    return py::capsule(&ctx->managed, dl::kCapsuleName, [](PyObject* cap) {
      // Not taken by a consumer: free it here (a taken one is freed by its consumer).
      if (PyCapsule_IsValid(cap, dl::kCapsuleName)) {
        auto* m = static_cast<dl::ManagedTensor*>(PyCapsule_GetPointer(cap, dl::kCapsuleName));
        if (m && m->deleter) m->deleter(m);
      }
    });
  }

 private:
  struct Ctx {
    dl::ManagedTensor managed{};
    std::vector<std::int64_t> shape;
  };
  TensorMeta meta_;
  void* data_;
  Memory memory_;
  int device_;
  std::shared_ptr<bool> alive_;
  py::object keep_;  //!< what keeps the memory alive (a snapshot), if anything
};

}  // namespace weightsync::python
