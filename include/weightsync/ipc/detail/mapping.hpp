// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The consumer's side of the IPC handles: an opened mapping (closed exactly once, by its
//! destructor) and the cache that keeps mappings between transfers, replaces one whose handle
//! changed, and closes those a plan no longer names (memory the producer freed or replaced; the
//! failure to avoid is vLLM's packed-IPC leak #51258).

#include "weightsync/config.hpp"
#if !WEIGHTSYNC_HAS_CUDA
#error "<weightsync/ipc/detail/mapping.hpp> needs the CUDA runtime (WEIGHTSYNC_HAS_CUDA=0)"
#endif

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "weightsync/cuda/check.hpp"
#include "weightsync/ipc/detail/driver.hpp"
#include "weightsync/ipc/detail/plan.hpp"
#include "weightsync/ipc/options.hpp"

namespace weightsync::detail {

static_assert(sizeof(cudaIpcMemHandle_t) == kIpcHandleBytes);

//! An opened IPC mapping; closed exactly once, by the destructor.
class IpcMapping {
 public:
  IpcMapping() = default;
  IpcMapping(const char* handle, int device) : device_(device) {
    cudaIpcMemHandle_t h;
    std::memcpy(&h, handle, sizeof h);
    CurrentDeviceGuard g(device);
    check(cudaIpcOpenMemHandle(&ptr_, h, cudaIpcMemLazyEnablePeerAccess), "cudaIpcOpenMemHandle");
  }
  IpcMapping(const IpcMapping&) = delete;
  IpcMapping& operator=(const IpcMapping&) = delete;
  IpcMapping(IpcMapping&& o) noexcept : device_(o.device_), ptr_(std::exchange(o.ptr_, nullptr)) {}
  IpcMapping& operator=(IpcMapping&& o) noexcept {
    if (this != &o) {
      reset();
      device_ = o.device_;
      ptr_ = std::exchange(o.ptr_, nullptr);
    }
    return *this;
  }
  ~IpcMapping() { reset(); }
  std::byte* data() const noexcept { return static_cast<std::byte*>(ptr_); }
  void reset() noexcept {
    if (!ptr_) return;
    CurrentDeviceGuard g(device_);
    check_nothrow(cudaIpcCloseMemHandle(ptr_), "cudaIpcCloseMemHandle");
    ptr_ = nullptr;
  }

 private:
  int device_ = -1;
  void* ptr_ = nullptr;
};

//! The consumer's mappings, keyed by (producer pid, buffer id), kept between transfers.
class MappingCache {
 public:
  explicit MappingCache(int device) : device_(device) {}

  //! Opens (once) every allocation `plan` names and returns their bases here; clamps each region's
  //! size to what the driver mapped, so that no later read can pass it whatever the plan claims.
  std::vector<std::byte*> map(IpcPlan& plan, IpcStats& stats) {
    std::vector<std::byte*> base(plan.regions.size(), nullptr);
    for (std::size_t r = 0; r < plan.regions.size(); ++r) {
      auto& reg = plan.regions[r];
      const auto key = std::make_pair(plan.pid, reg.buffer_id);
      auto it = mappings_.find(key);
      if (it == mappings_.end() || it->second.handle != reg.handle) {
        if (it != mappings_.end()) {
          mappings_.erase(it);
          stats.closed++;
        }
        Mapped m;
        m.handle = reg.handle;
        m.map = IpcMapping(reg.handle.data(), device_);
        stats.opened++;
        m.size = mapped_size(m.map.data()).value_or(reg.size);
        it = mappings_.emplace(key, std::move(m)).first;
      }
      reg.size = std::min<std::uint64_t>(reg.size, it->second.size);
      base[r] = it->second.map.data();
    }
    stats.mapped = mappings_.size();
    stats.regions = plan.regions.size();
    return base;
  }

  //! Closes the mappings `plan` does not name.
  void prune(const IpcPlan& plan, IpcStats& stats) {
    prune(std::span<const IpcPlan>(&plan, 1), stats);
  }
  //! Closes the mappings none of `plans` (one per producer) names.
  void prune(std::span<const IpcPlan> plans, IpcStats& stats) {
    for (auto it = mappings_.begin(); it != mappings_.end();) {
      const bool named = std::any_of(plans.begin(), plans.end(), [&](const IpcPlan& plan) {
        return it->first.first == plan.pid &&
               std::any_of(plan.regions.begin(), plan.regions.end(),
                           [&](const auto& reg) { return reg.buffer_id == it->first.second; });
      });
      if (named) {
        ++it;
        continue;
      }
      it = mappings_.erase(it);
      stats.closed++;
    }
    stats.mapped = mappings_.size();
  }

  //! Closes every mapping (each exactly once).
  void clear(IpcStats& stats) noexcept {
    stats.closed += mappings_.size();
    mappings_.clear();
    stats.mapped = 0;
  }

 private:
  struct Mapped {
    std::string handle;
    std::uint64_t size = 0;
    IpcMapping map;
  };
  int device_;
  std::map<std::pair<std::int32_t, std::uint64_t>, Mapped> mappings_;
};

}  // namespace weightsync::detail
