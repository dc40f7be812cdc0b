// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The driver calls the IPC transports need and the runtime does not offer (found at run time:
//! no link dependency on libcuda): the allocation behind a pointer, and its size.

#include "weightsync/config.hpp"
#if !WEIGHTSYNC_HAS_CUDA
#error "<weightsync/ipc/detail/driver.hpp> needs the CUDA runtime (WEIGHTSYNC_HAS_CUDA=0)"
#endif

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <optional>

#include "weightsync/error.hpp"

namespace weightsync::detail {

//! Driver calls the runtime does not offer, through cudaGetDriverEntryPointByVersion (no link
//! dependency on libcuda).
struct DriverApi {
  using GetAddressRange = CUresult (*)(CUdeviceptr*, std::size_t*, CUdeviceptr);
  using PointerGetAttribute = CUresult (*)(void*, CUpointer_attribute, CUdeviceptr);
  GetAddressRange get_address_range = nullptr;
  PointerGetAttribute pointer_get_attribute = nullptr;

  static const DriverApi& get() {
    static const DriverApi api = [] {
      DriverApi a;
      cudaDriverEntryPointQueryResult q{};
      void* fn = nullptr;
      if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000, cudaEnableDefault,
                                           &q) == cudaSuccess &&
          q == cudaDriverEntryPointSuccess)
        a.get_address_range = reinterpret_cast<GetAddressRange>(fn);
      fn = nullptr;
      if (cudaGetDriverEntryPointByVersion("cuPointerGetAttribute", &fn, 12000, cudaEnableDefault,
                                           &q) == cudaSuccess &&
          q == cudaDriverEntryPointSuccess)
        a.pointer_get_attribute = reinterpret_cast<PointerGetAttribute>(fn);
      (void)cudaGetLastError();
      return a;
    }();
    if (!api.get_address_range || !api.pointer_get_attribute)
      throw error(
          "[weightsync.ipc] the CUDA driver does not provide cuMemGetAddressRange / "
          "cuPointerGetAttribute");
    return api;
  }
};

//! The allocation behind a device pointer.
struct Allocation {
  std::uint64_t buffer_id = 0;  //!< unique per allocation within the owning process
  const std::byte* base = nullptr;
  std::size_t size = 0;
};

//! Nullopt when `p` is not device memory this process can see.
inline std::optional<Allocation> find_allocation(const void* p) {
  const auto& d = DriverApi::get();
  Allocation a;
  CUdeviceptr base = 0;
  if (d.get_address_range(&base, &a.size, reinterpret_cast<CUdeviceptr>(p)) != CUDA_SUCCESS)
    return std::nullopt;
  unsigned long long id = 0;
  if (d.pointer_get_attribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID,
                              reinterpret_cast<CUdeviceptr>(p)) != CUDA_SUCCESS)
    return std::nullopt;
  a.base = reinterpret_cast<const std::byte*>(base);
  a.buffer_id = id;
  return a;
}

//! The buffer id of the allocation holding `p` (nullopt when none does): one driver call, enough
//! to tell whether an allocation seen before is still the one there (ids are never reused within
//! a process).
inline std::optional<std::uint64_t> buffer_id_at(const void* p) {
  unsigned long long id = 0;
  if (DriverApi::get().pointer_get_attribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID,
                                             reinterpret_cast<CUdeviceptr>(p)) != CUDA_SUCCESS)
    return std::nullopt;
  return id;
}

//! The size of the allocation a (possibly IPC-mapped) device pointer starts, if the driver says.
inline std::optional<std::size_t> mapped_size(const void* p) {
  CUdeviceptr base = 0;
  std::size_t size = 0;
  if (DriverApi::get().get_address_range(&base, &size, reinterpret_cast<CUdeviceptr>(p)) !=
      CUDA_SUCCESS)
    return std::nullopt;
  return size - static_cast<std::size_t>(reinterpret_cast<CUdeviceptr>(p) - base);
}

}  // namespace weightsync::detail
