// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// NCCL round trips across two processes, on two GPUs or sharing one (support/gpu_peers.hpp:
// GpuSharing; NCCL's socket transport then). Each TEST_CASE runs twice: as the parent
// (spawns the peers, enforces the deadline, checks their exit codes) and, in the peers
// (--ws-rank), as rank 0 (producer) or rank 1 (consumer). Every tensor is compared bit-exactly on
// the device with what the producer generated; destinations are poisoned before every round.
#include <cstdint>
#include <weightsync/cuda/device_buffer.hpp>
#include <weightsync/cuda/stream.hpp>
#include <weightsync/engine.hpp>
#include <weightsync/host/communicator.hpp>
#include <weightsync/nccl/backend.hpp>
#include <weightsync/layouts.hpp>
#include <weightsync/nccl/communicator.hpp>
#include <weightsync/packed_broadcast.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
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

struct Peer {
  int rank;
  int device;
  CudaStream stream;
  NcclCommunicator comm;
};

Peer connect_peer(std::chrono::milliseconds timeout = 60s) {
  const auto& r = ws_test::role();
  const int device = r.rank % device_count();
  detail::check(cudaSetDevice(device), "cudaSetDevice");
  NcclOptions n;
  n.device = device;
  n.timeout = timeout;
  return Peer{r.rank, device, CudaStream(device),
              NcclCommunicator::connect(ws_test::peer_rendezvous(), n)};
}

// One round. Returns the number of wrong bytes on the consumer (0 on the producer).
unsigned long long round_trip(Peer& p, const std::vector<TensorMeta>& metas,
                              const ws_test::DeviceModel& model, TransferOptions opt,
                              workspace_for<NcclCommunicator>& ws, std::uint64_t round, Mode mode) {
  const cudaStream_t s = p.stream.get();
  if (p.rank == 0) {
    ws_test::send_round(metas, model, opt, s, round, [&](const auto& items, const auto& o) {
      packed_broadcast_producer(metas, items, p.comm, 0, o, ws);
    });
    return 0;
  }
  return ws_test::receive_round(metas, model, opt, s, round, mode, [&](const auto& o, auto load) {
    packed_broadcast_consumer(metas, p.comm, 0, load, o, ws);
  });
}

}  // namespace

TEST_CASE("nccl round trips: packed and unpacked - K 1-3 - several B - views and zero-copy",
          "[gpu][nccl][multi_gpu]") {
  if (ws_test::ran_as_parent(2, 300s)) return;
  Peer p = connect_peer();
  const auto metas = ws_test::mixed_layout();
  ws_test::DeviceModel model(metas, p.device);
  workspace_for<NcclCommunicator> ws(CudaPolicy(p.device));
  std::uint64_t round = 0;
  std::size_t verified = 0;
  for (bool packed : {true, false})
    for (int k : {1, 2, 3})
      for (std::size_t b : {std::size_t{4} << 10, std::size_t{1} << 20, std::size_t{64} << 20,
                            std::size_t{1} << 30})
        for (Mode mode : {Mode::views, Mode::zero_copy}) {
          if (!packed && b != (std::size_t{4} << 10)) continue;
          TransferOptions opt;
          opt.packed = packed;
          opt.num_buffers = k;
          opt.buffer_size_bytes = b;
          const auto wrong = round_trip(p, metas, model, opt, ws, ++round, mode);
          INFO("packed " << packed << " K " << k << " B " << b << " zero-copy "
                         << (mode == Mode::zero_copy));
          REQUIRE(wrong == 0);
          verified += model.bytes();
        }
  if (p.rank == 1)
    say("verified " + std::to_string(verified) + " bytes in " + std::to_string(round) + " rounds");
}

