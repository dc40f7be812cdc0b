// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// The CUDA IPC transports across processes: "ipc" (both processes on GPU 0) and "p2p" (GPU 0 ->
// GPU 1, pulled over NVLink by copy engines). Each TEST_CASE runs as the parent (spawns the peers,
// enforces the deadline, checks exit codes) and, in the peers (--ws-rank), as rank 0 (producer)
// or rank 1 (consumer). Every tensor is compared bit-exactly with the producer's pattern;
// destinations are poisoned before every round.
#include <weightsync/cuda/batched_copy.hpp>
#include <weightsync/cuda/stream.hpp>
#include <weightsync/engine.hpp>
#include <weightsync/ipc.hpp>
#include <weightsync/ipc/backend.hpp>
#include <weightsync/layouts.hpp>
#include <weightsync/shard.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "support/catch.hpp"
#include "support/engine_options.hpp"
#include "support/gpu_model.hpp"
#include "support/gpu_peers.hpp"
#include "support/gpu_round.hpp"
#include "support/host_world.hpp"
#include "support/process.hpp"
#include "support/role.hpp"
#include "support/spawn.hpp"
#include "support/survivor.hpp"

using namespace weightsync;
using namespace std::chrono_literals;
using ws_test::device_count;
using ws_test::Mode;
using ws_test::say;

namespace {

enum class Kind { ipc, p2p };

struct Peer {
  int rank;
  int device;
  CudaStream stream;
  IpcTransport t;
};

Peer connect_peer(Kind kind, std::chrono::milliseconds timeout = 30s, IpcOptions io = {}) {
  const auto& r = ws_test::role();
  const int device = kind == Kind::ipc ? 0 : r.rank % device_count();
  detail::check(cudaSetDevice(device), "cudaSetDevice");
  io.same_gpu = kind == Kind::ipc;
  return Peer{r.rank, device, CudaStream(device),
              IpcTransport(ws_test::peer_rendezvous(), device, io, timeout)};
}

std::vector<SourceTensorRef> items_of(const std::vector<TensorMeta>& metas,
                                      const std::byte* const* p) {
  std::vector<SourceTensorRef> items;
  for (std::size_t i = 0; i < metas.size(); ++i) items.push_back({&metas[i], p[i]});
  return items;
}

// One round. Returns the number of wrong bytes on the consumer (0 on the producer).
unsigned long long round_trip(Peer& p, const std::vector<TensorMeta>& metas,
                              const ws_test::DeviceModel& model, TransferOptions opt,
                              std::uint64_t round, Mode mode) {
  const cudaStream_t s = p.stream.get();
  if (p.rank == 0) {
    ws_test::send_round(metas, model, opt, s, round,
                        [&](const auto& items, const auto& o) { p.t.send(metas, items, o); });
    return 0;
  }
  return ws_test::receive_round(metas, model, opt, s, round, mode,
                                [&](const auto& o, auto load) { p.t.receive(metas, o, load); });
}

std::string stats_line(const Peer& p) {
  const auto& s = p.t.stats();
  return detail::cat("rank ", p.rank, ": exported ", s.exported, ", opened ", s.opened, ", closed ",
                     s.closed, ", mapped ", s.mapped, ", regions ", s.regions, ", staged ",
                     s.staged);
}

}  // namespace

