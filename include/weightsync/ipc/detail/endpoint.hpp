// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! IpcEndpoint: what one member of an IPC group holds for every kind of sync over it (whole
//! tensors: IpcTransport; shards: send_shards / receive_shards): the control channel, the
//! consumer's stream and copy engines, the producer's export cache, the consumer's mappings, and
//! the bounded waits on device work. Internal: users hold an IpcTransport.

#include "weightsync/config.hpp"
#if !WEIGHTSYNC_HAS_CUDA
#error "<weightsync/ipc/detail/endpoint.hpp> needs the CUDA runtime (WEIGHTSYNC_HAS_CUDA=0)"
#endif

#include <cuda_runtime.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "weightsync/cuda/check.hpp"
#include "weightsync/cuda/device_buffer.hpp"
#include "weightsync/cuda/event.hpp"
#include "weightsync/cuda/stream.hpp"
#include "weightsync/cuda/stream_signal.hpp"
#include "weightsync/detail/format.hpp"
#include "weightsync/detail/frame.hpp"
#include "weightsync/pipeline/detail/wait.hpp"
#include "weightsync/error.hpp"
#include "weightsync/host/communicator.hpp"
#include "weightsync/ipc/detail/control_messages.hpp"
#include "weightsync/ipc/detail/driver.hpp"
#include "weightsync/ipc/detail/exporter.hpp"
#include "weightsync/ipc/detail/mapping.hpp"
#include "weightsync/ipc/detail/placement.hpp"
#include "weightsync/ipc/detail/plan.hpp"
#include "weightsync/ipc/detail/pull.hpp"
#include "weightsync/ipc/detail/shm_mailbox.hpp"
#include "weightsync/ipc/options.hpp"
#include "weightsync/log.hpp"
#include "weightsync/tensor_meta.hpp"
#include "weightsync/transfer_options.hpp"

namespace weightsync::detail {

//! load_weights of an IPC consumer: views and the stream they are valid on.
using IpcLoadFn = std::function<void(std::span<const TensorView>, cudaStream_t)>;

struct IpcEndpoint {
  //! Joins the group (the rendezvous of HostCommunicator) on CUDA device `device` (-1: current).
  IpcEndpoint(const RendezvousOptions& rv, int dev, IpcOptions o,
              std::chrono::milliseconds op_timeout)
      : opt(o),
        device(dev >= 0 ? dev : current_device()),
        stream(device),
        sync(device),
        mappings(device) {
    if (opt.copy_streams < 1 || opt.copy_streams > 16)
      throw config_error("copy_streams", cat("must be in 1..16, got ", opt.copy_streams));
    DriverApi::get();  // fail early when the driver lacks what we need
    here = ProcessLocation::here(device);
    ctrl = HostCommunicator::connect(rv, op_timeout);
    CurrentDeviceGuard g(device);
    puller.emplace(device, opt);
  }
  IpcEndpoint(IpcEndpoint&&) noexcept = default;
  IpcEndpoint& operator=(IpcEndpoint&&) = delete;
  //! Waits for what this side enqueued (unbounded, as a destructor must not leave copies reading
  //! freed memory), then closes every mapping.
  ~IpcEndpoint() {
    quiesce();
    mappings.clear(stats);
  }
  //! Waits (unbounded) for every copy this side enqueued; for destructors.
  void quiesce() noexcept {
    if (stream.get()) (void)cudaStreamSynchronize(stream.get());
    if (puller)
      for (auto& s : puller->streams())
        if (s.get()) (void)cudaStreamSynchronize(s.get());
  }

  int rank() const noexcept { return ctrl.rank(); }
  int size() const noexcept { return ctrl.size(); }
  ControlMessages channel(int first_consumer = 1) { return ControlMessages(ctrl, first_consumer); }

  //! The start of every sync: the channel still usable, every control step bounded by opt.timeout.
  void begin(const TransferOptions& o) {
    o.validate();
    if (ctrl.aborted())
      throw state_error(
          "ipc transport: aborted by an earlier error; create a new one (init again)");
    ctrl.set_timeout(o.timeout);
  }