TEST_CASE("nccl full-size dense8b and moe30b layouts", "[gpu][nccl][multi_gpu]") {
  if (ws_test::ran_as_parent(2, 540s)) return;
  Peer p = connect_peer();
  std::size_t verified = 0;
  for (const char* name : {"dense8b", "moe30b"}) {
    const auto metas = layouts::by_name(name);
    const std::size_t need =
        layouts::total_bytes(metas) + (std::size_t{6} << 30);  // model + ring + NCCL
    if (ws_test::peer_shares_gpu()) {
      // Both ranks hold the model on one device: say so where it cannot fit (an 80 GB H100 and
      // moe30b), on both ranks alike, rather than fail with an out-of-memory error.
      std::size_t free_b = 0, total_b = 0;
      detail::check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
      if (total_b < 2 * need) {
        say(std::string(name) + ": NOT RUN on this device: 2 ranks x " + std::to_string(need) +
            " bytes do not fit in " + std::to_string(total_b));
        continue;
      }
    }
    ws_test::DeviceModel model(metas, p.device);
    workspace_for<NcclCommunicator> ws(CudaPolicy(p.device));
    struct Case {
      bool packed;
      Mode mode;
    };
    std::vector<Case> cases = {{true, Mode::views}, {true, Mode::zero_copy}};
    if (std::string(name) == "dense8b") cases.push_back({false, Mode::zero_copy});
    std::uint64_t round = 100;
    for (const auto& c : cases) {
      TransferOptions opt;  // defaults: B = 1 GiB, K = 2
      opt.packed = c.packed;
      const auto t0 = std::chrono::steady_clock::now();
      const auto wrong = round_trip(p, metas, model, opt, ws, ++round, c.mode);
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      INFO(name << " packed " << c.packed << " zero-copy " << (c.mode == Mode::zero_copy));
      REQUIRE(wrong == 0);
      verified += model.bytes();
      say(std::string(name) + (c.packed ? " packed" : " unpacked") +
          (c.mode == Mode::zero_copy ? " zero-copy" : " views") + ": " +
          std::to_string(model.bytes()) + " bytes, " + std::to_string(metas.size()) +
          " tensors, round incl. fill/poison " + std::to_string(ms) + " ms");
    }
  }
  if (p.rank == 1) say("verified " + std::to_string(verified) + " bytes bit-exact");
}

// Both ranks stop at the same point: an all-reduce, waited for on the host. (A broadcast would not
// do: its root may complete as soon as its bytes are sent, before the other rank arrives.)
void barrier(Peer& p, void* word) {
  p.comm.all_reduce(word, word, 1, ncclFloat32, ncclSum, p.stream.get());
  p.comm.synchronize(p.stream.get());
}

TEST_CASE("nccl 100 back-to-back syncs keep device memory flat", "[gpu][nccl][multi_gpu]") {
  if (ws_test::ran_as_parent(2, 300s)) return;
  Peer p = connect_peer();
  const auto metas = layouts::small1b();
  ws_test::DeviceModel model(metas, p.device);
  workspace_for<NcclCommunicator> ws(CudaPolicy(p.device));
  DeviceBuffer byte(sizeof(float), p.device);
  TransferOptions opt;
  opt.buffer_size_bytes = 256 << 20;
  // cudaMemGetInfo counts the whole GPU. When the ranks share it, each measures only while both
  // stand still between two barriers (after round 1 every allocation of both must be done): the
  // free memory is then flat only if neither rank's grows.
  std::size_t free_after_first = 0, total = 0;
  for (int round = 1; round <= 100; ++round) {
    REQUIRE(round_trip(p, metas, model, opt, ws, static_cast<std::uint64_t>(round),
                       round % 2 ? Mode::views : Mode::zero_copy) == 0);
    barrier(p, byte.data());
    std::size_t free_now = 0;
    detail::check(cudaMemGetInfo(&free_now, &total), "cudaMemGetInfo");
    barrier(p, byte.data());
    if (round == 1) free_after_first = free_now;
    INFO("round " << round);
    REQUIRE(free_now == free_after_first);
  }
  say("rank " + std::to_string(p.rank) + ": free device memory " +
      std::to_string(free_after_first) + " bytes after round 1 and after round 100" +
      (ws_test::peer_shares_gpu() ? " (shared GPU: both ranks' memory, measured at a barrier)"
                                  : ""));
}

