// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Transfers through CUDA IPC: the consumer maps the producer's memory and pulls the bytes with
//! copy engines (cudaMemcpyAsync), so neither side launches NCCL kernels.
//!
//! - `ipc`: colocated. Trainer and server are different processes on the same GPU; a pull is a
//!   device-local copy.
//! - `p2p`: one node, another GPU. The pull goes over NVLink (or PCIe) on the consumer's copy
//!   engines; the producer's SMs and copy engines stay idle.
//!
//! What is exported: whole allocations, never single tensors. The producer finds the allocation
//! behind every source tensor (cuMemGetAddressRange), exports each allocation once
//! (cudaIpcGetMemHandle, cached by the driver's buffer id) and sends a plan: the allocations, and
//! for every tensor its allocation and offset. The consumer opens each allocation once and keeps
//! the mapping between transfers; a mapping that a plan no longer names (the producer freed or
//! replaced that memory) is closed at once, and every mapping is closed exactly once, at the
//! latest when the transport is destroyed (the failure to avoid is vLLM's packed-IPC leak #51258).
//!
//! Memory that cannot be exported (cudaMallocAsync pools, VMM without a shareable handle, host
//! memory) is staged: copied into a ring of K slots of one exported allocation, chunk by chunk with
//! the strict-greater rule over B, each slot reused only after every consumer said it is done
//! with it. Of TransferOptions, buffer_size_bytes and num_buffers shape the staging only; packed,
//! protocol and direct_threshold_bytes do not apply (every tensor is pulled from where it is, or
//! staged).
//!
//! Control messages (the plan, slot hand-offs, the final status) go over a HostCommunicator (TCP)
//! with its deadlines and peer-death detection; every wait, device or host, is bounded by
//! TransferOptions::timeout. The consumer checks every placement of a plan against what it mapped
//! before reading anything. A wrong item on the producer, a failing load_weights or a metadata
//! mismatch on a consumer is reported to every rank that must know and leaves the transport usable;
//! any other failure aborts it, so that no peer waits for a step that will not come.

#include <cuda.h>
#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "weightsync/chunk_plan.hpp"
#include "weightsync/concepts.hpp"
#include "weightsync/cuda/check.hpp"
#include "weightsync/cuda/device_buffer.hpp"
#include "weightsync/cuda/device_policy.hpp"
#include "weightsync/cuda/event.hpp"
#include "weightsync/cuda/stream.hpp"
#include "weightsync/detail/format.hpp"
#include "weightsync/detail/wire.hpp"
#include "weightsync/error.hpp"
#include "weightsync/host/communicator.hpp"
#include "weightsync/log.hpp"
#include "weightsync/packed_broadcast.hpp"
#include "weightsync/tensor_meta.hpp"

namespace weightsync {

//! Settings of an IPC transport.
struct IpcOptions {
  //! true: `ipc`, producer and consumers must share one GPU. false: `p2p`, one node, any GPU the
  //! consumer can reach (peer access).
  bool same_gpu = true;
  //! Copy-engine streams on the consumer; large pulls are split over them so several engines work.
  int copy_streams = 2;
  //! Pulls are cut into pieces of at most this many bytes, spread over the copy streams. Larger
  //! pieces cost less per byte (copy_engine_probe, 2x H200: 371 / 391 / 396 GB/s at 64M / 256M /
  //! 1G).
  std::size_t piece_bytes = std::size_t{1} << 30;
  //! Pieces smaller than this go through one launch of the batched copy kernel instead of one
  //! copy-engine operation each (hundreds of small tensors); 0: copy engines only, no SM used.
  std::size_t kernel_below_bytes = std::size_t{256} << 10;
  //! false: stage every tensor through the slots (for tests and comparison).
  bool export_sources = true;
};

//! What an IPC transport did with handles (for leak checks).
struct IpcStats {
  std::uint64_t exported = 0;  //!< producer: allocations exported (once each)
  std::uint64_t opened = 0;    //!< consumer: cudaIpcOpenMemHandle calls
  std::uint64_t closed = 0;    //!< consumer: cudaIpcCloseMemHandle calls
  std::size_t mapped = 0;      //!< consumer: mappings held now
  std::size_t regions = 0;     //!< last transfer: allocations named by the plan
  std::size_t staged = 0;      //!< last transfer: tensors that went through the slots
  //! Consumer, last transfer, host microseconds: waiting for the plan, mapping and checking it,
  //! enqueueing the pulls, waiting for them, exchanging the final status; and the device time of
  //! the pulls from the producer's own memory (between events on the consumer's stream).
  double plan_us = 0, prepare_us = 0, enqueue_us = 0, wait_us = 0, status_us = 0,
         pull_device_us = 0;
};

namespace detail {

inline constexpr std::uint32_t kIpcPlanMagic = 0x50495357u;  // "WSIP"
inline constexpr std::size_t kIpcHandleBytes = sizeof(cudaIpcMemHandle_t);
static_assert(kIpcHandleBytes == 64);

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

//! Where a process runs: the node (boot id and host name) and the GPU (UUID).
struct Placement {
  std::string boot_id;
  std::string host;
  std::array<char, 16> uuid{};
  std::int32_t pid = 0;

  static Placement here(int device) {
    Placement p;
    std::ifstream f("/proc/sys/kernel/random/boot_id");
    std::getline(f, p.boot_id);
    char h[256] = {};
    if (::gethostname(h, sizeof h - 1) == 0) p.host = h;
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
    std::memcpy(p.uuid.data(), prop.uuid.bytes, 16);
    p.pid = static_cast<std::int32_t>(::getpid());
    return p;
  }
  static std::string uuid_string(const std::array<char, 16>& u) {
    static const char* hex = "0123456789abcdef";
    std::string s = "GPU-";
    for (int i = 0; i < 16; ++i) {
      if (i == 4 || i == 6 || i == 8 || i == 10) s += '-';
      const auto b = static_cast<unsigned char>(u[static_cast<std::size_t>(i)]);
      s += hex[b >> 4];
      s += hex[b & 15];
    }
    return s;
  }
};

//! The local CUDA device with this UUID, or -1.
inline int device_with_uuid(const std::array<char, 16>& uuid) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return -1;
  for (int d = 0; d < n; ++d) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, d) != cudaSuccess) continue;
    if (std::memcmp(prop.uuid.bytes, uuid.data(), 16) == 0) return d;
  }
  return -1;
}

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