TEST_CASE("ipc colocated round trips: exported and staged, K 1-3, views and zero-copy",
          "[gpu][ipc]") {
  if (ws_test::ran_as_parent(1, 180s)) return;
  Peer p = connect_peer(Kind::ipc);
  const auto metas = ws_test::mixed_layout();
  ws_test::DeviceModel model(metas, p.device, 4096);  // scattered: no two tensors touch
  std::uint64_t round = 0;
  // 1. Pulled from where the producer's tensors are: one allocation, exported and opened once.
  for (int k : {1, 3})
    for (Mode mode : {Mode::views, Mode::zero_copy}) {
      TransferOptions opt;
      opt.num_buffers = k;
      opt.buffer_size_bytes = 8 << 20;
      INFO("exported, K " << k << ", mode " << int(mode));
      REQUIRE(round_trip(p, metas, model, opt, ++round, mode) == 0);
    }
  say(stats_line(p));
  // The per-sync messages went through the shared-memory mailbox (the default), on both sides.
  CHECK(p.t.shared_memory_control_active());
  if (p.rank == 0) {
    CHECK(p.t.stats().exported == 1);
    CHECK(p.t.stats().staged == 0);
  } else {
    CHECK(p.t.stats().opened == 1);  // once, not once per round or per tensor
    CHECK(p.t.stats().closed == 0);
    CHECK(p.t.stats().mapped == 1);
  }
  // 2. Staged through the exported slot ring, chunk by chunk (several chunks per round).
  p.t.options().export_sources = false;
  for (int k : {1, 2, 3})
    for (std::size_t b : {std::size_t{8} << 20, std::size_t{1} << 30})
      for (Mode mode : {Mode::views, Mode::zero_copy}) {
        TransferOptions opt;
        opt.num_buffers = k;
        opt.buffer_size_bytes = b;
        INFO("staged, K " << k << ", B " << b << ", mode " << int(mode));
        REQUIRE(round_trip(p, metas, model, opt, ++round, mode) == 0);
        if (p.rank == 0)
          CHECK(p.t.stats().staged == metas.size() - 2);  // all but the two empty ones
      }
  // 2b. Pulls cut into 4 KiB pieces over the copy streams, none through the batched kernel (on
  // one GPU a pull is not cut by default: IpcOptions::piece_bytes = 0).
  p.t.options().export_sources = true;
  p.t.options().piece_bytes = 4096;
  p.t.options().kernel_below_bytes = 0;
  for (Mode mode : {Mode::views, Mode::zero_copy}) {
    TransferOptions opt;
    opt.buffer_size_bytes = 8 << 20;
    INFO("exported, 4 KiB pieces, mode " << int(mode));
    REQUIRE(round_trip(p, metas, model, opt, ++round, mode) == 0);
  }
  p.t.options().piece_bytes = 0;
  p.t.options().kernel_below_bytes = IpcOptions{}.kernel_below_bytes;
  // 3. The same with blocking waits (the host sleeps until a host function wakes it), exported
  // then staged, so that the last round leaves only the slot ring mapped.
  p.t.options().blocking_waits = true;
  for (bool exported : {true, false})
    for (Mode mode : {Mode::views, Mode::zero_copy}) {
      p.t.options().export_sources = exported;
      TransferOptions opt;
      opt.num_buffers = 2;
      opt.buffer_size_bytes = 8 << 20;
      INFO("blocking waits, exported " << exported << ", mode " << int(mode));
      REQUIRE(round_trip(p, metas, model, opt, ++round, mode) == 0);
    }
  say(stats_line(p));
  if (p.rank == 1) {
    const auto s = p.t.stats();
    CHECK(s.mapped == 1);  // only the current slot ring: the arena and outgrown rings were closed
    CHECK(s.opened == s.closed + s.mapped);
    p.t.close_mappings();
    CHECK(p.t.stats().closed == p.t.stats().opened);
  }
}

TEST_CASE("ipc control over TCP when a consumer does not take the mailbox, bit-exact",
          "[gpu][ipc]") {
  if (ws_test::ran_as_parent(1, 120s)) return;
  IpcOptions io;
  io.shared_memory_control = ws_test::role().rank == 0;  // the producer offers, the consumer not
  Peer p = connect_peer(Kind::ipc, 30s, io);
  const auto metas = ws_test::mixed_layout();
  ws_test::DeviceModel model(metas, p.device, 4096);
  std::uint64_t round = 0;
  for (bool exported : {true, false})
    for (Mode mode : {Mode::views, Mode::zero_copy}) {
      p.t.options().export_sources = exported;
      TransferOptions opt;
      opt.buffer_size_bytes = 8 << 20;
      INFO("TCP control, exported " << exported << ", mode " << int(mode));
      REQUIRE(round_trip(p, metas, model, opt, ++round, mode) == 0);
    }
  CHECK_FALSE(p.t.shared_memory_control_active());  // on both sides: all or none
  say(detail::cat("rank ", p.rank, ": control over TCP, ", round, " rounds bit-exact"));
}

TEST_CASE(
    "ipc: replaced producer memory is unmapped once and 100 syncs keep memory and handles flat",
    "[gpu][ipc]") {
  if (ws_test::ran_as_parent(1, 240s)) return;
  Peer p = connect_peer(Kind::ipc);
  const auto metas = layouts::small1b();
  ws_test::DeviceModel consumer_model(metas, p.device);
  TransferOptions opt;
  {
    ws_test::DeviceModel first(metas, p.device);
    REQUIRE(round_trip(p, metas, p.rank == 0 ? first : consumer_model, opt, 1, Mode::zero_copy) ==
            0);
  }  // the producer frees its first copy of the weights
  ws_test::DeviceModel second(metas, p.device);
  const auto& model = p.rank == 0 ? second : consumer_model;
  REQUIRE(round_trip(p, metas, model, opt, 2, Mode::zero_copy) == 0);
  if (p.rank == 1) {
    CHECK(p.t.stats().opened == 2);
    CHECK(p.t.stats().closed == 1);  // the freed allocation's mapping, at once
    CHECK(p.t.stats().mapped == 1);
  }
  std::size_t free_after_first = 0, total = 0;
  for (std::uint64_t round = 3; round < 103; ++round) {
    REQUIRE(round_trip(p, metas, model, opt, round, round % 2 ? Mode::views : Mode::zero_copy) ==
            0);
    if (round == 3) detail::check(cudaMemGetInfo(&free_after_first, &total), "cudaMemGetInfo");
  }
  std::size_t free_now = 0;
  detail::check(cudaMemGetInfo(&free_now, &total), "cudaMemGetInfo");
  say(stats_line(p) + "; free device memory " + std::to_string(free_after_first) +
      " after round 3, " + std::to_string(free_now) + " after round 102");
  // Both processes share the GPU, so this is device-wide: nothing may be lost over 100 syncs (it
  // may grow once the driver releases the producer's freed first allocation, unmapped in round 2).
  CHECK(free_now >= free_after_first);
  if (p.rank == 1) {
    CHECK(p.t.stats().opened == 2);
    CHECK(p.t.stats().mapped == 1);
  } else {
    CHECK(p.t.stats().exported == 2);
  }
  // The producer's memory is unchanged from round 2 on: every later round sends "same plan as
  // round N" instead of the plan (both sides count it).
  CHECK(p.t.stats().plans_reused == 100);
}