TEST_CASE("nccl producer killed mid-transfer: the consumer fails within the deadline",
          "[gpu][nccl][multi_gpu]") {
  // Rank 0 is killed 8 s after start (rendezvous, init and a few rounds are done by then).
  if (ws_test::ran_as_parent_killing(2, 0, 8000ms, 120s)) return;
  Peer p = connect_peer(10s);
  const auto metas = layouts::dense8b();
  ws_test::DeviceModel model(metas, p.device);
  workspace_for<NcclCommunicator> ws(CudaPolicy(p.device));
  TransferOptions opt;
  opt.timeout = 10s;
  if (p.rank == 0) {
    for (std::uint64_t round = 1;; ++round)
      round_trip(p, metas, model, opt, ws, round, Mode::views);
  }  // killed by the parent after 8 s
  // Outside REQUIRE: Catch would swallow the exception this test waits for.
  const auto end = ws_test::until_failure([&](std::uint64_t round) {
    const auto wrong = round_trip(p, metas, model, opt, ws, round, Mode::zero_copy);
    if (wrong != 0) FAIL("round " << round << ": " << wrong << " wrong bytes");
  });
  say(ws_test::describe(end, "consumer"));
  CHECK(end.seconds_after_last_ok < 10.0 + 2.0);
  CHECK(!p.comm.healthy());
}

TEST_CASE("nccl unique-id mode round trip: weightsync and vllm wire", "[gpu][nccl][multi_gpu]") {
  if (!ws_test::role().is_peer()) {
    const std::string uid_file = "/tmp/ws_uid_" + std::to_string(::getpid());
    ws_test::run_peers_expect_ok(ws_test::current_test_name(), 2, 120s, 2, uid_file);
    ::unlink(uid_file.c_str());
    return;
  }
  const auto& r = ws_test::role();
  const int device = r.rank % device_count();
  detail::check(cudaSetDevice(device), "cudaSetDevice");
  std::string b64;
  if (r.rank == 0) {
    b64 = NcclUniqueId::generate().to_base64();
    std::ofstream(r.arg + ".tmp") << b64;
    std::rename((r.arg + ".tmp").c_str(), r.arg.c_str());
  } else {
    for (int i = 0; i < 3000 && b64.empty(); ++i) {
      std::ifstream f(r.arg);
      f >> b64;
      if (b64.empty()) std::this_thread::sleep_for(10ms);
    }
  }
  REQUIRE(b64.size() == 172);  // base64 of 128 bytes
  // What a trainer hands a vLLM server: the init info JSON with the unique id.
  NcclInitInfo info;
  info.nccl_unique_id_b64 = b64;
  info.rank_offset = 1;
  info.world_size = 2;
  info.validate();
  NcclOptions n;
  n.device = device;
  n.timeout = 60s;
  Peer p{r.rank, device, CudaStream(device),
         NcclCommunicator::init(NcclUniqueId::from_base64(*info.nccl_unique_id_b64), r.rank, 2, n)};
  const auto metas = ws_test::mixed_layout();
  ws_test::DeviceModel model(metas, p.device);
  workspace_for<NcclCommunicator> ws(CudaPolicy(p.device));
  std::uint64_t round = 0;
  for (Protocol proto : {Protocol::weightsync, Protocol::vllm})
    for (bool packed : {true, false}) {
      TransferOptions opt;
      opt.protocol = proto;
      opt.packed = packed;
      opt.buffer_size_bytes = 32 << 20;
      REQUIRE(round_trip(p, metas, model, opt, ws, ++round, Mode::views) == 0);
    }
}