enum class IpcWhere : std::uint8_t { empty = 0, region = 1, staged = 2 };
enum class IpcStatus : std::uint8_t { ok = 0, protocol = 1, failed = 2 };

//! The plan the producer sends before every transfer.
struct IpcPlan {
  std::uint8_t same_gpu = 1;
  std::string boot_id, host;
  std::array<char, 16> uuid{};
  std::int32_t pid = 0;
  std::uint64_t digest = 0, num_tensors = 0, total_bytes = 0;
  std::string error;  //!< the producer's items were wrong: nothing else follows
  struct Region {
    std::uint64_t buffer_id = 0;
    std::string handle;  // kIpcHandleBytes
    std::uint64_t size = 0;
  };
  std::vector<Region> regions;
  std::uint64_t slot_region = ~0ull;  //!< index into regions of the slot ring, or ~0
  std::uint64_t slot_stride = 0;
  std::uint32_t num_slots = 0;
  std::uint64_t num_chunks = 0;
  struct Place {
    IpcWhere where = IpcWhere::empty;
    std::uint64_t index = 0;   //!< region index, or chunk index when staged
    std::uint64_t offset = 0;  //!< within the region, or within the chunk's slot
  };
  std::vector<Place> places;

  std::string encode() const {
    Writer w;
    w.u32(kIpcPlanMagic);
    w.u16(kProtocolVersion);
    w.u8(same_gpu);
    w.str(boot_id);
    w.str(host);
    w.str(std::string_view(uuid.data(), uuid.size()));
    w.i32(pid);
    w.u64(digest);
    w.u64(num_tensors);
    w.u64(total_bytes);
    w.str(error);
    w.u64(regions.size());
    for (const auto& r : regions) {
      w.u64(r.buffer_id);
      w.str(r.handle);
      w.u64(r.size);
    }
    w.u64(slot_region);
    w.u64(slot_stride);
    w.u32(num_slots);
    w.u64(num_chunks);
    w.u64(places.size());
    for (const auto& p : places) {
      w.u8(static_cast<std::uint8_t>(p.where));
      w.u64(p.index);
      w.u64(p.offset);
    }
    return w.bytes();
  }

  static IpcPlan decode(std::string_view data) {
    Reader r(data, 0, "ipc plan");
    IpcPlan p;
    if (r.u32() != kIpcPlanMagic)
      throw protocol_error(0, "ipc plan: wrong magic (not an IPC producer?)");
    if (const auto v = r.u16(); v != kProtocolVersion)
      throw protocol_error(
          0, cat("ipc plan: protocol version ", v, ", this side speaks ", kProtocolVersion));
    p.same_gpu = r.u8();
    p.boot_id = r.str(256);
    p.host = r.str(256);
    const std::string u = r.str(16);
    if (u.size() != 16) throw protocol_error(0, "ipc plan: bad GPU UUID");
    std::memcpy(p.uuid.data(), u.data(), 16);
    p.pid = r.i32();
    p.digest = r.u64();
    p.num_tensors = r.u64();
    p.total_bytes = r.u64();
    p.error = r.str(1 << 16);
    const auto nr = r.u64();
    // Each region takes at least 84 bytes on the wire, each placement 17: a count the message
    // cannot hold is refused before anything is allocated for it.
    if (nr > (1u << 20) || nr > r.remaining() / 84)
      throw protocol_error(
          0, cat("ipc plan: ", nr, " regions announced in ", r.remaining(), " bytes"));
    p.regions.resize(nr);
    for (auto& reg : p.regions) {
      reg.buffer_id = r.u64();
      reg.handle = r.str(kIpcHandleBytes);
      if (reg.handle.size() != kIpcHandleBytes) throw protocol_error(0, "ipc plan: bad handle");
      reg.size = r.u64();
    }
    p.slot_region = r.u64();
    p.slot_stride = r.u64();
    p.num_slots = r.u32();
    p.num_chunks = r.u64();
    const auto np = r.u64();
    if (np > (1u << 26) || np > r.remaining() / 17)
      throw protocol_error(
          0, cat("ipc plan: ", np, " placements announced in ", r.remaining(), " bytes"));
    p.places.resize(np);
    for (auto& pl : p.places) {
      pl.where = static_cast<IpcWhere>(r.u8());
      pl.index = r.u64();
      pl.offset = r.u64();
    }
    r.expect_done();
    return p;
  }
};

