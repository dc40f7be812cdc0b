// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! NcclCommunicator: a Communicator (and GroupedCommunicator, MonitoredCommunicator) over NCCL.
//!
//! Initialization runs on a non-blocking communicator (ncclConfig_t.blocking = 0), so that it can
//! be bounded: calls that answer ncclInProgress are polled with ncclCommGetAsyncError against a
//! deadline, and on a timeout or a peer failure the communicator is aborted (ncclCommAbort) and the
//! call throws timeout_error or nccl_error instead of hanging. Launches are blocking by default
//! (NcclOptions::blocking: a blocking child is split off the bounded parent): they cost less, and a
//! LaunchWatchdog aborts the communicator when one is stuck inside NCCL past the deadline. After
//! initialization every rank runs the 1-element float32 sum all-reduce that vLLM's communicator
//! runs as warm-up, so that a vLLM worker can be the peer in unique-id mode.
//!
//! Created from the TCP rendezvous (connect(): rank 0 makes the ncclUniqueId and hands it out; the
//! rendezvous connections stay open as a control channel that reports a dead peer at once) or from
//! a shared unique id (init(): NcclInitInfo::nccl_unique_id_b64).

#include "weightsync/config.hpp"
#if !WEIGHTSYNC_HAS_NCCL
#error "<weightsync/nccl/communicator.hpp> needs NCCL (WEIGHTSYNC_HAS_NCCL=0)"
#endif

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <exception>
#include <memory>
#include <stop_token>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "weightsync/concepts.hpp"
#include "weightsync/cuda/check.hpp"
#include "weightsync/cuda/device_policy.hpp"
#include "weightsync/cuda/event.hpp"
#include "weightsync/detail/format.hpp"
#include "weightsync/error.hpp"
#include "weightsync/host/rendezvous.hpp"
#include "weightsync/log.hpp"
#include "weightsync/nccl/check.hpp"
#include "weightsync/nccl/unique_id.hpp"
#include "weightsync/nccl/watchdog.hpp"

namespace weightsync {

//! How an NcclCommunicator is created and bounded.
struct NcclOptions {
  int device = -1;  //!< CUDA device of this rank (-1: the current device)
  //! Bound on initialization, on every wait for an operation, and on a clean teardown.
  std::chrono::milliseconds timeout{std::chrono::seconds(120)};
  //! Run vLLM's warm-up (1-element float32 sum all-reduce) after initialization. Every rank must
  //! agree; vLLM workers always run it.
  bool vllm_warmup = true;
  //! true (default): blocking launches (lower launch latency, ~100 us less per launch); init is
  //! still bounded (it runs on a non-blocking communicator that is then split), and a launch that
  //! blocks inside NCCL (a peer vanishing while NCCL connects) is ended by a watchdog that aborts
  //! the communicator at the deadline. false: ncclConfig_t.blocking = 0, every launch polled.
  bool blocking = true;
  //! After init, one broadcast from every rank (grouped), so that the connections every later
  //! broadcast needs are set up inside init's deadline rather than inside a launch. Every rank
  //! must agree: a vLLM peer does not run it (the engines set it for Protocol::weightsync only).
  bool connect_all = false;
  //! A stop requested here ends the wait for ncclCommInitRankConfig at once (communicator
  //! aborted, state_error) instead of at `timeout` (EngineOptions::stop).
  std::stop_token stop;
};

class NcclCommunicator {
 public:
  using stream_type = cudaStream_t;
  using device_policy = CudaPolicy;
  //! Buffers may be pinned host memory (PinnedHostCommunicator): NCCL takes any pointer valid on
  //! the GPU, and cudaMallocHost memory is (unified addressing). The handshake's few KiB then
  //! need no copies to and from the device (run 91: 9-15 us less per 4 KiB sync).
  static constexpr bool broadcasts_pinned_host = true;

  //! Empty: no communicator. Only assignment and destruction are valid.
  NcclCommunicator() = default;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;
  NcclCommunicator(NcclCommunicator&& o) noexcept { swap(o); }
  NcclCommunicator& operator=(NcclCommunicator&& o) noexcept {
    NcclCommunicator tmp(std::move(o));
    swap(tmp);
    return *this;
  }
  //! Healthy: finalizes and destroys, bounded by the timeout (then aborts). Failed, aborted, or
  //! destroyed during unwinding: aborts, which never waits for the peers.
  ~NcclCommunicator() { destroy(); }