TEST_CASE("nccl faults keep the communicator usable: bad item and failing load_weights",
          "[gpu][nccl][multi_gpu]") {
  if (ws_test::ran_as_parent(2, 120s)) return;
  Peer p = connect_peer(30s);
  const auto metas = ws_test::mixed_layout();
  ws_test::DeviceModel model(metas, p.device);
  workspace_for<NcclCommunicator> ws(CudaPolicy(p.device));
  TransferOptions opt;
  opt.buffer_size_bytes = 8 << 20;
  // 1. The producer offers a tensor of the wrong dtype.
  if (p.rank == 0) {
    auto items = ws_test::ModelSource{metas, model}.iterate();
    TensorMeta lie = metas[20];
    lie.dtype = DType::float16;
    items[20].meta_ = &lie;
    REQUIRE_THROWS_AS(packed_broadcast_producer(metas, items, p.comm, 0, opt, ws), config_error);
  } else {
    try {
      packed_broadcast_consumer(
          metas, p.comm, 0, [](std::span<const TensorView>, cudaStream_t) {}, opt, ws);
      FAIL("the consumer did not see the producer's failure");
    } catch (const remote_error& e) {
      CHECK(std::string(e.what()).find("dtype float16 where bfloat16 was declared") !=
            std::string::npos);
    }
  }
  REQUIRE(p.comm.healthy());
  REQUIRE(round_trip(p, metas, model, opt, ws, 1, Mode::views) == 0);
  // 2. The consumer's load_weights throws; with a per-transfer acknowledgement the producer learns
  // it in the same call.
  opt.acknowledge = Acknowledge::each_transfer;
  if (p.rank == 0) {
    model.fill(2, p.stream.get());
    const auto items = ws_test::ModelSource{metas, model}.iterate();
    opt.source_stream = p.stream.get();
    REQUIRE_THROWS_AS(packed_broadcast_producer(metas, items, p.comm, 0, opt, ws), remote_error);
    opt.source_stream = nullptr;
  } else {
    REQUIRE_THROWS_WITH(packed_broadcast_consumer(
                            metas, p.comm, 0,
                            [](std::span<const TensorView>, cudaStream_t) {
                              throw std::runtime_error("out of patience");
                            },
                            opt, ws),
                        "out of patience");
  }
  REQUIRE(p.comm.healthy());
  REQUIRE(round_trip(p, metas, model, opt, ws, 3, Mode::zero_copy) == 0);
}

// Syncs of at most 4 KiB travel inside the handshake (eager). NcclCommunicator exchanges the
// handshake and the acknowledgement in pinned host memory (PinnedHostCommunicator);
// WEIGHTSYNC_EXCHANGE=device (set in the peer before its first transfer reads it) keeps them on
// the device. Either way every byte arrives, views handed to load_weights are device memory, and a
// failing load_weights is reported through the acknowledgement.
static_assert(PinnedHostCommunicator<NcclCommunicator>);
static_assert(!PinnedHostCommunicator<HostCommunicator>);