TEST_CASE("ipc sources in cudaMallocAsync memory are staged or pulled, bit-exact", "[gpu][ipc]") {
  if (ws_test::ran_as_parent(1, 120s)) return;
  Peer p = connect_peer(Kind::ipc);
  const auto metas = ws_test::mixed_layout();
  ws_test::DeviceModel model(metas, p.device);
  const cudaStream_t s = p.stream.get();
  TransferOptions opt;
  opt.buffer_size_bytes = 16 << 20;
  if (p.rank == 0) {
    model.fill(7, s);
    void* pool = nullptr;
    detail::check(cudaMallocAsync(&pool, model.arena_bytes(), s), "cudaMallocAsync");
    detail::check(
        cudaMemcpyAsync(pool, model.arena(), model.arena_bytes(), cudaMemcpyDeviceToDevice, s),
        "cudaMemcpyAsync");
    std::vector<const std::byte*> ptrs;
    for (std::size_t i = 0; i < metas.size(); ++i)
      ptrs.push_back(static_cast<std::byte*>(pool) + (model.data(i) - model.arena()));
    opt.source_stream = s;
    p.t.send(metas, items_of(metas, ptrs.data()), opt);
    say(detail::cat("cudaMallocAsync sources: ", p.t.stats().staged, " of ", metas.size(),
                    " tensors staged, ", p.t.stats().regions, " regions"));
    detail::check(cudaFreeAsync(pool, s), "cudaFreeAsync");
    detail::check(cudaStreamSynchronize(s), "sync");
    return;
  }
  ws_test::poison_now(model, s);
  opt.destination = [&](const TensorMeta& m) -> void* {
    return model.data(static_cast<std::size_t>(&m - metas.data()));
  };
  p.t.receive(metas, opt, [](std::span<const TensorView>, cudaStream_t) {});
  CHECK(model.count_wrong(7, s) == 0);
}

TEST_CASE("ipc faults keep the transport usable: bad item, failing load_weights, wrong metadata",
          "[gpu][ipc]") {
  if (ws_test::ran_as_parent(1, 120s)) return;
  Peer p = connect_peer(Kind::ipc);
  const auto metas = ws_test::mixed_layout();
  ws_test::DeviceModel model(metas, p.device);
  TransferOptions opt;
  const auto model_items = ws_test::ModelSource{metas, model}.iterate();
  auto nothing = [](std::span<const TensorView>, cudaStream_t) {};
  // 1. The producer offers a tensor of the wrong dtype.
  if (p.rank == 0) {
    auto items = model_items;
    TensorMeta lie = metas[20];
    lie.dtype = DType::float16;
    items[20].meta_ = &lie;
    REQUIRE_THROWS_AS(p.t.send(metas, items, opt), config_error);
  } else {
    try {
      p.t.receive(metas, opt, nothing);
      FAIL("the consumer did not see the producer's failure");
    } catch (const remote_error& e) {
      CHECK(std::string(e.what()).find("dtype float16 where bfloat16 was declared") !=
            std::string::npos);
    }
  }
  REQUIRE(p.t.healthy());
  REQUIRE(round_trip(p, metas, model, opt, 1, Mode::views) == 0);
  // 2. The consumer's load_weights throws.
  if (p.rank == 0) {
    REQUIRE_THROWS_AS(p.t.send(metas, model_items, opt), remote_error);
  } else {
    REQUIRE_THROWS_WITH(p.t.receive(metas, opt,
                                    [](std::span<const TensorView>, cudaStream_t) {
                                      throw std::runtime_error("out of patience");
                                    }),
                        "out of patience");
  }
  REQUIRE(p.t.healthy());
  REQUIRE(round_trip(p, metas, model, opt, 2, Mode::zero_copy) == 0);
  // 3. The consumer expects other shapes: both sides say so, naming the mismatch.
  if (p.rank == 0) {
    REQUIRE_THROWS_AS(p.t.send(metas, model_items, opt), protocol_error);
  } else {
    auto other = metas;
    other[3].shape = {1024, 1023};
    REQUIRE_THROWS_AS(p.t.receive(other, opt, nothing), protocol_error);
  }
  REQUIRE(p.t.healthy());
  REQUIRE(round_trip(p, metas, model, opt, 3, Mode::views) == 0);
}