  //! Joins the group `id` as `rank` of `world` (every rank must call it, each with its own GPU).
  //! @throws timeout_error when the ranks do not all arrive in time; nccl_error.
  static NcclCommunicator init(const NcclUniqueId& id, int rank, int world,
                               const NcclOptions& o = {}, ControlChannel control = {}) {
    if (world < 1) throw config_error("world_size", detail::cat("must be >= 1, got ", world));
    if (rank < 0 || rank >= world)
      throw config_error("rank", detail::cat("must be in 0..", world - 1, ", got ", rank));
    NcclCommunicator c;
    c.rank_ = rank;
    c.size_ = world;
    c.timeout_ = o.timeout;
    c.device_ = o.device >= 0 ? o.device : detail::current_device();
    c.control_ = std::move(control);
    detail::CurrentDeviceGuard g(c.device_);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclUniqueId native = id.native();
    const auto r = ncclCommInitRankConfig(&c.comm_, world, native, rank, &config);
    if (r != ncclSuccess && r != ncclInProgress) {
      if (c.comm_) ncclCommAbort(c.comm_);
      c.comm_ = nullptr;
      throw nccl_error(r, "ncclCommInitRankConfig", rank);
    }
    c.wait_ready("ncclCommInitRankConfig", "init", o.stop);
    if (o.blocking) {
      // Split a blocking child off the bounded, non-blocking parent; the parent is then released.
      ncclConfig_t child_config = NCCL_CONFIG_INITIALIZER;
      child_config.blocking = 1;
      ncclComm_t child = nullptr;
      const auto sr = ncclCommSplit(c.comm_, 0, rank, &child, &child_config);
      if (sr != ncclSuccess && sr != ncclInProgress) c.fail(sr, "ncclCommSplit");
      c.wait_ready("ncclCommSplit", "init");
      c.parent_ = c.comm_;  // kept until teardown: destroying it now would be a collective
      c.comm_ = child;
      c.watchdog_ = std::make_unique<detail::LaunchWatchdog>(child);
    }
    if (o.vllm_warmup) c.warmup();
    if (o.connect_all) c.connect_all();
    return c;
  }

  //! TCP mode: meets the other ranks at rendezvous (rank 0 makes the unique id), then init().
  static NcclCommunicator connect(const RendezvousOptions& r, const NcclOptions& o = {}) {
    r.validate();
    std::string blob;
    if (r.rank == 0) {
      detail::CurrentDeviceGuard g(o.device);
      const auto id = NcclUniqueId::generate();
      blob.assign(reinterpret_cast<const char*>(id.bytes().data()), id.bytes().size());
    }
    auto rv = rendezvous(r, blob);
    if (rv.blobs[0].size() != kNcclUniqueIdBytes)
      throw protocol_error(0, detail::cat("rank 0's bootstrap blob has ", rv.blobs[0].size(),
                                          " bytes, not an ncclUniqueId"));
    std::array<std::byte, kNcclUniqueIdBytes> b{};
    std::memcpy(b.data(), rv.blobs[0].data(), b.size());
    return init(NcclUniqueId(b), r.rank, r.world_size, o, std::move(rv.control));
  }

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  int device() const noexcept { return device_; }
  ncclComm_t get() const noexcept { return comm_; }
  ncclComm_t native_handle() const noexcept { return comm_; }
  std::chrono::milliseconds timeout() const noexcept { return timeout_; }
  //! False once an error was seen or abort() was called.
  bool healthy() const noexcept { return comm_ != nullptr && !failed_; }
  //! The framed wire's state between transfers (WireStateCommunicator).
  WireState& wire_state() noexcept { return wire_; }

  //! In-place broadcast of `bytes` bytes from `root` (sendbuff == recvbuff), on `stream`. Inside a
  //! group it is issued at group_end (see there).
  void broadcast(void* buf, std::size_t bytes, int root, cudaStream_t stream) {
    usable("ncclBroadcast");
    if (root < 0 || root >= size_) fail(ncclInvalidArgument, "ncclBroadcast (root out of range)");
    if (group_depth_ > 0) {
      pending_.push_back({static_cast<char*>(buf), bytes, root, stream});
      return;
    }
    launch_broadcast(buf, bytes, root, stream);
  }

 private:
  void launch_broadcast(void* buf, std::size_t bytes, int root, cudaStream_t stream) {
    ncclResult_t r;
    {
      detail::LaunchWatchdog::Guard g(group_depth_ == 0 ? watchdog_.get() : nullptr, timeout_);
      r = ncclBroadcast(buf, buf, bytes, ncclUint8, root, comm_, stream);
    }
    enqueue(r, "ncclBroadcast");
  }