// `wide`: 18 KiB in 104 tensors, more than a base handshake block holds: the first sync is a
// handshake and a data phase, every later one travels in wide blocks (WireState, protocol 8).
static void eager_rounds(const char* exchange, bool wide = false) {
  if (exchange != nullptr) ::setenv("WEIGHTSYNC_EXCHANGE", exchange, 1);
  Peer p = connect_peer(30s);
  std::vector<TensorMeta> metas = {{"embed", DType::bfloat16, {32, 32}},  // 2 KiB
                                   {"scalar", DType::float32, {}},
                                   {"empty", DType::float32, {0}},
                                   {"bias", DType::float16, {500}},
                                   {"mask", DType::int8, {7}}};
  if (wide) {
    metas[0].shape = {64, 64};  // 8 KiB
    for (int i = 0; i < 100; ++i)
      metas.push_back({"layers." + std::to_string(i) + ".norm", DType::bfloat16, {48}});
  }
  ws_test::DeviceModel model(metas, p.device);
  if (wide)
    REQUIRE((model.bytes() > detail::eager_capacity(2) &&
             model.bytes() <= detail::kWideEagerBytes));
  else
    REQUIRE(model.bytes() <= detail::eager_capacity(2));
  REQUIRE(p.comm.wire_state().wide_count == 0);
  workspace_for<NcclCommunicator> ws(CudaPolicy(p.device));
  const cudaStream_t s = p.stream.get();
  std::uint64_t round = 0;
  for (Acknowledge ack : {Acknowledge::next_transfer, Acknowledge::each_transfer})
    for (Mode mode : {Mode::views, Mode::zero_copy})
      for (int i = 0; i < 3; ++i) {
        TransferOptions opt;
        opt.acknowledge = ack;
        ++round;
        if (p.rank == 0) {
          ws_test::send_round(metas, model, opt, s, round, [&](const auto& items, const auto& o) {
            packed_broadcast_producer(metas, items, p.comm, 0, o, ws);
          });
          continue;
        }
        ws_test::poison_now(model, s);
        if (mode == Mode::zero_copy)
          opt.destination = [&](const TensorMeta& m) -> void* {
            return model.data(static_cast<std::size_t>(&m - metas.data()));
          };
        std::size_t views = 0, host_views = 0;
        packed_broadcast_consumer(
            metas, p.comm, 0,
            [&](std::span<const TensorView> batch, cudaStream_t stream) {
              for (const auto& v : batch) {
                if (v.nbytes == 0) continue;
                cudaPointerAttributes a{};
                detail::check(cudaPointerGetAttributes(&a, v.data), "cudaPointerGetAttributes");
                ++views;
                host_views += a.type != cudaMemoryTypeDevice;
                detail::check(cudaMemcpyAsync(model.data(static_cast<std::size_t>(v.meta - metas.data())),
                                              v.data, v.nbytes, cudaMemcpyDeviceToDevice, stream),
                              "cudaMemcpyAsync");
              }
            },
            opt, ws);
        INFO("exchange " << (exchange ? exchange : "default") << " round " << round << " mode "
                         << (mode == Mode::zero_copy ? "zero-copy" : "views"));
        CHECK(host_views == 0);
        CHECK(views == (mode == Mode::views ? metas.size() - 1 : 0u));
        REQUIRE(model.count_wrong(round, s) == 0);
        // (every rank passed the same handshakes: the producer's state is the same; wide: rank 0's
        // block alone)
        REQUIRE(p.comm.wire_state().wide_count == (wide ? 1 : 0));
      }
  // A load_weights that throws: the producer hears it in the same call (acknowledgement).
  TransferOptions opt;
  opt.acknowledge = Acknowledge::each_transfer;
  if (p.rank == 0) {
    model.fill(++round, s);
    opt.source_stream = s;
    REQUIRE_THROWS_AS(packed_broadcast_producer(metas, ws_test::ModelSource{metas, model}.iterate(),
                                                p.comm, 0, opt, ws),
                      remote_error);
  } else {
    ++round;
    REQUIRE_THROWS_WITH(packed_broadcast_consumer(
                            metas, p.comm, 0,
                            [](std::span<const TensorView>, cudaStream_t) {
                              throw std::runtime_error("no room");
                            },
                            opt, ws),
                        "no room");
  }
  REQUIRE(p.comm.healthy());
  opt = TransferOptions{};
  ++round;
  if (p.rank == 0) {
    ws_test::send_round(metas, model, opt, s, round, [&](const auto& items, const auto& o) {
      packed_broadcast_producer(metas, items, p.comm, 0, o, ws);
    });
  } else {
    REQUIRE(ws_test::receive_round(metas, model, opt, s, round, Mode::zero_copy,
                                   [&](const auto& o, auto load) {
                                     packed_broadcast_consumer(metas, p.comm, 0, load, o, ws);
                                   }) == 0);
    say("verified " + std::to_string(round) + (wide ? " wide" : "") + " eager rounds, exchange " +
        (exchange ? exchange : "in pinned host memory"));
  }
}

