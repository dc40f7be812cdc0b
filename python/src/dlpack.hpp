// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The DLPack structs the binding exchanges with torch, NumPy and CuPy, written from the public
//! DLPack specification (ABI version 0.x: DLManagedTensor, and the Python capsule protocol: a
//! PyCapsule named "dltensor" holding a DLManagedTensor*, renamed "used_dltensor" by the consumer
//! that takes it over and then calls its deleter once done). Only what the binding uses.

#include <cstdint>

#include "weightsync/dtype.hpp"

namespace weightsync::python::dl {

//! DLDeviceType values this binding meets.
enum DeviceType : std::int32_t {
  kCPU = 1,
  kCUDA = 2,
  kCUDAHost = 3,  //!< pinned host memory
  kCUDAManaged = 13,
};

//! DLDataTypeCode values (the float8 codes are DLPack 1.1's).
enum TypeCode : std::uint8_t {
  kInt = 0,
  kUInt = 1,
  kFloat = 2,
  kBfloat = 4,
  kBool = 6,
  kFloat8_e4m3fn = 10,
  kFloat8_e5m2 = 12,
};

struct Device {
  std::int32_t device_type;
  std::int32_t device_id;
};

struct DataType {
  std::uint8_t code;
  std::uint8_t bits;
  std::uint16_t lanes;
};

struct Tensor {
  void* data;
  Device device;
  std::int32_t ndim;
  DataType dtype;
  std::int64_t* shape;
  std::int64_t* strides;  //!< in elements; null: compact row-major
  std::uint64_t byte_offset;
};

struct ManagedTensor {
  Tensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(ManagedTensor* self);
};

inline constexpr const char* kCapsuleName = "dltensor";
inline constexpr const char* kUsedCapsuleName = "used_dltensor";

//! The wire dtype of a DLPack dtype; false when there is none (complex, vectors, int4, ...).
inline bool to_dtype(DataType t, DType& out) {
  if (t.lanes != 1) return false;
  struct Row {
    TypeCode code;
    std::uint8_t bits;
    DType dtype;
  };
  static constexpr Row rows[] = {
      {kFloat, 32, DType::float32},       {kFloat, 16, DType::float16},
      {kBfloat, 16, DType::bfloat16},     {kFloat, 64, DType::float64},
      {kInt, 8, DType::int8},             {kUInt, 8, DType::uint8},
      {kInt, 16, DType::int16},           {kInt, 32, DType::int32},
      {kInt, 64, DType::int64},           {kBool, 8, DType::bool_},
      {kFloat8_e4m3fn, 8, DType::float8_e4m3fn}, {kFloat8_e5m2, 8, DType::float8_e5m2},
  };
  for (const auto& r : rows)
    if (r.code == t.code && r.bits == t.bits) {
      out = r.dtype;
      return true;
    }
  return false;
}

//! The DLPack dtype of a wire dtype.
inline DataType from_dtype(DType d) {
  switch (d) {
    case DType::float32: return {kFloat, 32, 1};
    case DType::float16: return {kFloat, 16, 1};
    case DType::bfloat16: return {kBfloat, 16, 1};
    case DType::float64: return {kFloat, 64, 1};
    case DType::int8: return {kInt, 8, 1};
    case DType::uint8: return {kUInt, 8, 1};
    case DType::int16: return {kInt, 16, 1};
    case DType::int32: return {kInt, 32, 1};
    case DType::int64: return {kInt, 64, 1};
    case DType::bool_: return {kBool, 8, 1};
    case DType::float8_e4m3fn: return {kFloat8_e4m3fn, 8, 1};
    case DType::float8_e5m2: return {kFloat8_e5m2, 8, 1};
  }
  return {kUInt, 8, 1};
}

}  // namespace weightsync::python::dl
