// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! A gather/scatter copy kernel for packing and unpacking: one launch moves any number of pieces
//! of any size and alignment, using the SMs at device-memory bandwidth, where copy engines pay a
//! fixed cost per piece. A launch's parameters are copied with it, so the pieces travel in the
//! smallest way that fits: up to 16 in a small parameter block; more from a CopyTable in device
//! memory, uploaded once and reused while the pieces stay the same (a sync repeated with the same
//! tensors pays no upload); else up to 960 per launch in a 30 KiB parameter block. The kernel ships as PTX text
//! (detail/batched_copy_ptx.hpp, generated from kernels/batched_copy.cu; its ABI:
//! <weightsync/kernels/batched_copy_abi.hpp>) and is loaded at run time with cudaLibraryLoadData,
//! so that including this header needs no nvcc. If it cannot be loaded, callers fall back to copy
//! engines.

#include "weightsync/config.hpp"
#if !WEIGHTSYNC_HAS_CUDA
#error "<weightsync/cuda/batched_copy.hpp> needs the CUDA runtime (WEIGHTSYNC_HAS_CUDA=0)"
#endif

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "weightsync/cuda/check.hpp"
#include "weightsync/cuda/device_buffer.hpp"
#include "weightsync/cuda/event.hpp"
#include "weightsync/detail/batch_memo.hpp"
#include "weightsync/cuda/detail/batched_copy_ptx.hpp"
#include "weightsync/kernels/batched_copy_abi.hpp"
#include "weightsync/log.hpp"

namespace weightsync::detail {

//! Descriptor tables in device memory for the batched copy kernel, for one caller (a device
//! policy): a few entries, each holding the pieces of its last upload. A launch whose pieces equal
//! an entry's reuses it as it lies; otherwise it uploads them into an entry that no launch still
//! reads (from pinned memory, on the launch's stream). Never blocks and never allocates while
//! launching (reserve() does): when no entry is free and large enough, acquire() returns null and
//! the caller passes the pieces by value.
class CopyTable {
 public:
  explicit CopyTable(int device) : device_(device) {}
  CopyTable(const CopyTable&) = delete;
  CopyTable& operator=(const CopyTable&) = delete;