  //! A plan with this producer's identity, the digest of `metas` and their byte count (a caller
  //! that sends less, the sharded syncs, sets total_bytes itself).
  IpcPlan plan_header(std::span<const TensorMeta> metas) {
    return plan_header(metas.size(), digests.of(metas));
  }
  //! A plan with this producer's identity for `count` tensors of metadata `m` (its digest and byte
  //! count).
  IpcPlan plan_header(std::size_t count, const MetadataSummary& m) {
    IpcPlan plan;
    plan.same_gpu = opt.same_gpu ? 1 : 0;
    plan.boot_id = here.boot_id;
    plan.host = here.host;
    plan.uuid = here.uuid;
    plan.pid = here.pid;
    plan.digest = m.digest;
    plan.total_bytes = m.bytes;
    plan.num_tensors = count;
    return plan;
  }

  //! Producer: waits (bounded) for the work already enqueued on the stream that produced the
  //! weights. An idle stream needs no wait and gets no work of ours (on a GPU shared by time
  //! slices, an event recorded there costs a switch to this process's context).
  void await_source(const TransferOptions& o) {
    if (!o.source_stream) return;
    const auto s = static_cast<cudaStream_t>(o.source_stream);
    const auto st = cudaStreamQuery(s);
    if (st == cudaSuccess) return;
    if (st != cudaErrorNotReady) check(st, "cudaStreamQuery(source_stream)");
    (void)cudaGetLastError();
    await_stream(s, o, "ipc source stream");
  }
  //! Waits (bounded) for the work enqueued on `s` so far.
  void await_stream(cudaStream_t s, const TransferOptions& o, const char* phase) {
    if (opt.blocking_waits) {
      signal.arm(s);
      bounded_block([&](auto d) { return signal.wait_for(d); }, o.timeout, [&] { watch(); },
                    [&] { expire(o, phase); });
      return;
    }
    sync.record(s);
    await_event(sync, o, phase);
  }
  //! Waits for `e` within o.timeout, watching the control channel; aborts on either failure.
  template <class Event>  // CudaEvent, TimedEvent
  void await_event(const Event& e, const TransferOptions& o, const char* phase) {
    bounded_wait([&] { return e.ready(); }, o.timeout, [&] { watch(); }, [&] { expire(o, phase); });
  }
  //! Waits (bounded) for everything this side enqueued: the copy streams and the main stream, where
  //! load_weights enqueued its work. Used after a failure, before anything is reported.
  void drain(const TransferOptions& o) {
    for (auto& cs : puller->streams()) await_stream(cs.get(), o, "ipc drain");
    await_stream(stream.get(), o, "ipc drain");
  }

  //! Whole-tensor syncs: sets up the shared-memory mailbox (IpcOptions::shared_memory_control) on
  //! the first call, on every member at once (rank 0 makes it, names it on the socket, every
  //! consumer says whether it opened it; used only if all did), then starts the next round.
  void begin_round() {
    if (!mailbox_decided) decide_mailbox();
    ++round;
  }
  bool mailbox_active() const noexcept { return static_cast<bool>(mailbox); }