 public:
  void all_reduce(const void* send, void* recv, std::size_t count, ncclDataType_t type,
                  ncclRedOp_t op, cudaStream_t stream) {
    usable("ncclAllReduce");
    issue_pending();  // in the order issued
    ncclResult_t r;
    {
      detail::LaunchWatchdog::Guard g(group_depth_ == 0 ? watchdog_.get() : nullptr, timeout_);
      r = ncclAllReduce(send, recv, count, type, op, comm_, stream);
    }
    enqueue(r, "ncclAllReduce");
  }

  void group_start() {
    usable("ncclGroupStart");
    const auto r = ncclGroupStart();
    if (r != ncclSuccess) fail(r, "ncclGroupStart");
    ++group_depth_;
  }
  //! Ends a group. Its broadcasts are issued here, in the order given, except for a group of
  //! one broadcast from every rank, all of one size, at consecutive blocks of one buffer (the
  //! framed protocol's handshake and acknowledgement): that runs as one in-place ncclAllGather,
  //! in which every rank sends and receives at once, instead of one broadcast after another.
  void group_end() {
    if (group_depth_ == 1) {
      try {
        issue_pending();
      } catch (...) {
        --group_depth_;
        (void)ncclGroupEnd();
        throw;
      }
    }
    --group_depth_;
    ncclResult_t r;
    {
      detail::LaunchWatchdog::Guard g(watchdog_.get(), timeout_);
      r = ncclGroupEnd();
    }
    if (r == ncclInProgress) {
      wait_ready("ncclGroupEnd", "group");
      return;
    }
    if (r != ncclSuccess) fail(r, "ncclGroupEnd");
  }

  //! @throws nccl_error when the communicator failed asynchronously, peer_error / remote_error when
  //!   the control channel reports a peer gone or aborted. Non-blocking.
  void check() {
    usable("check");
    ncclResult_t st = ncclSuccess;
    const auto r = ncclCommGetAsyncError(comm_, &st);
    if (r != ncclSuccess) fail(r, "ncclCommGetAsyncError");
    if (st != ncclSuccess && st != ncclInProgress) fail(st, "asynchronous operation");
    control_.check();
  }
  //! The first peer that left cleanly, -1 when none (ControlChannel::departed_peer).
  int departed_peer() noexcept { return control_.departed_peer(); }

  //! Tears the communicator down now: pending operations fail on this rank, peers are told over the
  //! control channel. Later calls throw state_error. Never throws, never waits for peers.
  void abort(const std::string& reason) noexcept {
    if (!comm_ || aborted_) return;
    aborted_ = true;
    failed_ = true;
    abort_reason_ = reason;
    control_.abort(reason);
    detail::CurrentDeviceGuard g(device_);
    // The watchdog may have aborted it already (a launch stuck past the deadline).
    if (!watchdog_ || watchdog_->abort_once()) {
      const auto r = ncclCommAbort(comm_);
      if (r != ncclSuccess)
        log(LogLevel::warning, detail::cat("ncclCommAbort: ", ncclGetErrorString(r)));
    }
    watchdog_.reset();
    comm_ = nullptr;
    if (parent_) ncclCommAbort(std::exchange(parent_, nullptr));
  }