  //! The device copy of d[0..count), ready on `s` once the work enqueued there so far is done;
  //! null when no entry is free. The caller must launch its kernel on `s` and then call used(s).
  const kernels::CopyDesc* acquire(const kernels::CopyDesc* d, std::size_t count, cudaStream_t s) {
    const std::size_t bytes = count * sizeof(kernels::CopyDesc);
    ++clock_;
    for (Entry& e : entries_)
      if (e.count == count && std::memcmp(e.held.data(), d, bytes) == 0) {
        // The upload may still be in flight (on another stream: streams are not told apart by
        // their handles, which threads and recreated streams share): this launch waits for it.
        const kernels::CopyDesc* r = reuse(e, s);
        ++counts_.reused;
        return r;
      }
    Entry* pick = nullptr;
    for (Entry& e : entries_)
      if (e.capacity >= count && e.free() && (pick == nullptr || e.last < pick->last)) pick = &e;
    if (pick == nullptr) {
      ++counts_.full;
      return nullptr;
    }
    Entry& e = *pick;
    e.count = 0;  // (invalid until the upload is enqueued)
    std::memcpy(e.staging.data(), d, bytes);
    check(cudaMemcpyAsync(e.dev.data(), e.staging.data(), bytes, cudaMemcpyHostToDevice, s),
          "cudaMemcpyAsync(copy table)");
    e.uploaded->record(s);
    e.upload_seen = false;
    e.upload = next_upload();
    e.held.assign(d, d + count);
    e.count = count;
    ++counts_.uploaded;
    return take(e);
  }
  //! The entry and upload that the last acquire() returned, for again(): a memo of that launch.
  CopyBatchMemo memo(unsigned long long tiles) const noexcept {
    if (current_ == nullptr) return {};
    return CopyBatchMemo{current_, current_->upload, tiles,
                         static_cast<std::uint32_t>(current_->count)};
  }
  //! The device copy of a launch's pieces that `m` remembers, ready on `s` as acquire() makes it;
  //! null when `m` is stale (its entry took another upload since, or is not this table's). The
  //! caller must launch on `s` and then call used(s), as after acquire().
  const kernels::CopyDesc* again(const CopyBatchMemo& m, cudaStream_t s) {
    for (Entry& e : entries_)
      if (&e == m.entry && e.upload == m.upload && e.count == m.count && e.count > 0) {
        ++clock_;
        const kernels::CopyDesc* d = reuse(e, s);
        ++counts_.repeated;  // (counted once reuse() has not thrown)
        return d;
      }
    return nullptr;
  }
  //! Makes room for batches of `count` pieces in every entry that no launch reads. The only place
  //! a table allocates: callers reserve where no collective is in flight (a cudaFree would wait
  //! for the whole device, NCCL's kernels included; an outgrown entry's buffers are kept until the
  //! table goes). acquire() finds no entry for a larger batch, which then goes by value.
  void reserve(std::size_t count) {
    for (Entry& e : entries_) {
      if (e.capacity >= count || !e.free()) continue;
      CurrentDeviceGuard g(device_);
      const std::size_t cap = std::max<std::size_t>(count, 2 * e.capacity);
      DeviceBuffer dev(cap * sizeof(kernels::CopyDesc), device_);
      PinnedBuffer staging(cap * sizeof(kernels::CopyDesc));
      if (!e.uploaded) e.uploaded.emplace(device_);
      if (!e.done) e.done.emplace(device_);
      if (e.capacity > 0) {
        outgrown_.push_back(std::move(e.dev));
        outgrown_host_.push_back(std::move(e.staging));
      }
      e.dev = std::move(dev);
      e.staging = std::move(staging);
      e.capacity = cap;
      e.count = 0;
      e.upload = 0;
    }
  }
  //! What acquire() did so far: reused an entry, uploaded into one, found none free; and how
  //! many launches again() repeated without a list.
  struct Counts {
    std::uint64_t reused = 0, uploaded = 0, full = 0, repeated = 0;
  };
  Counts counts() const noexcept { return counts_; }
  //! Held from acquire() to used(): a table may serve launches from several threads.
  std::mutex& mutex() noexcept { return mutex_; }
  //! The launch that acquired an entry was enqueued on `s`: the entry is busy until it is done.
  void used(cudaStream_t s) {
    if (current_ == nullptr) return;
    current_->done->record(s);
    current_->recorded = true;
    current_ = nullptr;
  }

