// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The producer's side of the IPC handles: whole allocations, never single tensors, are exported
//! (cudaIpcGetMemHandle), once each, cached by the driver's buffer id, and dropped when a plan no
//! longer names them.

#include "weightsync/config.hpp"
#if !WEIGHTSYNC_HAS_CUDA
#error "<weightsync/ipc/detail/exporter.hpp> needs the CUDA runtime (WEIGHTSYNC_HAS_CUDA=0)"
#endif

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "weightsync/detail/format.hpp"
#include "weightsync/ipc/detail/driver.hpp"
#include "weightsync/ipc/detail/plan.hpp"
#include "weightsync/ipc/options.hpp"
#include "weightsync/log.hpp"

namespace weightsync::detail {

class ExportCache {
 public:
  //! Starts a plan: no region is known yet.
  void begin() {
    region_base_.clear();
    region_of_.clear();
    hint_ = 0;
  }

  //! The plan region of the allocation holding [p, p + n), adding it to `plan` (exported once per
  //! allocation); nullopt when it cannot be exported.
  std::optional<std::size_t> region(const std::byte* p, std::size_t n, IpcPlan& plan,
                                    IpcStats& stats) {
    // Within one transfer allocations cannot change (the bytes must stay valid): a tensor inside
    // an allocation already found needs no driver call. Most tensors are found here.
    for (std::size_t r = hint_; r < hint_ + region_base_.size(); ++r) {
      const std::size_t i = r % region_base_.size();
      if (p >= region_base_[i] && p + n <= region_base_[i] + plan.regions[i].size) return hint_ = i;
    }
    const auto a = find_allocation(p);
    if (!a || p + n > a->base + a->size) return std::nullopt;
    if (auto it = region_of_.find(a->buffer_id); it != region_of_.end()) return hint_ = it->second;
    const std::string* handle = handle_of(*a, stats);
    if (!handle) return std::nullopt;
    const std::size_t idx = plan.regions.size();
    plan.regions.push_back({a->buffer_id, *handle, a->size});
    region_base_.push_back(a->base);
    region_of_[a->buffer_id] = idx;
    return hint_ = idx;
  }

  //! Where plan region `r` starts in this process.
  const std::byte* base(std::size_t r) const { return region_base_[r]; }

  //! Drops the handles of allocations `plan` does not name (freed or replaced memory).
  void prune(const IpcPlan& plan) {
    for (auto it = exported_.begin(); it != exported_.end();) {
      const bool named = std::any_of(plan.regions.begin(), plan.regions.end(),
                                     [&](const auto& r) { return r.buffer_id == it->first; });
      it = named ? std::next(it) : exported_.erase(it);
    }
  }

 private:
  const std::string* handle_of(const Allocation& a, IpcStats& stats) {
    if (auto it = exported_.find(a.buffer_id); it != exported_.end()) return &it->second;
    cudaIpcMemHandle_t h;
    if (cudaIpcGetMemHandle(&h, const_cast<std::byte*>(a.base)) != cudaSuccess) {
      (void)cudaGetLastError();
      return nullptr;
    }
    stats.exported++;
    if (a.size % (std::size_t{2} << 20) != 0)
      log(LogLevel::warning,
          cat("ipc: exporting an allocation of ", a.size,
              " bytes, not whole 2 MiB pages: the driver may map it with small pages, and copy "
              "engines then read it about a quarter slower (allocate weights in multiples of "
              "2 MiB, as PyTorch does)"));
    return &exported_.emplace(a.buffer_id, std::string(reinterpret_cast<const char*>(&h), sizeof h))
                .first->second;
  }

  std::map<std::uint64_t, std::string> exported_;   // buffer id -> handle
  std::vector<const std::byte*> region_base_;       // per plan region: its base here
  std::map<std::uint64_t, std::size_t> region_of_;  // buffer id -> plan region
  std::size_t hint_ = 0;                            // the region the last tensor was found in
};

}  // namespace weightsync::detail
