// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The host "device policy": host memory and synchronous streams, so that the generic pipeline
//! runs unchanged on machines without a GPU. Every operation completes before it returns.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>

#include "weightsync/concepts.hpp"
#include "weightsync/detail/digest.hpp"
#include "weightsync/error.hpp"

namespace weightsync {

//! A synchronous stream: work "enqueued" on it has completed when the call returns.
struct HostStream {
  friend bool operator==(HostStream, HostStream) = default;
};

//! Host memory and synchronous copies. Counts its allocations so tests can prove that the ring is
//! reused (no allocation after the first round).
class HostPolicy {
 public:
  using stream_type = HostStream;
  //! Work is complete when the call returns (results may be read at once).
  static constexpr bool synchronous = true;

  //! Owning, 64-byte aligned host memory. Move-only.
  class Buffer {
   public:
    Buffer() = default;
    explicit Buffer(std::size_t n) : size_(n) {
      if (n == 0) return;
      data_.reset(static_cast<std::byte*>(::operator new(n, std::align_val_t{64})));
      allocation_counter().fetch_add(1, std::memory_order_relaxed);
    }
    std::byte* data() const noexcept { return data_.get(); }
    std::size_t size() const noexcept { return size_; }

   private:
    struct Free {
      void operator()(std::byte* p) const noexcept { ::operator delete(p, std::align_val_t{64}); }
    };
    std::unique_ptr<std::byte, Free> data_;
    std::size_t size_ = 0;
  };
  using HostBuffer = Buffer;

  struct Stream {
    HostStream get() const noexcept { return {}; }
  };
  struct Event {};

  //! Allocations made through any HostPolicy since the process started.
  static std::size_t allocations() noexcept {
    return allocation_counter().load(std::memory_order_relaxed);
  }

  Buffer alloc(std::size_t n) const { return Buffer(n); }
  HostBuffer alloc_host(std::size_t n) const { return Buffer(n); }
  Stream make_stream() const { return {}; }
  Stream make_comm_stream() const { return {}; }
  Event make_event() const { return {}; }
  static HostStream external_stream(void*) noexcept { return {}; }

  void record(Event&, HostStream) const noexcept {}
  void wait(HostStream, const Event&) const noexcept {}
  bool ready(const Event&) const noexcept { return true; }

  void copy(void* dst, const void* src, std::size_t n, HostStream) const noexcept {
    if (n) std::memcpy(dst, src, n);
  }
  void copy_to_host(void* dst, const void* src, std::size_t n, HostStream s) const noexcept {
    copy(dst, src, n, s);
  }
  void copy_from_host(void* dst, const void* src, std::size_t n, HostStream s) const noexcept {
    copy(dst, src, n, s);
  }
  void copy_batch(void* const* dst, const void* const* src, const std::size_t* n, std::size_t count,
                  HostStream s) const noexcept {
    for (std::size_t i = 0; i < count; ++i) copy(dst[i], src[i], n[i], s);
  }
  //! sums[0..nsums) <- the chunk digests (detail/digest.hpp) of the `count` pieces, each into
  //! sums[piece.sum], computed here.
  void digest(const detail::DigestSpan* spans, std::size_t count, std::uint64_t* sums,
              std::size_t nsums, HostStream) const noexcept {
    detail::digest_sums(spans, count, sums, nsums);
  }

 private:
  static std::atomic<std::size_t>& allocation_counter() noexcept {
    static std::atomic<std::size_t> n{0};
    return n;
  }
};

template <>
struct device_policy_for<HostStream> {
  using type = HostPolicy;
};

}  // namespace weightsync