TEST_CASE("ipc with SealedMetadata: bit-exact, plans reused, a mismatch named on both sides",
          "[gpu][ipc]") {
  if (ws_test::ran_as_parent(1, 120s)) return;
  Peer p = connect_peer(Kind::ipc);
  const auto metas = ws_test::mixed_layout();
  const SealedMetadata sealed(metas);
  ws_test::DeviceModel model(metas, p.device);
  const cudaStream_t s = p.stream.get();
  TransferOptions opt;
  auto nothing = [](std::span<const TensorView>, cudaStream_t) {};
  // The items point at the sealed list (the cheap identity check), the destinations are found
  // from it.
  std::vector<SourceTensorRef> items;
  for (std::size_t i = 0; i < sealed.size(); ++i) items.push_back({&sealed[i], model.data(i)});
  auto send_sealed = [&](std::uint64_t round) {
    model.fill(round, s);
    opt.source_stream = s;
    p.t.send(sealed, items, opt);
  };
  auto receive_with = [&](const auto& list, std::uint64_t round, Mode mode) {
    return ws_test::receive_round(list, model, opt, s, round, mode,
                                  [&](const auto& o, auto load) { p.t.receive(list, o, load); });
  };
  auto sealed_round = [&](std::uint64_t round, Mode mode) -> unsigned long long {
    if (p.rank == 0) {
      send_sealed(round);
      return 0;
    }
    return receive_with(sealed, round, mode);
  };
  // 1. Both sides sealed: every byte, and from the second sync on the plan of the first.
  for (std::uint64_t round = 1; round <= 3; ++round)
    REQUIRE(sealed_round(round, round % 2 ? Mode::zero_copy : Mode::views) == 0);
  CHECK(p.t.stats().plans_reused == 2);
  // 2. A sealed list on one side and the same list as a span on the other agree, both ways.
  if (p.rank == 0)
    send_sealed(4);
  else
    REQUIRE(receive_with(metas, 4, Mode::zero_copy) == 0);
  if (p.rank == 0)
    ws_test::send_round(metas, model, opt, s, 5,
                        [&](const auto& it, const auto& o) { p.t.send(metas, it, o); });
  else
    REQUIRE(receive_with(sealed, 5, Mode::views) == 0);
  // 3. The consumer's sealed list has other shapes: both sides say so, and nothing is copied.
  const std::string named = "differ from this consumer's";
  if (p.rank == 0) {
    try {
      p.t.send(sealed, items, opt);
      FAIL("the producer did not see the consumer's mismatch");
    } catch (const protocol_error& e) {
      CHECK(std::string(e.what()).find(named) != std::string::npos);
    }
  } else {
    auto other = metas;
    other[3].shape = {1024, 1023};
    const SealedMetadata theirs(std::move(other));
    ws_test::poison_now(model, s);
    opt.destination = [&](const TensorMeta& m) -> void* {
      return model.data(static_cast<std::size_t>(&m - theirs.metas().data()));
    };
    try {
      p.t.receive(theirs, opt, nothing);
      FAIL("the consumer took the producer's other shapes");
    } catch (const protocol_error& e) {
      CHECK(std::string(e.what()).find(named) != std::string::npos);
    }
    opt.destination = nullptr;
    ws_test::DeviceModel untouched(metas, p.device);
    ws_test::poison_now(untouched, s);
    CHECK(model.count_diff(untouched, s) == 0);
  }
  REQUIRE(p.t.healthy());
  REQUIRE(sealed_round(6, Mode::views) == 0);
  // 4. Both sides move to a list of as many tensors with one shape changed (new plans, new byte
  // counts), then to fewer tensors, then back: every byte right, and no plan named again.
  const auto reused_before = p.t.stats().plans_reused;
  auto reshaped = metas;
  reshaped[3].shape = {1000, 1000};
  std::vector<TensorMeta> fewer(metas.begin() + 3, metas.begin() + 12);
  fewer[0].shape = {8, 40};
  std::uint64_t round = 7;
  for (const auto* list : {&reshaped, &fewer}) {
    ws_test::DeviceModel other_model(*list, p.device);
    if (p.rank == 0)
      ws_test::send_round(*list, other_model, opt, s, round,
                          [&](const auto& it, const auto& o) { p.t.send(*list, it, o); });
    else
      REQUIRE(ws_test::receive_round(*list, other_model, opt, s, round, Mode::zero_copy,
                                     [&](const auto& o, auto load) {
                                       p.t.receive(*list, o, load);
                                     }) == 0);
    ++round;
  }
  REQUIRE(sealed_round(round, Mode::zero_copy) == 0);
  CHECK(p.t.stats().plans_reused == reused_before);
}