 private:
  struct Entry {
    DeviceBuffer dev;
    PinnedBuffer staging;  // read by the upload until `done` (the launch after it) completes
    std::optional<CudaEvent> uploaded, done;
    std::vector<kernels::CopyDesc> held;
    std::size_t count = 0, capacity = 0;
    std::uint64_t last = 0;
    std::uint64_t upload = 0;  // which upload the entry holds (next_upload(): unique)
    bool upload_seen = false;  // `uploaded` was seen complete (it stays so until the next upload)
    bool recorded = false;     // `done` was recorded after the entry's last launch
    bool free() const { return !recorded || done->ready(); }
  };
  static std::uint64_t next_upload() noexcept {
    static std::atomic<std::uint64_t> n{0};
    return ++n;
  }
  //! Orders a launch on `s` from entry `e`, which holds the pieces already, after its upload and
  //! after any launch elsewhere that still reads it.
  const kernels::CopyDesc* reuse(Entry& e, cudaStream_t s) {
    // The upload may still be in flight (on another stream: streams are not told apart by their
    // handles, which threads and recreated streams share): this launch waits for it.
    if (!e.upload_seen) {
      if (e.uploaded->ready())
        e.upload_seen = true;
      else
        check(cudaStreamWaitEvent(s, e.uploaded->get(), 0), "cudaStreamWaitEvent");
    }
    // A launch elsewhere may still read it: this one runs after it, so that `done`, recorded
    // after this launch, covers both.
    if (!e.free()) check(cudaStreamWaitEvent(s, e.done->get(), 0), "cudaStreamWaitEvent");
    return take(e);
  }
  const kernels::CopyDesc* take(Entry& e) {
    e.last = clock_;
    current_ = &e;
    return reinterpret_cast<const kernels::CopyDesc*>(e.dev.data());
  }
  static constexpr std::size_t kEntries = 4;
  std::mutex mutex_;
  int device_;
  // (Declared before the entries: destroyed after them. Each entry's capacity doubles when it
  // grows, so they hold at most about as much again as the entries.)
  std::vector<DeviceBuffer> outgrown_;
  std::vector<PinnedBuffer> outgrown_host_;
  std::array<Entry, kEntries> entries_;
  Entry* current_ = nullptr;
  std::uint64_t clock_ = 0;
  Counts counts_;
};

//! A policy's CopyTable, made by its first reserve (get()). A copy of the policy starts with none of its own: a
//! table is never shared between policies.
class CopyTableSlot {
 public:
  CopyTableSlot() = default;
  CopyTableSlot(const CopyTableSlot&) noexcept {}
  CopyTableSlot& operator=(const CopyTableSlot& o) noexcept {
    if (this != &o) reset(nullptr);
    return *this;
  }
  CopyTableSlot(CopyTableSlot&& o) noexcept : table_(o.table_.exchange(nullptr)) {}
  CopyTableSlot& operator=(CopyTableSlot&& o) noexcept {
    if (this != &o) reset(o.table_.exchange(nullptr));
    return *this;
  }
  ~CopyTableSlot() { reset(nullptr); }
  //! The table, or null before the first reserve (CudaPolicy::reserve_copy_batches): a launch
  //! uses a table only once one was reserved, and never makes one.
  CopyTable* existing() const noexcept { return table_.load(std::memory_order_acquire); }
  CopyTable& get(int device) const {
    if (CopyTable* t = table_.load(std::memory_order_acquire)) return *t;
    auto made = std::make_unique<CopyTable>(device);
    CopyTable* none = nullptr;
    if (table_.compare_exchange_strong(none, made.get(), std::memory_order_acq_rel))
      return *made.release();
    return *none;  // another thread made it first
  }

 private:
  void reset(CopyTable* t) noexcept { delete table_.exchange(t); }
  mutable std::atomic<CopyTable*> table_{nullptr};
};

//! The loaded kernels (context-independent library), or null when loading failed (logged once).
class BatchedCopyKernel {
 public:
  static const BatchedCopyKernel* instance() {
    static BatchedCopyKernel k;
    return k.kernel_ ? &k : nullptr;
  }

  //! Copies `count` pieces on `stream`; `sms` is the device's multiprocessor count. With
  //! `tables` (once a reserve made its table), more than kSmallCopyDescs pieces travel through
  //! its table when it has a free entry large enough; else they go by value. `memo`, when given,
  //! is set to what again() needs to repeat this launch (empty when it did not use a table).
  void launch(void* const* dst, const void* const* src, const std::size_t* n, std::size_t count,
              cudaStream_t stream, int sms, const CopyTableSlot* tables = nullptr,
              CopyBatchMemo* memo = nullptr) const {
    (void)sms;
    if (memo != nullptr) *memo = {};
    thread_local std::vector<kernels::CopyDesc> descs;
    descs.clear();
    unsigned long long tiles = 0;
    for (std::size_t i = 0; i < count; ++i) {
      if (n[i] == 0) continue;
      tiles += (n[i] + kernels::kCopyTileBytes - 1) / kernels::kCopyTileBytes;
      descs.push_back(kernels::CopyDesc{static_cast<const unsigned char*>(src[i]),
                                        static_cast<unsigned char*>(dst[i]), n[i], tiles});
    }
    if (descs.empty()) return;
    if (descs.size() <= kernels::kSmallCopyDescs) {
      kernels::CopyBatchSmallParams p{};
      p.total_tiles = tiles;
      p.count = static_cast<std::uint32_t>(descs.size());
      std::copy(descs.begin(), descs.end(), p.d);
      run(small_, &p, tiles, stream, "cudaLaunchKernel(ws_batched_copy_small)");
      return;
    }
    CopyTable* table = tables != nullptr && table_ != nullptr ? tables->existing() : nullptr;
    if (table != nullptr && descs.size() <= 0xffffffffu) {
      std::lock_guard lock(table->mutex());
      if (const auto* d = table->acquire(descs.data(), descs.size(), stream)) {
        const CopyBatchMemo m = table->memo(tiles);
        run_table(*table, d, tiles, static_cast<std::uint32_t>(descs.size()), stream);
        if (memo != nullptr) *memo = m;
        return;
      }
    }
    // By value, up to kMaxCopyDescs pieces per launch (tile numbers restart in each).
    kernels::CopyBatchParams p;
    for (std::size_t i = 0; i < descs.size();) {
      p.count = 0;
      const unsigned long long before = i ? descs[i - 1].tile_end : 0;
      for (; i < descs.size() && p.count < kernels::kMaxCopyDescs; ++i) {
        kernels::CopyDesc d = descs[i];
        d.tile_end -= before;
        p.d[p.count++] = d;
      }
      p.total_tiles = p.d[p.count - 1].tile_end;
      run(kernel_, &p, p.total_tiles, stream, "cudaLaunchKernel(ws_batched_copy)");
    }
  }