  //! Waits, polling, until the work enqueued so far on `stream` completes, within timeout().
  void synchronize(cudaStream_t stream) {
    detail::CurrentDeviceGuard g(device_);
    CudaEvent e(device_);
    e.record(stream);
    const auto start = std::chrono::steady_clock::now();
    const auto deadline = start + timeout_;
    // Yields for the first 2 ms so that a short wait ends within microseconds (a 50 us sleep
    // here put up to ~50 us of skew between ranks leaving a barrier: run 53), then sleeps.
    while (!e.ready()) {
      const auto now = std::chrono::steady_clock::now();
      check();
      if (now >= deadline) {
        abort("synchronize timed out");
        throw timeout_error(
            "synchronize", -1,
            detail::cat("stream work did not complete within ", timeout_.count(), " ms; aborted"));
      }
      if (now - start < std::chrono::milliseconds(2))
        std::this_thread::yield();
      else
        std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

 private:
  void swap(NcclCommunicator& o) noexcept {
    std::swap(comm_, o.comm_);
    std::swap(parent_, o.parent_);
    std::swap(rank_, o.rank_);
    std::swap(size_, o.size_);
    std::swap(device_, o.device_);
    std::swap(timeout_, o.timeout_);
    std::swap(failed_, o.failed_);
    std::swap(aborted_, o.aborted_);
    std::swap(group_depth_, o.group_depth_);
    std::swap(pending_, o.pending_);
    std::swap(abort_reason_, o.abort_reason_);
    std::swap(control_, o.control_);
    std::swap(watchdog_, o.watchdog_);
    std::swap(wire_, o.wire_);
  }

  struct PendingBroadcast {
    char* buf;
    std::size_t bytes;
    int root;
    cudaStream_t stream;
  };
  //! Where a group of broadcasts is an all-gather (see group_end): the buffer of rank 0's block.
  char* allgather_base(const std::vector<PendingBroadcast>& ops) const {
    if (ops.size() != static_cast<std::size_t>(size_) || size_ < 2) return nullptr;
    const std::size_t bytes = ops.front().bytes;
    const auto& first = ops.front();
    char* base = first.buf - static_cast<std::ptrdiff_t>(static_cast<std::size_t>(first.root) * bytes);
    std::vector<char> seen(ops.size(), 0);
    for (const auto& op : ops) {
      if (op.bytes != bytes || op.stream != first.stream || seen[static_cast<std::size_t>(op.root)] ||
          op.buf != base + static_cast<std::size_t>(op.root) * bytes)
        return nullptr;
      seen[static_cast<std::size_t>(op.root)] = 1;
    }
    return bytes > 0 ? base : nullptr;
  }
  void issue_pending() {
    if (pending_.empty()) return;
    const auto ops = std::exchange(pending_, {});
    if (char* base = allgather_base(ops)) {
      const std::size_t bytes = ops.front().bytes;
      usable("ncclAllGather");
      const auto r = ncclAllGather(base + static_cast<std::size_t>(rank_) * bytes, base, bytes,
                                   ncclUint8, comm_, ops.front().stream);
      enqueue(r, "ncclAllGather");
      return;
    }
    for (const auto& op : ops) launch_broadcast(op.buf, op.bytes, op.root, op.stream);
  }

  void usable(const char* api) const {
    if (watchdog_ && watchdog_->fired())
      throw state_error(detail::cat(api, ": the launch watchdog aborted the communicator"));
    if (aborted_)
      throw state_error(detail::cat(api, ": the communicator was aborted (", abort_reason_, ")"));
    if (!comm_) throw state_error(detail::cat(api, ": no communicator (empty or moved-from)"));
  }

  [[noreturn]] void fail(ncclResult_t r, const char* api) {
    failed_ = true;
    const bool by_watchdog = watchdog_ && watchdog_->fired();
    nccl_error e(r,
                 by_watchdog ? detail::cat(api, " (stuck past ", timeout_.count(),
                                           " ms; the launch watchdog aborted the communicator)")
                             : std::string(api),
                 rank_, by_watchdog ? nullptr : comm_);
    abort(e.what());
    throw e;
  }

  void enqueue(ncclResult_t r, const char* api) {
    if (r == ncclSuccess) return;
    if (r == ncclInProgress) {
      if (group_depth_ == 0) wait_ready(api, "enqueue");
      return;
    }
    fail(r, api);
  }

  //! Polls ncclCommGetAsyncError while it answers ncclInProgress, within timeout().
  void wait_ready(const char* api, const char* phase, const std::stop_token& stop = {}) {
    const auto start = std::chrono::steady_clock::now();
    const auto deadline = start + timeout_;
    auto next_control = start;
    while (true) {
      ncclResult_t st = ncclInProgress;
      const auto r = ncclCommGetAsyncError(comm_, &st);
      if (r != ncclSuccess) fail(r, "ncclCommGetAsyncError");
      if (st == ncclSuccess) return;
      if (st != ncclInProgress) fail(st, api);
      const auto now = std::chrono::steady_clock::now();
      if (now >= next_control) {
        try {
          control_.check();
        } catch (const std::exception& e) {
          abort(e.what());
          throw;
        }
        next_control = now + std::chrono::milliseconds(5);
      }
      if (stop.stop_requested()) {
        const std::string what = detail::cat(api, " on rank ", rank_, " of ", size_,
                                             " stopped (a stop was requested); communicator aborted");
        abort(what);
        throw state_error(what);
      }
      if (now >= deadline) {
        const std::string what =
            detail::cat(api, " on rank ", rank_, " of ", size_, " did not complete within ",
                        timeout_.count(), " ms (are all ranks there?); communicator aborted");
        abort(what);
        throw timeout_error(phase, -1, what);
      }
      // Launches usually finish within microseconds: yield first, sleep only on long waits.
      if (now - start < std::chrono::milliseconds(2))
        std::this_thread::yield();
      else
        std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  void warmup() {
    detail::CurrentDeviceGuard g(device_);
    CudaStream s(device_);
    DeviceBuffer buf(2 * sizeof(float), device_);
    detail::check(cudaMemsetAsync(buf.data(), 0, buf.size(), s.get()), "cudaMemsetAsync");
    all_reduce(buf.data(), buf.data() + sizeof(float), 1, ncclFloat32, ncclSum, s.get());
    synchronize(s.get());
  }

  //! One grouped broadcast from every rank, so that NCCL sets up every connection the pipeline's
  //! broadcasts use now, within init's deadline.
  void connect_all() {
    detail::CurrentDeviceGuard g(device_);
    CudaStream s(device_);
    const std::size_t bytes = std::size_t{1} << 20;
    DeviceBuffer buf(bytes * static_cast<std::size_t>(size_), device_);
    group_start();
    for (int r = 0; r < size_; ++r)
      broadcast(buf.data() + static_cast<std::size_t>(r) * bytes, bytes, r, s.get());
    group_end();
    synchronize(s.get());
  }

  void destroy() noexcept {
    if (!comm_) {
      if (parent_) ncclCommAbort(std::exchange(parent_, nullptr));
      control_.close();
      return;
    }
    detail::CurrentDeviceGuard g(device_);
    if (failed_ || std::uncaught_exceptions() > 0 || (watchdog_ && watchdog_->fired())) {
      abort(failed_ ? "communicator failed" : "destroyed during exception unwinding");
      return;
    }
    // Clean teardown: finalize (flush, quiesce) within a bound, then destroy; abort otherwise.
    const auto fr = ncclCommFinalize(comm_);
    bool clean = fr == ncclSuccess || fr == ncclInProgress;
    const auto deadline =
        std::chrono::steady_clock::now() + std::min(timeout_, std::chrono::milliseconds(10000));
    while (clean) {
      ncclResult_t st = ncclInProgress;
      if (ncclCommGetAsyncError(comm_, &st) != ncclSuccess ||
          (st != ncclSuccess && st != ncclInProgress)) {
        clean = false;
        break;
      }
      if (st == ncclSuccess) break;
      if (std::chrono::steady_clock::now() >= deadline) {
        clean = false;
        break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    if (!clean) {
      log(LogLevel::warning, "NCCL communicator did not finalize in time; aborting it");
      abort("finalize timed out");
      return;
    }
    watchdog_.reset();
    ncclCommDestroy(comm_);
    comm_ = nullptr;
    if (parent_) {
      // The parent is idle (never used after the split): finalize it within the bound too.
      const auto pr = ncclCommFinalize(parent_);
      bool ok = pr == ncclSuccess || pr == ncclInProgress;
      while (ok) {
        ncclResult_t st = ncclInProgress;
        if (ncclCommGetAsyncError(parent_, &st) != ncclSuccess ||
            (st != ncclSuccess && st != ncclInProgress))
          ok = false;
        if (st == ncclSuccess || std::chrono::steady_clock::now() >= deadline) break;
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
      if (ok)
        ncclCommDestroy(parent_);
      else
        ncclCommAbort(parent_);
      parent_ = nullptr;
    }
    control_.close();
  }

  ncclComm_t comm_ = nullptr;
  ncclComm_t parent_ = nullptr;  // NcclOptions::blocking: the non-blocking communicator split from
  int rank_ = 0;
  int size_ = 0;
  int device_ = -1;
  std::chrono::milliseconds timeout_{120000};
  bool failed_ = false;
  bool aborted_ = false;
  int group_depth_ = 0;
  std::vector<PendingBroadcast> pending_;  // a group's broadcasts, issued at group_end
  std::string abort_reason_;
  WireState wire_;
  ControlChannel control_;
  std::unique_ptr<detail::LaunchWatchdog> watchdog_;  // blocking launches only
};

static_assert(Communicator<NcclCommunicator>);
static_assert(GroupedCommunicator<NcclCommunicator>);
static_assert(MonitoredCommunicator<NcclCommunicator>);
static_assert(WireStateCommunicator<NcclCommunicator>);

}  // namespace weightsync
