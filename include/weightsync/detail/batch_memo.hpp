// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! CopyBatchMemo: what a device policy keeps of a batch of copies so that the same batch can run
//! again without its list (CudaPolicy: a launch from a descriptor table entry, see
//! detail::CopyTable), and RepeatedBatch: the pipeline's record of the inputs that made such a
//! batch, so that a sync repeated with the same plan, sources and destinations relaunches it.
//! And continues(): when a copy may be merged into the one before it.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace weightsync::detail {

//! Whether a copy to `dst` from `src` continues the copy of `bytes` bytes to `last_dst` from
//! `last_src` on both sides (its destination and its source each start where the last one's
//! end): the two are then one copy of the same bytes. The one rule of every list of copies that
//! merges (Workspace::add_copy, the host's eager pack, the ipc pulls' add_piece).
inline bool continues(const void* last_dst, const void* last_src, std::size_t bytes,
                      const void* dst, const void* src) noexcept {
  return static_cast<const std::byte*>(last_dst) + bytes == dst &&
         static_cast<const std::byte*>(last_src) + bytes == src;
}

//! Filled by a policy's copy_batch when the batch can be repeated as it lies (see
//! CudaPolicy::copy_batch_again); empty otherwise. Opaque to callers. Names a table entry and the
//! upload it used (a number unique in the process): a later upload into that entry makes it stale.
struct CopyBatchMemo {
  const void* entry = nullptr;
  std::uint64_t upload = 0;
  unsigned long long tiles = 0;
  std::uint32_t count = 0;
  explicit operator bool() const noexcept { return entry != nullptr; }
};

//! The inputs of the last batch of one kind (the eager pack, the eager copy out) and its memo.
//! Equal inputs make an equal list of copies: `plan` is the plan that laid it out (held, so that
//! its address names it), `keys` every address the list was made from.
struct RepeatedBatch {
  std::shared_ptr<const void> plan;
  std::vector<const void*> keys;
  std::vector<std::byte*> views;  //!< (the copy out: where each tensor without a destination lies)
  CopyBatchMemo batch;
  //! A policy that cannot relaunch a batch (HostPolicy): the list itself, run again as it is.
  std::vector<void*> dst;
  std::vector<const void*> src;
  std::vector<std::size_t> n;
  //! Whether `p` and `k` are what the last batch was made from, and it can be repeated.
  bool same(const void* p, const std::vector<const void*>& k) const noexcept {
    return (batch || !n.empty()) && plan.get() == p && keys == k;
  }
  //! The same with keys `k` followed by `tail` (compared in place, not copied after `k`).
  template <class T>
  bool same(const void* p, const std::vector<const void*>& k,
            const std::vector<T*>& tail) const noexcept {
    if (!(batch || !n.empty()) || plan.get() != p || keys.size() != k.size() + tail.size())
      return false;
    if (!std::equal(k.begin(), k.end(), keys.begin())) return false;
    const void* const* rest = keys.data() + k.size();
    for (std::size_t i = 0; i < tail.size(); ++i)
      if (rest[i] != static_cast<const void*>(tail[i])) return false;
    return true;
  }
  void forget() noexcept {
    batch = {};
    plan.reset();
    n.clear();
  }
};

}  // namespace weightsync::detail