  //! Rank 0: sends this round's plan message (the mailbox, or the socket; a blob too long for the
  //! mailbox is announced there and follows on the socket).
  void post_blob(const std::string& blob) {
    if (!mailbox) return channel().send_blob(blob);
    mailbox.post(round, blob);
    if (blob.size() > ShmMailbox::kInlineBytes) channel().send_blob(blob);
  }
  //! A consumer: this round's plan message from rank 0, at most `limit` bytes.
  std::string take_blob(std::uint64_t limit, const char* what) {
    if (!mailbox) return channel().receive_blob(limit, what);
    auto m = mailbox.receive(round, ctrl.timeout(), [&] { watch(); }, what);
    if (m.inline_) return std::move(m.blob);
    if (m.bytes > limit)
      throw protocol_error(0, cat(what, " of ", m.bytes, " bytes announced by rank 0"));
    std::string s = channel().receive_blob(limit, what);
    if (s.size() != m.bytes)
      throw protocol_error(0, cat(what, ": ", m.bytes, " bytes announced, ", s.size(), " sent"));
    return s;
  }
  //! Every consumer's outcome of this round, indexed by rank (as ControlMessages::gather_outcomes);
  //! a consumer only posts its own.
  std::vector<ControlMessages::Outcome> gather_outcomes(FrameCode code, const std::string& why) {
    if (!mailbox) return channel().gather_outcomes(code, why);
    std::vector<ControlMessages::Outcome> out(static_cast<std::size_t>(size()));
    channel().guarded([&] {
      if (rank() != 0) {
        auto& o = out[static_cast<std::size_t>(rank())];
        o = ControlMessages::Outcome::of(rank(), code, why, ShmMailbox::kOutcomeText);
        mailbox.post_outcome(rank() - 1, round, o.frame, o.text);
        return;
      }
      for (int r = 1; r < size(); ++r) {
        auto& o = out[static_cast<std::size_t>(r)];
        o.frame = mailbox.receive_outcome(r - 1, round, o.text, ctrl.timeout(), [&] { watch(); },
                                          "ipc outcomes");
        if (!o.valid(r, ShmMailbox::kOutcomeText) || o.frame.ack.message_bytes != o.text.size())
          throw protocol_error(r, cat("rank ", r, " sent no valid outcome frame"));
      }
    });
    return out;
  }

  IpcOptions opt;
  int device = -1;
  ProcessLocation here;
  HostCommunicator ctrl;
  CudaStream stream;             //!< consumer: the pulls join here; load_weights gets it
  std::optional<Puller> puller;  //!< consumer: copy-engine streams, batched copy kernel
  CudaEvent sync;                //!< what await_stream records when it polls
  StreamSignal signal;           //!< what await_stream sleeps on (IpcOptions::blocking_waits)
  IpcStats stats;
  ExportCache exports;    //!< producer
  DeviceBuffer assembly;  //!< consumer, sharded syncs: tensors assembled for load_weights
  MetadataDigestCache digests;  //!< whole-tensor syncs: the digest of this side's metadata
  ShmMailbox mailbox;     //!< whole-tensor syncs' messages, when every member opened it
  bool mailbox_decided = false;
  std::uint64_t round = 0;  //!< whole-tensor syncs so far (the mailbox's round number)
  MappingCache mappings;  //!< consumer: declared last, closed before the streams go

  //! Throws (aborting the channel) when a peer is known to be gone.
  void watch() {
    channel().guarded([&] { ctrl.check(); });
  }

 private:
  void decide_mailbox() {
    channel().guarded([&] {
      std::string name;
      if (rank() == 0 && opt.shared_memory_control && size() > 1) {
        try {
          mailbox = ShmMailbox::create(size() - 1);
          name = mailbox.name();
        } catch (const config_error& e) {
          log(LogLevel::info, cat("ipc: control messages over TCP: ", e.what()));
        }
      }
      if (rank() == 0)
        channel().send_blob(name);
      else
        name = channel().receive_blob(4096, "ipc mailbox name");
      std::uint8_t all = name.empty() ? 0 : 1;
      for (int r = 1; r < size(); ++r) {
        std::uint8_t opened = 0;
        if (r == rank() && all && opt.shared_memory_control) {
          try {
            mailbox = ShmMailbox::open(name, size() - 1);
            opened = 1;
          } catch (const config_error& e) {
            log(LogLevel::info, cat("ipc: control messages over TCP: ", e.what()));
          }
        }
        ctrl.broadcast(&opened, 1, r);
        all = all && opened;
      }
      mailbox.unlink();
      if (!all) mailbox = ShmMailbox{};
    });
    mailbox_decided = true;
  }
  [[noreturn]] void expire(const TransferOptions& o, const char* phase) {
    const std::string what = cat("device work not done within ", o.timeout.count(), " ms (rank ",
                                 rank(), "); transport aborted");
    ctrl.abort(std::string(phase) + ": " + what);
    throw timeout_error(phase, -1, what);
  }
};

}  // namespace weightsync::detail