  //! Repeats the launch that `m` remembers (see launch()) on `stream`, without its list: the
  //! same pieces, from the same table entry. @returns false, having enqueued nothing, when `m` is
  //! empty or stale (the caller then lists the pieces and launches them).
  bool again(const CopyBatchMemo& m, cudaStream_t stream, const CopyTableSlot& tables) const {
    CopyTable* table = table_ != nullptr && m ? tables.existing() : nullptr;
    if (table == nullptr) return false;
    std::lock_guard lock(table->mutex());
    const auto* d = table->again(m, stream);
    if (d == nullptr) return false;
    run_table(*table, d, m.tiles, m.count, stream);
    return true;
  }

 private:
  //! Launches the table kernel over `count` pieces at `d` (an entry just acquired: the table's
  //! mutex is held) and marks the entry busy until it is done.
  void run_table(CopyTable& table, const kernels::CopyDesc* d, unsigned long long tiles,
                 std::uint32_t count, cudaStream_t stream) const {
    kernels::CopyTableParams p{d, tiles, count, 0};
    try {
      run(table_, &p, tiles, stream, "cudaLaunchKernel(ws_batched_copy_table)");
    } catch (...) {
      table.used(stream);
      throw;
    }
    table.used(stream);
  }
  BatchedCopyKernel() {
    if (std::getenv("WEIGHTSYNC_COPY") && std::string(std::getenv("WEIGHTSYNC_COPY")) == "ce") return;
    cudaLibrary_t lib = nullptr;
    auto st = cudaLibraryLoadData(&lib, kBatchedCopyPtx, nullptr, nullptr, 0, nullptr, nullptr, 0);
    if (st == cudaSuccess) st = cudaLibraryGetKernel(&kernel_, lib, "ws_batched_copy");
    if (st == cudaSuccess) st = cudaLibraryGetKernel(&small_, lib, "ws_batched_copy_small");
    if (st == cudaSuccess) st = cudaLibraryGetKernel(&table_, lib, "ws_batched_copy_table");
    if (st != cudaSuccess) {
      (void)cudaGetLastError();
      kernel_ = small_ = table_ = nullptr;
      log(LogLevel::warning, std::string("batched copy kernel unavailable (") +
                                 cudaGetErrorName(st) + "); packing falls back to copy engines");
    }
    // The library stays loaded for the life of the process (one per process, like a module).
  }
  //! One short-lived block per tile (not a persistent grid), so that the blocks of NCCL's
  //! kernels, on a higher-priority stream, get SMs as soon as they are launched.
  static void run(cudaKernel_t k, void* params, unsigned long long tiles, cudaStream_t s,
                  const char* what) {
    const auto grid = static_cast<unsigned>(std::min<unsigned long long>(tiles, 0x7fffffffull));
    void* args[] = {params};
    check(cudaLaunchKernel(reinterpret_cast<const void*>(k), dim3(grid),
                           dim3(kernels::kCopyThreads), args, 0, s),
          what);
  }
  cudaKernel_t kernel_ = nullptr, small_ = nullptr, table_ = nullptr;
};

}  // namespace weightsync::detail
