// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! TensorMeta (name, dtype, shape) and the non-owning views the pipeline hands around.

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "weightsync/detail/format.hpp"
#include "weightsync/dtype.hpp"
#include "weightsync/error.hpp"

namespace weightsync {

//! Describes one named tensor on the wire: contiguous, row-major, `dtype` elements of `shape`.
//! A 0-dim shape is a scalar (1 element); a shape with a 0 dim is a valid, empty tensor.
struct TensorMeta {
  std::string name;
  DType dtype = DType::float32;
  std::vector<std::int64_t> shape;

  //! Number of elements. @throws config_error on a negative dim or a product over size_t.
  std::size_t numel() const {
    std::size_t n = 1;
    for (std::size_t i = 0; i < shape.size(); ++i) {
      const auto d = shape[i];
      if (d < 0)
        throw config_error(field(), detail::cat("negative dim ", d, " at index ", i, " in shape ",
                                                detail::shape_string(shape)));
      // (no division: every sync asks this of every tensor)
      if (__builtin_mul_overflow(n, static_cast<std::size_t>(d), &n))
        throw config_error(field(), "element count of shape " + detail::shape_string(shape) +
                                        " overflows size_t");
    }
    return n;
  }

  //! Bytes on the wire: numel() * dtype_size(dtype). @throws config_error on overflow.
  std::size_t nbytes() const {
    const std::size_t n = numel();
    const std::size_t s = dtype_size(dtype);
    std::size_t b = 0;
    if (__builtin_mul_overflow(n, s, &b))
      throw config_error(field(), "byte count of shape " + detail::shape_string(shape) +
                                      " overflows size_t");
    return b;
  }

  //! Checks the shape (dims, overflow) and the dtype value.
  void validate() const { (void)nbytes(); }

  friend bool operator==(const TensorMeta&, const TensorMeta&) = default;

 private:
  std::string field() const { return "shape of '" + name + "'"; }
};

//! A received tensor handed to a LoadWeightsFn: its metadata and `meta->nbytes()` bytes at `data`
//! (device memory on the CUDA path, host memory on the host path). Valid only during the call.
struct TensorView {
  const TensorMeta* meta = nullptr;
  void* data = nullptr;
  std::size_t nbytes = 0;

  const std::string& name() const { return meta->name; }
};

//! A tensor offered to the producer: what it claims to be and where its bytes are.
//! Models SourceTensor; the simplest element type for a TensorIterator.
struct SourceTensorRef {
  const TensorMeta* meta_ = nullptr;
  const void* data_ = nullptr;

  const TensorMeta& meta() const { return *meta_; }
  const void* data() const { return data_; }
};

}  // namespace weightsync