TEST_CASE("nccl eager syncs exchanged in pinned host memory: views and zero-copy, a failing load",
          "[gpu][nccl][multi_gpu]") {
  if (ws_test::ran_as_parent(2, 120s)) return;
  eager_rounds(nullptr);
}

TEST_CASE("nccl eager syncs exchanged on the device (WEIGHTSYNC_EXCHANGE=device)",
          "[gpu][nccl][multi_gpu]") {
  if (ws_test::ran_as_parent(2, 120s)) return;
  eager_rounds("device");
}

TEST_CASE("nccl syncs of 4 to 32 KiB travel in wide handshake blocks from the second on",
          "[gpu][nccl][multi_gpu]") {
  if (ws_test::ran_as_parent(2, 120s)) return;
  eager_rounds(nullptr, /*wide=*/true);
}

// A sync repeated with the same plan, sources and destinations relaunches the last eager pack and
// copy out from their descriptor table entries, without listing them (RepeatedBatch); changed
// sources or destinations are listed again. Producer's sources by round: A A B B A A A; the
// consumer's places: X X Y Y X, then views (load_weights) twice. A relaunch where a list was due
// would deliver the last round's bytes, or to the last round's places: every byte is checked.
// (CudaPolicy relaunches a batch from its descriptor table: it keeps no lists of its own.) The
// views' copy, of the eager bytes from pinned memory to the device, is one copy (the bytes lie
// back to back on both sides: Workspace::add_copy), which a launch passes by value: no table,
// nothing to relaunch, and listing one copy again costs nothing.
static_assert(!detail::WorkspaceState<CudaPolicy>::keeps_lists());

TEST_CASE("nccl repeated eager syncs relaunch their copies, changed sources or places list them again",
          "[gpu][nccl][multi_gpu]") {
  if (ws_test::ran_as_parent(2, 120s)) return;
  Peer p = connect_peer(30s);
  std::vector<TensorMeta> metas;
  for (int i = 0; i < 40; ++i)
    metas.push_back({"layers." + std::to_string(i) + ".norm", DType::bfloat16, {32}});
  ws_test::DeviceModel a(metas, p.device), b(metas, p.device);
  REQUIRE(a.bytes() <= detail::eager_capacity(2));
  workspace_for<NcclCommunicator> ws(CudaPolicy(p.device));
  const cudaStream_t s = p.stream.get();
  const char sources[] = "AABBAAA", places[] = "XXYYXVV";
  for (std::uint64_t round = 1; round <= 7; ++round) {
    TransferOptions opt;
    if (p.rank == 0) {
      const ws_test::DeviceModel& from = sources[round - 1] == 'A' ? a : b;
      ws_test::send_round(metas, from, opt, s, round, [&](const auto& items, const auto& o) {
        packed_broadcast_producer(metas, items, p.comm, 0, o, ws);
      });
      continue;
    }
    const char at = places[round - 1];
    const ws_test::DeviceModel& into = at == 'Y' ? b : a;
    const Mode mode = at == 'V' ? Mode::views : Mode::zero_copy;
    INFO("round " << round << ": into " << at);
    REQUIRE(ws_test::receive_round(metas, into, opt, s, round, mode,
                                   [&](const auto& o, auto load) {
                                     packed_broadcast_consumer(metas, p.comm, 0, load, o, ws);
                                   }) == 0);
  }
  REQUIRE(ws.policy().copy_table() != nullptr);
  const auto counts = ws.policy().copy_table()->counts();
  // The producer relaunched rounds 2, 4, 6 and 7; the consumer rounds 2 and 4 (its views'
  // one copy, rounds 6 and 7, went by value).
  CHECK(counts.repeated == (p.rank == 0 ? 4u : 2u));
  if (p.rank == 1) say("verified 7 eager rounds, " + std::to_string(counts.repeated) + " relaunched");
}