TEST_CASE("ipc repeated syncs relaunch their pulls: the same plan and places run again, other "
          "sources, places or views list again",
          "[gpu][ipc]") {
  if (ws_test::ran_as_parent(1, 120s)) return;
  Peer p = connect_peer(Kind::ipc);
  // 64 tensors of 64 B, 256 B apart on both sides: 64 pieces, one launch of the batched copy
  // kernel from its descriptor table.
  const auto metas = layouts::synthetic(64, 64);
  const bool kernel = detail::BatchedCopyKernel::instance() != nullptr;
  ws_test::DeviceModel a(metas, p.device), b(metas, p.device);  // producer: sources A, B
  ws_test::DeviceModel x(metas, p.device), y(metas, p.device);  // consumer: places X, Y
  TransferOptions opt;
  struct Round {
    const ws_test::DeviceModel* src;
    const ws_test::DeviceModel* dst;
    Mode mode;
    std::uint64_t repeated;  // the consumer's pulls_repeated after it
  };
  // A new plan (other sources), other places and a round of views each list again; the round
  // after each relaunches.
  const Round rounds[] = {
      {&a, &x, Mode::zero_copy, 0}, {&a, &x, Mode::zero_copy, 1}, {&a, &x, Mode::zero_copy, 2},
      {&b, &x, Mode::zero_copy, 2}, {&b, &y, Mode::zero_copy, 2}, {&b, &y, Mode::zero_copy, 3},
      {&a, &y, Mode::zero_copy, 3}, {&a, &y, Mode::zero_copy, 4}, {&a, &y, Mode::views, 4},
      {&a, &y, Mode::zero_copy, 4}, {&a, &y, Mode::zero_copy, 5}, {&a, &x, Mode::zero_copy, 5},
  };
  std::uint64_t round = 0;
  for (const auto& r : rounds) {
    ++round;
    INFO("round " << round);
    if (p.rank == 0) {
      ws_test::send_round(metas, *r.src, opt, p.stream.get(), round,
                          [&](const auto& items, const auto& o) { p.t.send(metas, items, o); });
      continue;
    }
    REQUIRE(ws_test::receive_round(metas, *r.dst, opt, p.stream.get(), round, r.mode,
                                   [&](const auto& o, auto load) {
                                     p.t.receive(metas, o, load);
                                   }) == 0);
    // (Without the batched copy kernel, WEIGHTSYNC_COPY=ce, the copy engines list every pull.)
    CHECK(p.t.stats().pulls_repeated == (kernel ? r.repeated : 0));
  }
  if (p.rank == 1)
    say(detail::cat("pulls repeated: ", p.t.stats().pulls_repeated, " of ", round,
                    kernel ? "" : " (no batched copy kernel: none expected)"));
}

TEST_CASE("ipc consumer killed mid-transfer: the producer fails within the deadline",
          "[gpu][ipc]") {
  if (ws_test::ran_as_parent_killing(1, 1, 8000ms, 120s)) return;
  Peer p = connect_peer(Kind::ipc, 10s);
  const auto metas = layouts::small1b();
  ws_test::DeviceModel model(metas, p.device);
  TransferOptions opt;
  opt.timeout = 10s;
  if (p.rank == 1) {
    p.t.options().kernel_below_bytes = 0;
    for (std::uint64_t round = 1;; ++round) round_trip(p, metas, model, opt, round, Mode::views);
  }                                      // killed by the parent after 8 s
  p.t.options().export_sources = false;  // staged: the producer also waits on hand-offs
  opt.buffer_size_bytes = 64 << 20;
  const auto end = ws_test::until_failure(
      [&](std::uint64_t round) { round_trip(p, metas, model, opt, round, Mode::views); });
  say(ws_test::describe(end, "producer"));
  CHECK(end.seconds_after_last_ok < 10.0 + 2.0);
  CHECK(!p.t.healthy());
}