//! The handshake's placement rule, on a consumer that runs at `here` on CUDA device `device`: both
//! sides use the same backend; one node (boot id and host name); `ipc`: one GPU; `p2p`: the
//! producer's GPU is visible here and reachable by peer access. @throws protocol_error saying
//! which.
inline void check_placement(const IpcPlan& plan, const Placement& here, bool same_gpu, int device) {
  const char* name = same_gpu ? "ipc" : "p2p";
  if (plan.same_gpu != (same_gpu ? 1 : 0))
    throw protocol_error(0, cat("ipc handshake: the producer uses the ",
                                plan.same_gpu ? "ipc" : "p2p", " backend, this consumer ", name));
  if (plan.boot_id != here.boot_id || plan.host != here.host)
    throw protocol_error(0, cat(name, " handshake: the producer runs on another node (", plan.host,
                                ", boot ", plan.boot_id, "; here ", here.host, ", boot ",
                                here.boot_id, "): CUDA IPC needs one node; use the nccl backend"));
  if (plan.uuid == here.uuid) return;
  if (same_gpu)
    throw protocol_error(
        0, cat("ipc handshake: the producer is on ", Placement::uuid_string(plan.uuid),
               ", this consumer on ", Placement::uuid_string(here.uuid),
               ": the ipc backend needs one GPU; use p2p (or nccl) across GPUs"));
  const int d = device_with_uuid(plan.uuid);
  if (d < 0)
    throw protocol_error(
        0, cat("p2p handshake: the producer's GPU ", Placement::uuid_string(plan.uuid),
               " is not visible to this process (CUDA_VISIBLE_DEVICES?)"));
  int can = 0;
  check(cudaDeviceCanAccessPeer(&can, device, d), "cudaDeviceCanAccessPeer");
  if (!can)
    throw protocol_error(0, cat("p2p handshake: GPU ", device, " cannot access the producer's GPU ",
                                d, " (no peer access); use the nccl backend"));
}