TEST_CASE("nccl engines: trainer and worker rounds with versions and a failing round",
          "[gpu][nccl][multi_gpu][engine]") {
  if (ws_test::ran_as_parent(2, 180s)) return;
  const auto& r = ws_test::role();
  const int device = r.rank % device_count();
  detail::check(cudaSetDevice(device), "cudaSetDevice");
  NcclInitInfo info = ws_test::loopback_init_info(r.port, 2);
  info.packed = true;
  info.packed_buffer_size_bytes = 256 << 20;
  const EngineOptions eo = ws_test::gpu_engine_options("nccl", device, 30s);
  const auto metas = layouts::small1b();
  ws_test::DeviceModel model(metas, device);
  CudaStream s(device);
  if (r.rank == 0) {
    TrainerEngine t(ws_test::options_for<TrainerEngine>(eo));
    t.trainer_init(info);
    struct Source {
      const std::vector<TensorMeta>& m;
      const ws_test::DeviceModel& d;
      int lie = -1;
      TensorMeta bad;
      std::vector<TensorMeta> metas() const { return m; }
      std::vector<SourceTensorRef> iterate() {
        std::vector<SourceTensorRef> v;
        for (std::size_t i = 0; i < m.size(); ++i) v.push_back({&m[i], d.data(i)});
        if (lie >= 0) {
          bad = m[static_cast<std::size_t>(lie)];
          bad.shape.push_back(1);
          v[static_cast<std::size_t>(lie)].meta_ = &bad;
        }
        return v;
      }
    } src{metas, model, -1, {}};
    for (int round = 1; round <= 3; ++round) {
      ws_test::fill_now(model, static_cast<std::uint64_t>(round), s.get());
      src.lie = round == 2 ? 100 : -1;
      if (round == 2)
        REQUIRE_THROWS_AS(t.send_weights(src), config_error);
      else
        t.send_weights(src);
    }
    return;
  }
  WeightTransferEngine e(ws_test::options_for<WeightTransferEngine>(eo));
  e.init_transfer_engine(info);
  const auto u = NcclUpdateInfo::from_metas(metas);
  for (int round = 1; round <= 3; ++round) {
    ws_test::poison_now(model, s.get());
    e.start_weight_update();
    auto run = [&] { ws_test::update_half_in_place(e, u, metas, model); };
    if (round == 2) {
      REQUIRE_THROWS_AS(run(), remote_error);
      REQUIRE(!e.updating());
      REQUIRE(e.weight_version() == "v1");
      continue;
    }
    run();
    e.finish_weight_update("v" + std::to_string(round));
    REQUIRE(model.count_wrong(static_cast<std::uint64_t>(round), s.get()) == 0);
  }
  REQUIRE(e.weight_version() == "v3");
  say("engine rounds ok: version " + e.weight_version() + ", " + std::to_string(model.bytes()) +
      " bytes verified per round");
}

TEST_CASE("nccl 1 trainer -> 3 workers as four processes: packed and unpacked, bit-exact",
          "[gpu][nccl][multi_gpu]") {
  if (ws_test::ran_as_parent(4, 300s, 4)) return;
  Peer p = connect_peer();
  REQUIRE(p.comm.size() == 4);
  std::uint64_t round = 0;
  for (const char* name : {"mixed", "small1b"}) {
    const auto metas = std::string(name) == "mixed" ? ws_test::mixed_layout() : layouts::small1b();
    ws_test::DeviceModel model(metas, p.device);
    workspace_for<NcclCommunicator> ws(CudaPolicy(p.device));
    for (bool packed : {true, false})
      for (Mode mode : {Mode::views, Mode::zero_copy}) {
        TransferOptions opt;
        opt.packed = packed;
        opt.num_buffers = packed ? 2 : 1;
        opt.buffer_size_bytes = std::size_t{64} << 20;
        INFO(name << " packed " << packed << " zero-copy " << (mode == Mode::zero_copy));
        REQUIRE(round_trip(p, metas, model, opt, ws, ++round, mode) == 0);
      }
    if (p.rank > 0)
      say("worker rank " + std::to_string(p.rank) + ": " + name + " 4 rounds bit-exact");
  }
}