TEST_CASE("ipc producer killed mid-transfer: the consumer fails within the deadline",
          "[gpu][ipc]") {
  if (ws_test::ran_as_parent_killing(1, 0, 8000ms, 120s)) return;
  Peer p = connect_peer(Kind::ipc, 10s);
  const auto metas = layouts::small1b();
  ws_test::DeviceModel model(metas, p.device);
  TransferOptions opt;
  opt.timeout = 10s;
  opt.buffer_size_bytes = 64 << 20;
  if (p.rank == 0) {
    p.t.options().export_sources = false;
    for (std::uint64_t round = 1;; ++round) round_trip(p, metas, model, opt, round, Mode::views);
  }
  // Outside REQUIRE: Catch would swallow the exception this test waits for.
  const auto end = ws_test::until_failure([&](std::uint64_t round) {
    const auto wrong = round_trip(p, metas, model, opt, round, Mode::zero_copy);
    if (wrong != 0) FAIL("round " << round << ": " << wrong << " wrong bytes");
  });
  say(ws_test::describe(end, "consumer"));
  CHECK(end.seconds_after_last_ok < 10.0 + 2.0);
  CHECK(!p.t.healthy());
}

TEST_CASE("p2p round trips GPU 0 -> GPU 1: dense8b full size and mixed, views and zero-copy",
          "[gpu][ipc][multi_gpu]") {
  if (ws_test::ran_as_parent_on_distinct_gpus(2, 240s)) return;
  Peer p = connect_peer(Kind::p2p);
  REQUIRE(p.device == p.rank);
  std::uint64_t round = 0;
  {
    const auto metas = layouts::dense8b();
    ws_test::DeviceModel model(metas, p.device);
    for (Mode mode : {Mode::zero_copy, Mode::views}) {
      TransferOptions opt;
      REQUIRE(round_trip(p, metas, model, opt, ++round, mode) == 0);
    }
    say(detail::cat("dense8b: ", model.bytes(), " bytes verified twice; ", stats_line(p)));
  }
  const auto metas = ws_test::mixed_layout();
  ws_test::DeviceModel model(metas, p.device, 4096);
  for (bool exported : {true, false}) {
    p.t.options().export_sources = exported;
    for (Mode mode : {Mode::views, Mode::zero_copy}) {
      TransferOptions opt;
      opt.buffer_size_bytes = 8 << 20;
      opt.num_buffers = 2;
      INFO("exported " << exported << ", mode " << int(mode));
      REQUIRE(round_trip(p, metas, model, opt, ++round, mode) == 0);
    }
  }
  say(stats_line(p));
}

TEST_CASE("ipc refuses peers on two GPUs, p2p and ipc refuse each other", "[gpu][ipc][multi_gpu]") {
  if (ws_test::ran_as_parent_on_distinct_gpus(2, 120s)) return;
  const auto& r = ws_test::role();
  const int device = r.rank;
  detail::check(cudaSetDevice(device), "cudaSetDevice");
  RendezvousOptions o;
  o.port = r.port;
  o.rank = r.rank;
  o.world_size = 2;
  IpcOptions io;
  io.same_gpu = true;
  IpcTransport t(o, device, io, 30s);
  const auto metas = layouts::small1b();
  ws_test::DeviceModel model(metas, device);
  const auto model_items = ws_test::ModelSource{metas, model}.iterate();
  TransferOptions opt;
  for (bool consumer_p2p : {false, true}) {
    if (r.rank == 1) t.options().same_gpu = !consumer_p2p;
    std::string what;
    try {
      if (r.rank == 0)
        t.send(metas, model_items, opt);
      else
        t.receive(metas, opt, [](std::span<const TensorView>, cudaStream_t) {});
      FAIL("the transfer was not refused");
    } catch (const protocol_error& e) {
      what = e.what();
    }
    say("rank " + std::to_string(r.rank) + ": " + what);
    CHECK(what.find(consumer_p2p ? "the producer uses the ipc backend, this consumer p2p"
                                 : "needs one GPU") != std::string::npos);
    CHECK(t.healthy());
  }
}

TEST_CASE("ipc and p2p engines: trainer and worker rounds through the registry",
          "[gpu][ipc][engine]") {
  if (ws_test::ran_as_parent(1, 120s)) return;
  const auto& r = ws_test::role();
  std::vector<std::string> backends = {"ipc"};
  if (device_count() >= 2) backends.push_back("p2p");
  for (std::size_t b = 0; b < backends.size(); ++b) {
    const std::string& backend = backends[b];
    const int device = backend == "ipc" ? 0 : r.rank;
    detail::check(cudaSetDevice(device), "cudaSetDevice");
    const NcclInitInfo info = ws_test::loopback_init_info(r.port + static_cast<int>(b), 2);
    const EngineOptions eo = ws_test::gpu_engine_options(backend, device, 30s);
    const auto metas = layouts::small1b();
    ws_test::DeviceModel model(metas, device);
    CudaStream s(device);
    if (r.rank == 0) {
      TrainerEngine t(ws_test::options_for<TrainerEngine>(eo));
      t.trainer_init(info);
      const ws_test::ModelSource src{metas, model};
      for (int round = 1; round <= 3; ++round) {
        ws_test::fill_now(model, static_cast<std::uint64_t>(round), s.get());
        t.send_weights(src);
      }
      continue;
    }
    WeightTransferEngine e(ws_test::options_for<WeightTransferEngine>(eo));
    e.init_transfer_engine(info);
    const auto u = NcclUpdateInfo::from_metas(metas);
    for (int round = 1; round <= 3; ++round) {
      ws_test::poison_now(model, s.get());
      e.start_weight_update();
      ws_test::update_half_in_place(e, u, metas, model);
      e.finish_weight_update("v" + std::to_string(round));
      REQUIRE(model.count_wrong(static_cast<std::uint64_t>(round), s.get()) == 0);
    }
    say("engine rounds over " + backend + " ok: version " + e.weight_version());
  }
}