//! What an exception says (for status messages to peers).
inline std::string what_of(const std::exception_ptr& p) {
  try {
    std::rethrow_exception(p);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

//! Aborts the control channel when the scope is left by an exception (so that no peer waits for a
//! step this side will never take), unless disarmed for an orderly failure.
class AbortOnThrow {
 public:
  AbortOnThrow(HostCommunicator& c, const char* what)
      : c_(c), what_(what), uncaught_(std::uncaught_exceptions()) {}
  AbortOnThrow(const AbortOnThrow&) = delete;
  AbortOnThrow& operator=(const AbortOnThrow&) = delete;
  ~AbortOnThrow() {
    if (armed_ && std::uncaught_exceptions() > uncaught_) c_.abort(what_);
  }
  void disarm() noexcept { armed_ = false; }

 private:
  HostCommunicator& c_;
  const char* what_;
  int uncaught_;
  bool armed_ = true;
};

//! The size of the allocation a (possibly IPC-mapped) device pointer starts, if the driver says.
inline std::optional<std::size_t> mapped_size(const void* p) {
  CUdeviceptr base = 0;
  std::size_t size = 0;
  if (DriverApi::get().get_address_range(&base, &size, reinterpret_cast<CUdeviceptr>(p)) !=
      CUDA_SUCCESS)
    return std::nullopt;
  return size - static_cast<std::size_t>(reinterpret_cast<CUdeviceptr>(p) - base);
}

//! One copy of a pull or a staging.
struct CopyPiece {
  std::byte* dst;
  const std::byte* src;
  std::size_t bytes;
};

//! Appends a copy, merging it into the previous one when both ends continue it.
inline void add_piece(std::vector<CopyPiece>& v, std::byte* dst, const std::byte* src,
                      std::size_t n) {
  if (n == 0) return;
  if (!v.empty()) {
    auto& b = v.back();
    if (b.dst + b.bytes == dst && b.src + b.bytes == src) {
      b.bytes += n;
      return;
    }
  }
  v.push_back({dst, src, n});
}

}  // namespace detail

//! One end of an IPC transfer group: rank 0 produces, ranks 1.. consume. Move-only; owns its
//! control connections, streams, slots and mappings.
class IpcTransport {
 public:
  //! Joins the group (the rendezvous of HostCommunicator) on CUDA device `device` (-1: current).
  IpcTransport(const RendezvousOptions& rv, int device, IpcOptions opt,
               std::chrono::milliseconds op_timeout)
      : opt_(opt),
        device_(device >= 0 ? device : detail::current_device()),
        stream_(device_),
        start_(device_),
        sync_(device_),
        pull_begin_(device_),
        pull_end_(device_) {
    if (opt_.copy_streams < 1 || opt_.copy_streams > 16)
      throw config_error("copy_streams", detail::cat("must be in 1..16, got ", opt_.copy_streams));
    if (opt_.piece_bytes == 0) throw config_error("piece_bytes", "must be > 0");
    detail::DriverApi::get();  // fail early when the driver lacks what we need
    here_ = detail::Placement::here(device_);
    ctrl_ = HostCommunicator::connect(rv, op_timeout);
    detail::CurrentDeviceGuard g(device_);
    for (int i = 0; i < opt_.copy_streams; ++i) {
      copy_streams_.emplace_back(device_);
      copy_done_.emplace_back(device_);
    }
    for (int k = 0; k < kMaxPackedNumBuffers; ++k) slot_done_.emplace_back(device_);
    policy_.emplace(device_);
  }
  IpcTransport(IpcTransport&&) noexcept = default;
  //! Not assignable: replacing a transport must drain its streams first (destroy it, then make
  //! one).
  IpcTransport& operator=(IpcTransport&&) = delete;
  ~IpcTransport() {
    if (stream_.get()) (void)cudaStreamSynchronize(stream_.get());
    for (auto& s : copy_streams_)
      if (s.get()) (void)cudaStreamSynchronize(s.get());
    close_mappings();
  }
  //! Closes every mapping (each exactly once). Also done by the destructor.
  void close_mappings() noexcept {
    stats_.closed += mappings_.size();
    mappings_.clear();
    stats_.mapped = 0;
  }

  int rank() const noexcept { return ctrl_.rank(); }
  int size() const noexcept { return ctrl_.size(); }
  int device() const noexcept { return device_; }
  bool healthy() const noexcept { return !ctrl_.aborted(); }
  void check() { ctrl_.check(); }
  void abort(const std::string& why) noexcept { ctrl_.abort(why); }
  const IpcStats& stats() const noexcept { return stats_; }
  //! The settings; may be changed between transfers (same_gpu only before the first).
  IpcOptions& options() noexcept { return opt_; }
  HostCommunicator& control() noexcept { return ctrl_; }

  //! Rank 0: offers `metas.size()` tensors from `items` (device memory of this process, in the
  //! declared order) to every consumer, and returns once every consumer has pulled them. The
  //! bytes must stay unchanged until then. Every wait is bounded by opt.timeout, consumers'
  //! load_weights included. Same errors as packed_broadcast_producer: a wrong item is a
  //! config_error here and a remote_error on every consumer, and the transport stays usable; a
  //! consumer's failure is a remote_error (protocol_error for a mismatch) naming its rank; any
  //! other failure aborts the transport so that no peer waits for us.
  template <TensorIterator R>
  TransferStats send(std::span<const TensorMeta> metas, R&& items, const TransferOptions& opt) {
    using namespace detail;
    opt.validate();
    if (rank() != 0)
      throw config_error("root", cat("the producer must be rank 0, this is rank ", rank()));
    ready();
    CurrentDeviceGuard g(device_);
    ctrl_.set_timeout(opt.timeout);
    AbortOnThrow abort_on_throw(ctrl_, "ipc producer failed");
    IpcPlan plan;
    region_base_.clear();
    found_hint_ = 0;
    plan.same_gpu = opt_.same_gpu ? 1 : 0;
    plan.boot_id = here_.boot_id;
    plan.host = here_.host;
    plan.uuid = here_.uuid;
    plan.pid = here_.pid;
    plan.digest = metadata_digest(metas);
    plan.num_tensors = metas.size();
    std::vector<const std::byte*> src(metas.size(), nullptr);
    std::exception_ptr failure;  // the items were wrong: said in the plan, rethrown at the end
    try {
      std::size_t i = 0;
      for (auto&& item : items) {
        if (i == metas.size())
          throw config_error("items", cat("the iterator yields more than the ", metas.size(),
                                          " declared tensors"));
        const TensorMeta& got = item.meta();
        if (!(got.name == metas[i].name && got.dtype == metas[i].dtype &&
              got.shape == metas[i].shape))
          throw config_error("items", describe_item_mismatch(metas[i], got, i));
        src[i] = static_cast<const std::byte*>(item.data());
        if (src[i] == nullptr && metas[i].nbytes() > 0)
          throw config_error("items", cat("item ", i, " ('", metas[i].name, "') has no data"));
        plan.total_bytes += metas[i].nbytes();
        ++i;
      }
      if (i != metas.size())
        throw config_error("items", cat("the iterator ended after ", i, " tensors; ", metas.size(),
                                        " were declared"));
    } catch (...) {
      failure = std::current_exception();
      plan.error = what_of(failure).substr(0, 4000);  // the consumers' decoder takes 64 KiB at most
    }
    // The producer's earlier work on the weights must be complete before a consumer reads them.
    if (opt.source_stream)
      await_stream(static_cast<cudaStream_t>(opt.source_stream), opt, "ipc source stream");

    std::vector<TensorMeta> staged_metas;
    std::vector<std::size_t> staged_index;
    if (!failure) {
      plan.places.resize(metas.size());
      std::map<std::uint64_t, std::size_t> region_of;  // buffer id -> plan region
      for (std::size_t i = 0; i < metas.size(); ++i) {
        const std::size_t nb = metas[i].nbytes();
        if (nb == 0) continue;
        std::optional<std::size_t> r;
        if (opt_.export_sources) r = export_region(src[i], nb, plan, region_of);
        if (r) {
          plan.places[i].where = IpcWhere::region;
          plan.places[i].index = *r;
          plan.places[i].offset = static_cast<std::uint64_t>(src[i] - region_base_[*r]);
        } else {
          plan.places[i].where = IpcWhere::staged;
          staged_metas.push_back(metas[i]);
          staged_index.push_back(i);
        }
      }
    }
    // Staged tensors: chunks of the strict-greater rule over B, K slots of the largest chunk.
    const auto chunks = chunk_plan(staged_metas, opt.buffer_size_bytes);
    const auto K = static_cast<std::size_t>(opt.num_buffers);
    std::size_t stride = 0;
    for (const auto& c : chunks) stride = std::max(stride, (c.bytes + 255) / 256 * 256);
    if (!chunks.empty()) {
      if (slots_.size() < stride * K) {
        // Whole 2 MiB pages: copy engines pull a mapping of another size about a quarter slower.
        const std::size_t page = std::size_t{2} << 20;
        slots_ = DeviceBuffer();
        slots_ = DeviceBuffer((stride * K + page - 1) / page * page, device_);
      }
      std::map<std::uint64_t, std::size_t> none;
      const auto r = export_region(slots_.data(), slots_.size(), plan, none);
      if (!r)
        throw error("[weightsync.ipc] the slot ring cannot be exported (cudaIpcGetMemHandle)");
      plan.slot_region = *r;
      plan.slot_stride = stride;
      plan.num_slots = static_cast<std::uint32_t>(K);
      plan.num_chunks = chunks.size();
      for (std::size_t c = 0; c < chunks.size(); ++c) {
        std::size_t off = 0;
        for (std::size_t j = chunks[c].begin; j < chunks[c].end; ++j) {
          auto& pl = plan.places[staged_index[j]];
          pl.index = c;
          pl.offset = off;
          off += staged_metas[j].nbytes();
        }
      }
    }
    stats_.regions = plan.regions.size();
    stats_.staged = staged_metas.size();
    // Handles of allocations this plan does not name (freed or replaced memory) are dropped.
    for (auto it = exported_.begin(); it != exported_.end();) {
      const bool named =
          std::any_of(plan.regions.begin(), plan.regions.end(),
                      [&](const IpcPlan::Region& r) { return r.buffer_id == it->first; });
      it = named ? std::next(it) : exported_.erase(it);
    }

    bcast_blob_root(plan.encode(), opt);
    if (!failure) {
      for (std::size_t c = 0; c < chunks.size(); ++c) {
        if (c >= K) gather_acks(opt);  // slot c % K is free again
        std::vector<CopyPiece> pieces;
        std::byte* slot = slots_.data() + (c % K) * stride;
        std::size_t off = 0;
        for (std::size_t j = chunks[c].begin; j < chunks[c].end; ++j) {
          const std::size_t nb = staged_metas[j].nbytes();
          add_piece(pieces, slot + off, src[staged_index[j]], nb);
          off += nb;
        }
        for (const auto& p : pieces)
          detail::check(cudaMemcpyAsync(p.dst, p.src, p.bytes, cudaMemcpyDefault, stream_.get()),
                        "cudaMemcpyAsync(stage)");
        await_stream(stream_.get(), opt, "ipc staging");
        std::uint64_t notice = c;
        ctrl_.broadcast(&notice, sizeof notice, 0);
      }
      for (std::size_t c = chunks.size() >= K ? chunks.size() - K : 0; c < chunks.size(); ++c)
        gather_acks(opt);
    }
    const auto statuses = gather_status(IpcStatus::ok, "", opt);
    abort_on_throw.disarm();  // in step with every consumer: what follows leaves the channel usable
    if (failure) std::rethrow_exception(failure);
    raise_first(statuses);
    TransferStats st;
    st.tensors = metas.size();
    st.chunks = chunks.size();
    st.bytes = plan.total_bytes;
    st.slot_bytes = chunks.empty() ? 0 : stride;
    st.ring_bytes = slots_.size();
    return st;
  }

  //! Rank >= 1: pulls the tensors of the producer's plan. Tensors with opt.destination are copied
  //! there; the others are handed to `load` as views into the producer's memory (a zero-size
  //! tensor's view has a null data pointer; views are valid during the call; whatever `load`
  //! enqueues on the stream it gets must complete before this returns, which it waits for). Every
  //! wait is bounded by opt.timeout. If `load` throws, the consumer keeps the hand-offs in step
  //! without loading more, waits for what it enqueued, reports the failure to the producer and
  //! rethrows it. Same errors as packed_broadcast_consumer.
  TransferStats receive(
      std::span<const TensorMeta> metas, const TransferOptions& opt,
      const std::function<void(std::span<const TensorView>, cudaStream_t)>& load) {
    using namespace detail;
    opt.validate();
    if (rank() == 0)
      throw config_error("root", "the consumer must not run on rank 0 (the producer)");
    ready();
    CurrentDeviceGuard g(device_);
    ctrl_.set_timeout(opt.timeout);
    AbortOnThrow abort_on_throw(ctrl_, "ipc consumer failed");
    using Clock = std::chrono::steady_clock;
    auto us = [](Clock::time_point a, Clock::time_point b) {
      return std::chrono::duration<double, std::micro>(b - a).count();
    };
    const auto t0 = Clock::now();
    // An unreadable plan leaves us unable to follow the hand-offs: the guard aborts the transport.
    IpcPlan plan = IpcPlan::decode(bcast_blob_peer(opt));
    const auto t1 = Clock::now();
    IpcStatus status = IpcStatus::ok;
    std::string why;
    std::exception_ptr local_failure;
    auto fail = [&](IpcStatus s) {
      if (status != IpcStatus::ok) return;
      status = s;
      local_failure = std::current_exception();
      why = what_of(local_failure);
    };
    std::vector<std::byte*> base(plan.regions.size(), nullptr);
    try {
      if (!plan.error.empty()) throw remote_error(0, plan.error);
      check_placement(plan);
      if (plan.digest != metadata_digest(metas) || plan.num_tensors != metas.size())
        throw protocol_error(
            0, cat("ipc handshake: the producer's tensors (", plan.num_tensors, ", digest ",
                   plan.digest, ") differ from this consumer's (", metas.size(), ", digest ",
                   metadata_digest(metas), "): names, dtypes or shapes do not match"));
      std::size_t total = 0;
      for (const auto& m : metas) total += m.nbytes();
      if (total != plan.total_bytes)
        throw protocol_error(
            0, cat("ipc handshake: ", plan.total_bytes, " bytes offered, ", total, " expected"));
      map_regions(plan, base);
      validate_places(plan, metas);
    } catch (const remote_error&) {
      fail(IpcStatus::failed);
    } catch (const protocol_error&) {
      fail(IpcStatus::protocol);
    } catch (...) {
      fail(IpcStatus::failed);
    }

    // Pull what sits in the producer's own memory.
    const auto t2 = Clock::now();
    if (status == IpcStatus::ok) {
      try {
        pull_begin_.record(stream_.get());
        pull(metas, plan, base, opt, load, IpcWhere::region, 0);
        pull_end_.record(stream_.get());
      } catch (...) {
        fail(IpcStatus::failed);
      }
    }
    // Then the staged chunks, slot by slot, mirroring the producer's hand-offs. A slot is handed
    // back only once nothing reads it any more: its pulls done, or (after a failure) everything
    // this side enqueued drained.
    const auto K = static_cast<std::size_t>(std::max<std::uint32_t>(plan.num_slots, 1));
    auto ack = [&](std::size_t c) {
      if (status == IpcStatus::ok)
        await_event(slot_done_[c % K], opt, "ipc slot pull");
      else
        drain(opt);
      for (int r = 1; r < size(); ++r) {
        std::uint8_t a = 0;
        ctrl_.broadcast(&a, 1, r);
      }
    };
    if (plan.error.empty() && plan.num_chunks > 0) {
      for (std::size_t c = 0; c < plan.num_chunks; ++c) {
        if (c >= K) ack(c - K);
        std::uint64_t notice = 0;
        ctrl_.broadcast(&notice, sizeof notice, 0);
        if (notice != c)
          throw protocol_error(
              0, cat("ipc hand-off: chunk ", notice, " announced where ", c, " was due"));
        if (status != IpcStatus::ok) continue;
        try {
          pull(metas, plan, base, opt, load, IpcWhere::staged, c);
          slot_done_[c % K].record(stream_.get());
        } catch (...) {
          fail(IpcStatus::failed);
        }
      }
      for (std::size_t c = plan.num_chunks >= K ? plan.num_chunks - K : 0; c < plan.num_chunks; ++c)
        ack(c);
    }
    const auto t3 = Clock::now();
    if (status == IpcStatus::ok)
      finish_pulls(opt);
    else
      drain(opt);  // nothing of ours may still run when the caller gets the error
    const auto t4 = Clock::now();
    gather_status(status, why, opt);
    const auto t5 = Clock::now();
    abort_on_throw.disarm();  // in step with the producer: what follows leaves the channel usable
    stats_.plan_us = us(t0, t1);
    stats_.prepare_us = us(t1, t2);
    stats_.enqueue_us = us(t2, t3);
    stats_.wait_us = us(t3, t4);
    stats_.status_us = us(t4, t5);
    stats_.pull_device_us =
        status == IpcStatus::ok ? TimedEvent::elapsed(pull_begin_, pull_end_).count() : 0.0;
    // Mappings the plan no longer names: the producer freed or replaced that memory.
    if (plan.error.empty()) prune_mappings(plan);
    // Only the producer's failure (in the plan) and our own are ours to throw; another consumer's
    // failure is the producer's business.
    if (local_failure) std::rethrow_exception(local_failure);
    TransferStats st;
    st.tensors = metas.size();
    st.chunks = plan.num_chunks;
    st.bytes = plan.total_bytes;
    st.slot_bytes = plan.slot_stride;
    return st;
  }

 private:
  void ready() const {
    if (ctrl_.aborted())
      throw state_error(
          "ipc transport: aborted by an earlier error; create a new one (init again)");
  }

  //! Runs a control-plane step; on a transport failure aborts (so that peers fail fast too).
  template <class F>
  void guarded(F&& f) {
    try {
      f();
    } catch (const error& e) {
      ctrl_.abort(e.what());
      throw;
    }
  }

  // Control blobs: a 512-byte first packet holds the length and the start of the payload.
  static constexpr std::size_t kFirst = 512;
  void bcast_blob_root(const std::string& s, const TransferOptions&) {
    std::string first(kFirst, '\0');
    const std::uint64_t n = s.size();
    std::memcpy(first.data(), &n, 8);
    std::memcpy(first.data() + 8, s.data(), std::min(s.size(), kFirst - 8));
    ctrl_.broadcast(first.data(), kFirst, 0);
    if (s.size() > kFirst - 8) {
      std::string rest = s.substr(kFirst - 8);
      ctrl_.broadcast(rest.data(), rest.size(), 0);
    }
  }
  std::string bcast_blob_peer(const TransferOptions&) {
    std::string first(kFirst, '\0');
    ctrl_.broadcast(first.data(), kFirst, 0);
    std::uint64_t n = 0;
    std::memcpy(&n, first.data(), 8);
    if (n > (std::uint64_t{1} << 30))
      throw protocol_error(
          0, detail::cat("ipc plan of ", n, " bytes announced (not an IPC producer?)"));
    std::string s(static_cast<std::size_t>(n), '\0');
    std::memcpy(s.data(), first.data() + 8, std::min<std::size_t>(s.size(), kFirst - 8));
    if (s.size() > kFirst - 8) ctrl_.broadcast(s.data() + (kFirst - 8), s.size() - (kFirst - 8), 0);
    return s;
  }

  //! Every consumer's status (ok, or what failed); the producer passes ok.
  std::vector<std::pair<detail::IpcStatus, std::string>> gather_status(detail::IpcStatus mine,
                                                                       const std::string& why,
                                                                       const TransferOptions&) {
    std::vector<std::pair<detail::IpcStatus, std::string>> out(static_cast<std::size_t>(size()));
    guarded([&] {
      for (int r = 1; r < size(); ++r) {
        char buf[256] = {};
        if (r == rank()) {
          buf[0] = static_cast<char>(mine);
          std::memcpy(buf + 1, why.data(), std::min<std::size_t>(why.size(), sizeof buf - 2));
        }
        ctrl_.broadcast(buf, sizeof buf, r);
        out[static_cast<std::size_t>(r)] = {static_cast<detail::IpcStatus>(buf[0]),
                                            std::string(buf + 1, strnlen(buf + 1, sizeof buf - 1))};
      }
    });
    return out;
  }
  void gather_acks(const TransferOptions&) {
    guarded([&] {
      for (int r = 1; r < size(); ++r) {
        std::uint8_t a = 0;
        ctrl_.broadcast(&a, 1, r);
      }
    });
  }
  void raise_first(const std::vector<std::pair<detail::IpcStatus, std::string>>& s) const {
    for (int r = 1; r < size(); ++r) {
      const auto& [code, text] = s[static_cast<std::size_t>(r)];
      if (r == rank() || code == detail::IpcStatus::ok) continue;
      if (code == detail::IpcStatus::protocol) throw protocol_error(r, text);
      throw remote_error(r, text);
    }
  }

  //! The plan region of the allocation holding [p, p + n), exporting it once; nullopt when it
  //! cannot be exported.
  std::optional<std::size_t> export_region(const std::byte* p, std::size_t n, detail::IpcPlan& plan,
                                           std::map<std::uint64_t, std::size_t>& region_of) {
    // Within one transfer allocations cannot change (the bytes must stay valid): a tensor inside
    // an allocation already found needs no driver call. Most tensors are found here.
    if (!region_base_.empty()) {
      for (std::size_t r = found_hint_; r < found_hint_ + plan.regions.size(); ++r) {
        const std::size_t i = r % plan.regions.size();
        const std::byte* b = region_base_[i];
        if (p >= b && p + n <= b + plan.regions[i].size) {
          found_hint_ = i;
          return i;
        }
      }
    }
    const auto a = detail::find_allocation(p);
    if (!a) return std::nullopt;
    if (p + n > a->base + a->size) return std::nullopt;
    if (auto it = region_of.find(a->buffer_id); it != region_of.end()) return it->second;
    auto cached = exported_.find(a->buffer_id);
    if (cached == exported_.end()) {
      cudaIpcMemHandle_t h;
      if (cudaIpcGetMemHandle(&h, const_cast<std::byte*>(a->base)) != cudaSuccess) {
        (void)cudaGetLastError();
        return std::nullopt;
      }
      stats_.exported++;
      if (a->size % (std::size_t{2} << 20) != 0)
        log(LogLevel::warning,
            detail::cat(
                "ipc: exporting an allocation of ", a->size,
                " bytes, not whole 2 MiB pages: the "
                "driver may map it with small pages, and copy engines then read it about a "
                "quarter slower (allocate weights in multiples of 2 MiB, as PyTorch does)"));
      cached =
          exported_.emplace(a->buffer_id, std::string(reinterpret_cast<const char*>(&h), sizeof h))
              .first;
    }
    const std::size_t idx = plan.regions.size();
    plan.regions.push_back({a->buffer_id, cached->second, a->size});
    if (region_base_.size() <= idx) region_base_.resize(idx + 1);
    region_base_[idx] = a->base;
    region_of[a->buffer_id] = idx;
    found_hint_ = idx;
    return idx;
  }

  void check_placement(const detail::IpcPlan& plan) const {
    detail::check_placement(plan, here_, opt_.same_gpu, device_);
  }

  void map_regions(detail::IpcPlan& plan, std::vector<std::byte*>& base) {
    for (std::size_t r = 0; r < plan.regions.size(); ++r) {
      auto& reg = plan.regions[r];
      const auto key = std::make_pair(plan.pid, reg.buffer_id);
      auto it = mappings_.find(key);
      if (it == mappings_.end() || it->second.handle != reg.handle) {
        if (it != mappings_.end()) {
          mappings_.erase(it);
          stats_.closed++;
        }
        Mapped m;
        m.handle = reg.handle;
        m.map = detail::IpcMapping(reg.handle.data(), device_);
        stats_.opened++;
        // What the driver mapped bounds every read: a plan may not claim more.
        m.size = detail::mapped_size(m.map.data()).value_or(reg.size);
        it = mappings_.emplace(key, std::move(m)).first;
      }
      // No read may go past what was mapped, whatever the plan claims (validate_places checks
      // every tensor against this bound).
      reg.size = std::min<std::uint64_t>(reg.size, it->second.size);
      base[r] = it->second.map.data();
    }
    stats_.mapped = mappings_.size();
    stats_.regions = plan.regions.size();
  }

  void prune_mappings(const detail::IpcPlan& plan) {
    std::map<std::pair<std::int32_t, std::uint64_t>, bool> keep;
    for (const auto& reg : plan.regions) keep[{plan.pid, reg.buffer_id}] = true;
    for (auto it = mappings_.begin(); it != mappings_.end();) {
      if (keep.count(it->first)) {
        ++it;
        continue;
      }
      it = mappings_.erase(it);
      stats_.closed++;
    }
    stats_.mapped = mappings_.size();
  }

  void validate_places(const detail::IpcPlan& plan, std::span<const TensorMeta> metas) {
    using namespace detail;
    std::size_t staged = 0;
    if (plan.places.size() != metas.size())
      throw protocol_error(
          0, cat("ipc plan: ", plan.places.size(), " placements for ", metas.size(), " tensors"));
    if (plan.num_chunks > 0 && (plan.num_slots < 1 || plan.num_slots > kMaxPackedNumBuffers))
      throw protocol_error(0, cat("ipc plan: ", plan.num_slots, " slots"));
    for (std::size_t i = 0; i < metas.size(); ++i) {
      const auto& pl = plan.places[i];
      const std::size_t nb = metas[i].nbytes();
      bool ok = true;
      if (pl.where == IpcWhere::empty)
        ok = nb == 0;
      else if (pl.where == IpcWhere::region)  // written so that nothing can wrap around
        ok = pl.index < plan.regions.size() && pl.offset <= plan.regions[pl.index].size &&
             nb <= plan.regions[pl.index].size - pl.offset;
      else if (pl.where == IpcWhere::staged) {
        ok = plan.slot_region < plan.regions.size() && pl.index < plan.num_chunks &&
             plan.num_slots >= 1 &&
             plan.slot_stride <= plan.regions[plan.slot_region].size / plan.num_slots &&
             pl.offset <= plan.slot_stride && nb <= plan.slot_stride - pl.offset;
        ++staged;
      } else
        ok = false;
      if (!ok)
        throw protocol_error(0, cat("ipc plan: tensor ", i, " ('", metas[i].name,
                                    "') is placed outside the "
                                    "producer's memory"));
    }
    stats_.staged = staged;
  }

  //! Enqueues the copies (or load calls) of the tensors at `where` (chunk `chunk` when staged).
  void pull(std::span<const TensorMeta> metas, const detail::IpcPlan& plan,
            const std::vector<std::byte*>& base, const TransferOptions& opt,
            const std::function<void(std::span<const TensorView>, cudaStream_t)>& load,
            detail::IpcWhere where, std::size_t chunk) {
    using namespace detail;
    std::vector<CopyPiece> pieces;
    std::vector<TensorView> views;
    for (std::size_t i = 0; i < metas.size(); ++i) {
      const auto& pl = plan.places[i];
      if (pl.where == IpcWhere::empty && where == IpcWhere::region) {
        // Zero-size tensors: nothing to copy; without a destination the loader still sees them.
        if (!(opt.destination && opt.destination(metas[i])))
          views.push_back(TensorView{&metas[i], nullptr, 0});
        continue;
      }
      if (pl.where != where || (where == IpcWhere::staged && pl.index != chunk)) continue;
      const std::size_t nb = metas[i].nbytes();
      const std::byte* from =
          where == IpcWhere::region
              ? base[pl.index] + pl.offset
              : base[plan.slot_region] + (chunk % plan.num_slots) * plan.slot_stride + pl.offset;
      void* to = opt.destination ? opt.destination(metas[i]) : nullptr;
      if (to)
        add_piece(pieces, static_cast<std::byte*>(to), from, nb);
      else
        views.push_back(TensorView{&metas[i], const_cast<std::byte*>(from), nb});
    }
    // The copy streams start after whatever the main stream holds (earlier chunks, the caller's
    // order); small pieces go through one kernel launch, the rest over the copy engines.
    detail::check(cudaEventRecord(start_.get(), stream_.get()), "cudaEventRecord");
    std::vector<void*> kd;
    std::vector<const void*> ks;
    std::vector<std::size_t> kn;
    std::size_t next = 0;
    std::vector<char> used(copy_streams_.size(), 0);
    for (const auto& p : pieces) {
      if (p.bytes < opt_.kernel_below_bytes) {
        kd.push_back(p.dst);
        ks.push_back(p.src);
        kn.push_back(p.bytes);
        continue;
      }
      for (std::size_t off = 0; off < p.bytes; off += opt_.piece_bytes) {
        const std::size_t n = std::min(opt_.piece_bytes, p.bytes - off);
        auto& s = copy_streams_[next];
        if (!used[next])
          detail::check(cudaStreamWaitEvent(s.get(), start_.get(), 0), "cudaStreamWaitEvent");
        used[next] = 1;
        detail::check(
            cudaMemcpyAsync(p.dst + off, p.src + off, n, cudaMemcpyDeviceToDevice, s.get()),
            "cudaMemcpyAsync(pull)");
        next = (next + 1) % copy_streams_.size();
      }
    }
    if (kd.size() == 1)
      detail::check(cudaMemcpyAsync(kd[0], ks[0], kn[0], cudaMemcpyDeviceToDevice, stream_.get()),
                    "cudaMemcpyAsync(pull)");
    else if (!kd.empty())
      policy_->copy_batch(kd.data(), ks.data(), kn.data(), kd.size(), stream_.get());
    for (std::size_t k = 0; k < copy_streams_.size(); ++k) {
      if (!used[k]) continue;
      copy_done_[k].record(copy_streams_[k].get());
      detail::check(cudaStreamWaitEvent(stream_.get(), copy_done_[k].get(), 0),
                    "cudaStreamWaitEvent");
    }
    if (!views.empty()) load(std::span<const TensorView>(views), stream_.get());
  }

  //! Waits (bounded) for everything this side enqueued: the copy streams and the main stream, where
  //! load_weights enqueued its work. Used after a failure, before anything is reported.
  void drain(const TransferOptions& opt) {
    for (auto& cs : copy_streams_) await_stream(cs.get(), opt, "ipc drain");
    await_stream(stream_.get(), opt, "ipc drain");
  }

  void finish_pulls(const TransferOptions& opt) { await_stream(stream_.get(), opt, "ipc pull"); }

  //! Waits (bounded) for the work enqueued on `s` so far.
  void await_stream(cudaStream_t s, const TransferOptions& opt, const char* phase) {
    sync_.record(s);
    await_event(sync_, opt, phase);
  }

  //! Polls `e` within opt.timeout, watching the control channel; aborts on either failure.
  void await_event(const CudaEvent& e, const TransferOptions& opt, const char* phase) {
    using Clock = std::chrono::steady_clock;
    const auto deadline = Clock::now() + opt.timeout;
    const auto spin_until = Clock::now() + std::chrono::milliseconds(2);
    auto next_check = Clock::now();
    while (!e.ready()) {
      const auto now = Clock::now();
      if (now >= next_check) {
        guarded([&] { ctrl_.check(); });
        next_check = now + std::chrono::milliseconds(2);
      }
      if (now >= deadline) {
        const std::string what = detail::cat("device work not done within ", opt.timeout.count(),
                                             " ms (rank ", rank(), "); transport aborted");
        ctrl_.abort(std::string(phase) + ": " + what);
        throw timeout_error(phase, -1, what);
      }
      if (now < spin_until)
        std::this_thread::yield();
      else
        std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  struct Mapped {
    std::string handle;
    std::uint64_t size = 0;
    detail::IpcMapping map;
  };

  IpcOptions opt_;
  int device_ = -1;
  detail::Placement here_;
  HostCommunicator ctrl_;
  CudaStream stream_;
  std::vector<CudaStream> copy_streams_;
  std::vector<CudaEvent> copy_done_;
  std::vector<CudaEvent> slot_done_;
  CudaEvent start_;
  CudaEvent sync_;  // what await_stream waits on
  TimedEvent pull_begin_, pull_end_;
  std::optional<CudaPolicy> policy_;
  IpcStats stats_;
  // producer
  std::map<std::uint64_t, std::string> exported_;  // buffer id -> handle
  std::vector<const std::byte*> region_base_;      // per plan region: its base in this process
  std::size_t found_hint_ = 0;                     // the region the last tensor was found in
  DeviceBuffer slots_;
  // consumer: (producer pid, buffer id) -> mapping. Declared last: closed before the streams go.
  std::map<std::pair<std::int32_t, std::uint64_t>, Mapped> mappings_;
};

}  // namespace weightsync