namespace {

// Sharded syncs. `dim1`: every third matrix split along dim 1 (strided pieces); otherwise matrices
// split along dim 0 (torch.chunk over the 2 trainer ranks); vectors whole on rank i % 2; or, when
// not sharded, everything whole on rank 0.
std::vector<ShardSpec> shard_specs(const std::vector<TensorMeta>& metas, bool sharded, bool dim1) {
  std::vector<ShardSpec> specs(metas.size());
  if (!sharded) return specs;
  for (std::size_t i = 0; i < metas.size(); ++i) {
    if (metas[i].shape.size() == 2)
      specs[i].dim = dim1 && i % 3 == 1 ? 1 : 0;
    else
      specs[i].ranks = {static_cast<int>(i % 2)};
  }
  return specs;
}

// A trainer rank's local shards, cut from a full model: its pieces of each tensor, dense.
struct LocalShards {
  DeviceBuffer arena;
  std::vector<SourceTensorRef> items;
};

// Cuts into `out`, allocating its arena on the first call only (the same memory every round, as a
// trainer's parameters are).
void cut_shards(LocalShards& out, const std::vector<TensorMeta>& metas,
                const std::vector<ShardSpec>& specs, const ws_test::DeviceModel& full, int rank,
                int device, cudaStream_t s) {
  out.items.clear();
  std::vector<std::size_t> off(metas.size(), 0);
  std::vector<char> has(metas.size(), 0);
  std::size_t bytes = 0;
  for (std::size_t i = 0; i < metas.size(); ++i) {
    off[i] = bytes;
    for (const auto& p : shard_pieces(metas[i], i, specs[i], 2))
      if (p.rank == rank) {
        has[i] = 1;
        bytes += p.bytes();
      }
    bytes = (bytes + 255) / 256 * 256;
  }
  const std::size_t page = ws_test::DeviceModel::kPage;
  if (out.arena.size() == 0)
    out.arena = DeviceBuffer(std::max<std::size_t>((bytes + page - 1) / page * page, page), device);
  for (std::size_t i = 0; i < metas.size(); ++i) {
    if (!has[i]) continue;
    std::size_t at = off[i];
    for (const auto& p : shard_pieces(metas[i], i, specs[i], 2)) {
      if (p.rank != rank || p.bytes() == 0) continue;
      detail::check(
          cudaMemcpy2DAsync(out.arena.data() + at, p.block_bytes, full.data(i) + p.offset, p.pitch,
                            p.block_bytes, p.blocks, cudaMemcpyDeviceToDevice, s),
          "cudaMemcpy2DAsync");
      at += p.bytes();
    }
    out.items.push_back({&metas[i], out.arena.data() + off[i]});
  }
  detail::check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
}

// Every rank has heard from every rank: a barrier over the control channel.
void barrier(IpcTransport& t) {
  for (int r = 0; r < t.size(); ++r) {
    std::uint8_t b = 1;
    t.control().broadcast(&b, 1, r);
  }
}

// One sharded round on 2 trainer ranks (0, 1) and 2 workers (2, 3). Workers: returns the wall time
// in ms; throws when a byte is wrong.
double sharded_round(IpcTransport& t, const std::vector<TensorMeta>& metas,
                     const std::vector<ShardSpec>& specs, ws_test::DeviceModel& model,
                     LocalShards& shards, std::uint64_t round, bool views, cudaStream_t s) {
  const int rank = t.rank();
  TransferOptions opt;
  opt.timeout = 20s;
  if (rank < 2) {
    model.fill(round, s);
    cut_shards(shards, metas, specs, model, rank, t.device(), s);
  } else {
    model.poison(s);
    detail::check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  }
  barrier(t);
  const auto t0 = std::chrono::steady_clock::now();
  auto index = [&](const TensorMeta& m) { return static_cast<std::size_t>(&m - metas.data()); };
  if (rank < 2) {
    send_shards(t, metas, specs, 2, shards.items, opt);
    return 0;
  }
  if (!views) opt.destination = [&](const TensorMeta& m) -> void* { return model.data(index(m)); };
  receive_shards(t, metas, specs, 2, opt, [&](std::span<const TensorView> batch, cudaStream_t ls) {
    for (const auto& v : batch)
      if (v.nbytes)
        detail::check(cudaMemcpyAsync(model.data(index(*v.meta)), v.data, v.nbytes,
                                      cudaMemcpyDeviceToDevice, ls),
                      "cudaMemcpyAsync");
  });
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const auto wrong = model.count_wrong(round, s);
  if (wrong) throw std::runtime_error(detail::cat("round ", round, ": ", wrong, " wrong bytes"));
  return ms;
}

// Uneven dim-1 pieces (1024 + l columns over 2 ranks) and odd tensors, with and without
// destinations: 4 rounds, every one bit-exact.
void sharded_mixed_rounds(IpcTransport& t, int device, cudaStream_t s) {
  const auto metas = ws_test::mixed_layout();
  ws_test::DeviceModel model(metas, device, 4096);
  const auto specs = shard_specs(metas, true, true);
  LocalShards shards;
  for (std::uint64_t round = 1; round <= 4; ++round) {
    sharded_round(t, metas, specs, model, shards, round, round % 2 == 0, s);
    say(detail::cat("rank ", t.rank(), ": mixed layout round ", round, " bit-exact"));
  }
}

// The parent side of the 4-process sharded tests: every peer must exit 0.
void run_sharded_peers(const char* name) {
  const auto results = ws_test::run_peers(name, 4, ws_test::free_port(), "", 150s);
  for (std::size_t i = 0; i < results.size(); ++i) {
    INFO("rank " << i << " exit " << results[i].exit_code << (results[i].hung ? " (hung)" : "")
                 << " after " << results[i].seconds << " s\n"
                 << results[i].output);
    CHECK(results[i].exit_code == 0);
  }
  for (const auto& res : results) std::printf("%s", res.output.c_str());
}

IpcTransport sharded_peer(int device, bool same_gpu) {
  const auto& r = ws_test::role();
  detail::check(cudaSetDevice(device), "cudaSetDevice");
  RendezvousOptions o;
  o.port = r.port;
  o.rank = r.rank;
  o.world_size = 4;
  o.timeout = 60s;
  IpcOptions io;
  io.same_gpu = same_gpu;
  return IpcTransport(o, device, io, 20s);
}

}  // namespace

TEST_CASE("ipc sharded: two trainer ranks and two workers on one GPU, mixed layout bit-exact",
          "[gpu][ipc][sharded]") {
  const char* name =
      "ipc sharded: two trainer ranks and two workers on one GPU, mixed layout bit-exact";
  if (!ws_test::role().is_peer()) return run_sharded_peers(name);
  IpcTransport t = sharded_peer(0, true);
  CudaStream stream(0);
  sharded_mixed_rounds(t, 0, stream.get());
  CHECK(t.healthy());
}

TEST_CASE("p2p sharded: trainer shards on GPU 0 and 1, a worker on each, dense8b bit-exact",
          "[gpu][ipc][sharded]") {
  const char* name =
      "p2p sharded: trainer shards on GPU 0 and 1, a worker on each, dense8b bit-exact";
  if (!ws_test::role().is_peer()) {
    if (device_count() < 2)
      WS_SKIP("needs 2 distinct GPUs (copy engines between devices), found "
              << device_count() << "; shared-GPU mode cannot stand in for this one");
    return run_sharded_peers(name);
  }
  const auto& r = ws_test::role();
  const int device = r.rank % 2;  // trainers 0, 1 and workers 2, 3 on GPU 0, 1
  IpcTransport t = sharded_peer(device, false);
  CudaStream stream(device);
  sharded_mixed_rounds(t, device, stream.get());
  // dense8b: shards on both GPUs against everything from rank 0 (GPU 0), same processes.
  const auto metas = layouts::dense8b();
  ws_test::DeviceModel model(metas, device);
  for (bool sharded : {true, false}) {
    const auto specs = shard_specs(metas, sharded, false);
    std::vector<double> ms;
    LocalShards shards;
    for (std::uint64_t round = 1; round <= 6; ++round)
      ms.push_back(sharded_round(t, metas, specs, model, shards, round, false, stream.get()));
    if (r.rank >= 2) {
      std::sort(ms.begin() + 1, ms.end());  // round 1 also maps the trainers' memory
      say(detail::cat("rank ", r.rank, " (GPU ", device, "): dense8b ",
                      sharded ? "sharded over trainer ranks 0 and 1" : "whole from trainer rank 0",
                      ": median ", ms[3], " ms over rounds 2-6 (round 1: ", ms[0],
                      " ms), every round bit-exact"));
    }
  }
  CHECK(t.healthy());
}
