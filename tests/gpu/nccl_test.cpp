// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// NCCL round trips across two processes on two GPUs. Each TEST_CASE runs twice: as the parent
// (spawns the peers, enforces the deadline, checks their exit codes) and, in the peers
// (--ws-rank), as rank 0 (producer) or rank 1 (consumer). Every tensor is compared bit-exactly on
// the device with what the producer generated; destinations are poisoned before every round.
#include <cstdint>
#include <weightsync/cuda/stream.hpp>
#include <weightsync/engine.hpp>
#include <weightsync/layouts.hpp>
#include <weightsync/nccl/communicator.hpp>
#include <weightsync/packed_broadcast.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "support/catch.hpp"
#include "support/gpu_model.hpp"
#include "support/process.hpp"
#include "support/role.hpp"
#include "support/spawn.hpp"
#include "support/survivor.hpp"

using namespace weightsync;
using namespace std::chrono_literals;

namespace {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

// Parent side: needs two GPUs, runs the peers, checks they all passed.
#define WS_RUN_PEERS(name, limit, ...)                                                         \
  do {                                                                                         \
    if (device_count() < 2) WS_SKIP("needs 2 GPUs, found " << device_count());                \
    const auto results = ws_test::run_peers(name, 2, ws_test::free_port(), "", limit, ##__VA_ARGS__); \
    for (std::size_t i = 0; i < results.size(); ++i) {                                         \
      INFO("rank " << i << " exit " << results[i].exit_code << (results[i].hung ? " (hung)" : "") \
                   << " after " << results[i].seconds << " s\n" << results[i].output);         \
      CHECK(results[i].exit_code == 0);                                                        \
    }                                                                                          \
  } while (0)

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
  RendezvousOptions o;
  o.address = "127.0.0.1";
  o.port = r.port;
  o.rank = r.rank;
  o.world_size = r.world;
  o.timeout = 60s;
  NcclOptions n;
  n.device = device;
  n.timeout = timeout;
  return Peer{r.rank, device, CudaStream(device), NcclCommunicator::connect(o, n)};
}

enum class Mode { views, zero_copy };

// One round. Returns the number of wrong bytes on the consumer (0 on the producer).
unsigned long long round_trip(Peer& p, const std::vector<TensorMeta>& metas,
                              const ws_test::DeviceModel& model, TransferOptions opt,
                              workspace_for<NcclCommunicator>& ws, std::uint64_t round, Mode mode) {
  const cudaStream_t s = p.stream.get();
  if (p.rank == 0) {
    model.fill(round, s);
    std::vector<SourceTensorRef> items;
    for (std::size_t i = 0; i < metas.size(); ++i) items.push_back({&metas[i], model.data(i)});
    opt.source_stream = s;  // the producer orders its reads after the fill
    packed_broadcast_producer(metas, items, p.comm, 0, opt, ws);
    return 0;
  }
  model.poison(s);
  detail::check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  auto index = [&](const TensorMeta* m) { return static_cast<std::size_t>(m - metas.data()); };
  if (mode == Mode::zero_copy)
    opt.destination = [&](const TensorMeta& m) -> void* { return model.data(index(&m)); };
  packed_broadcast_consumer(
      metas, p.comm, 0,
      [&](std::span<const TensorView> batch, cudaStream_t stream) {
        for (const auto& v : batch)  // what vLLM's load_weights does: copy into the parameter
          if (v.nbytes)
            detail::check(cudaMemcpyAsync(model.data(index(v.meta)), v.data, v.nbytes,
                                          cudaMemcpyDeviceToDevice, stream),
                          "cudaMemcpyAsync");
      },
      opt, ws);
  return model.count_wrong(round, s);
}

void say(const std::string& s) {
  std::printf("%s\n", s.c_str());
  std::fflush(stdout);
}

}  // namespace

TEST_CASE("nccl round trips: packed and unpacked - K 1-3 - several B - views and zero-copy",
          "[gpu][nccl][multi_gpu]") {
  if (!ws_test::role().is_peer()) {
    WS_RUN_PEERS("nccl round trips: packed and unpacked - K 1-3 - several B - views and zero-copy", 300s);
    return;
  }
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
  if (p.rank == 1) say("verified " + std::to_string(verified) + " bytes in " + std::to_string(round) + " rounds");
}

TEST_CASE("nccl full-size dense8b and moe30b layouts", "[gpu][nccl][multi_gpu]") {
  if (!ws_test::role().is_peer()) {
    WS_RUN_PEERS("nccl full-size dense8b and moe30b layouts", 540s);
    return;
  }
  Peer p = connect_peer();
  std::size_t verified = 0;
  for (const char* name : {"dense8b", "moe30b"}) {
    const auto metas = layouts::by_name(name);
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
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
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

TEST_CASE("nccl 100 back-to-back syncs keep device memory flat", "[gpu][nccl][multi_gpu]") {
  if (!ws_test::role().is_peer()) {
    WS_RUN_PEERS("nccl 100 back-to-back syncs keep device memory flat", 300s);
    return;
  }
  Peer p = connect_peer();
  const auto metas = layouts::small1b();
  ws_test::DeviceModel model(metas, p.device);
  workspace_for<NcclCommunicator> ws(CudaPolicy(p.device));
  TransferOptions opt;
  opt.buffer_size_bytes = 256 << 20;
  std::size_t free_after_first = 0, total = 0;
  for (int round = 1; round <= 100; ++round) {
    REQUIRE(round_trip(p, metas, model, opt, ws, static_cast<std::uint64_t>(round),
                       round % 2 ? Mode::views : Mode::zero_copy) == 0);
    std::size_t free_now = 0;
    detail::check(cudaMemGetInfo(&free_now, &total), "cudaMemGetInfo");
    if (round == 1) free_after_first = free_now;
    INFO("round " << round);
    REQUIRE(free_now == free_after_first);
  }
  say("rank " + std::to_string(p.rank) + ": free device memory " + std::to_string(free_after_first) +
      " bytes after round 1 and after round 100");
}

TEST_CASE("nccl producer killed mid-transfer: the consumer fails within the deadline",
          "[gpu][nccl][multi_gpu]") {
  if (!ws_test::role().is_peer()) {
    if (device_count() < 2) WS_SKIP("needs 2 GPUs, found " << device_count());
    // Rank 0 is killed 8 s after start (rendezvous, init and a few rounds are done by then).
    const auto r = ws_test::run_peers("nccl producer killed mid-transfer: the consumer fails within the deadline",
                                      2, ws_test::free_port(), "", 120s, 0, 8000ms);
    INFO("rank 1 exit " << r[1].exit_code << " after " << r[1].seconds << " s\n" << r[1].output);
    CHECK((r[0].exit_code == -1 && !r[0].hung));  // SIGKILLed, as planned
    CHECK(r[1].exit_code == 0);                    // the consumer failed in time, as checked inside
    return;
  }
  Peer p = connect_peer(10s);
  const auto metas = layouts::dense8b();
  ws_test::DeviceModel model(metas, p.device);
  workspace_for<NcclCommunicator> ws(CudaPolicy(p.device));
  TransferOptions opt;
  opt.timeout = 10s;
  if (p.rank == 0) {
    for (std::uint64_t round = 1;; ++round) round_trip(p, metas, model, opt, ws, round, Mode::views);
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
    if (device_count() < 2) WS_SKIP("needs 2 GPUs, found " << device_count());
    const std::string uid_file = "/tmp/ws_uid_" + std::to_string(::getpid());
    const auto results = ws_test::run_peers("nccl unique-id mode round trip: weightsync and vllm wire",
                                            2, 0, uid_file, 120s);
    ::unlink(uid_file.c_str());
    for (std::size_t i = 0; i < results.size(); ++i) {
      INFO("rank " << i << "\n" << results[i].output);
      CHECK(results[i].exit_code == 0);
    }
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
  if (!ws_test::role().is_peer()) {
    WS_RUN_PEERS("nccl faults keep the communicator usable: bad item and failing load_weights", 120s);
    return;
  }
  Peer p = connect_peer(30s);
  const auto metas = ws_test::mixed_layout();
  ws_test::DeviceModel model(metas, p.device);
  workspace_for<NcclCommunicator> ws(CudaPolicy(p.device));
  TransferOptions opt;
  opt.buffer_size_bytes = 8 << 20;
  // 1. The producer offers a tensor of the wrong dtype.
  if (p.rank == 0) {
    std::vector<SourceTensorRef> items;
    for (std::size_t i = 0; i < metas.size(); ++i) items.push_back({&metas[i], model.data(i)});
    TensorMeta lie = metas[20];
    lie.dtype = DType::float16;
    items[20].meta_ = &lie;
    REQUIRE_THROWS_AS(packed_broadcast_producer(metas, items, p.comm, 0, opt, ws), config_error);
  } else {
    try {
      packed_broadcast_consumer(metas, p.comm, 0, [](std::span<const TensorView>, cudaStream_t) {}, opt, ws);
      FAIL("the consumer did not see the producer's failure");
    } catch (const remote_error& e) {
      CHECK(std::string(e.what()).find("dtype float16 where bfloat16 was declared") != std::string::npos);
    }
  }
  REQUIRE(p.comm.healthy());
  REQUIRE(round_trip(p, metas, model, opt, ws, 1, Mode::views) == 0);
  // 2. The consumer's load_weights throws.
  if (p.rank == 0) {
    model.fill(2, p.stream.get());
    std::vector<SourceTensorRef> items;
    for (std::size_t i = 0; i < metas.size(); ++i) items.push_back({&metas[i], model.data(i)});
    opt.source_stream = p.stream.get();
    REQUIRE_THROWS_AS(packed_broadcast_producer(metas, items, p.comm, 0, opt, ws), remote_error);
    opt.source_stream = nullptr;
  } else {
    REQUIRE_THROWS_WITH(
        packed_broadcast_consumer(metas, p.comm, 0,
                                  [](std::span<const TensorView>, cudaStream_t) {
                                    throw std::runtime_error("out of patience");
                                  },
                                  opt, ws),
        "out of patience");
  }
  REQUIRE(p.comm.healthy());
  REQUIRE(round_trip(p, metas, model, opt, ws, 3, Mode::zero_copy) == 0);
}

TEST_CASE("nccl engines: trainer and worker rounds with versions and a failing round",
          "[gpu][nccl][multi_gpu][engine]") {
  if (!ws_test::role().is_peer()) {
    WS_RUN_PEERS("nccl engines: trainer and worker rounds with versions and a failing round", 180s);
    return;
  }
  const auto& r = ws_test::role();
  const int device = r.rank % device_count();
  detail::check(cudaSetDevice(device), "cudaSetDevice");
  NcclInitInfo info;
  info.master_address = "127.0.0.1";
  info.master_port = r.port;
  info.world_size = 2;
  info.rank_offset = 1;
  info.packed = true;
  info.packed_buffer_size_bytes = 256 << 20;
  EngineOptions eo;
  eo.backend = "nccl";
  eo.device = device;
  eo.timeout = 30s;
  const auto metas = layouts::small1b();
  ws_test::DeviceModel model(metas, device);
  CudaStream s(device);
  if (r.rank == 0) {
    TrainerEngine::Options o;
    o.engine = eo;
    TrainerEngine t(o);
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
      model.fill(static_cast<std::uint64_t>(round), s.get());
      detail::check(cudaStreamSynchronize(s.get()), "sync");
      src.lie = round == 2 ? 100 : -1;
      if (round == 2)
        REQUIRE_THROWS_AS(t.send_weights(src), config_error);
      else
        t.send_weights(src);
    }
    return;
  }
  WeightTransferEngine::Options o;
  o.engine = eo;
  WeightTransferEngine e(o);
  e.init_transfer_engine(info);
  const auto u = NcclUpdateInfo::from_metas(metas);
  for (int round = 1; round <= 3; ++round) {
    model.poison(s.get());
    detail::check(cudaStreamSynchronize(s.get()), "sync");
    e.start_weight_update();
    auto run = [&] {
      // every other tensor straight into its parameter, the rest through load_weights
      e.update_weights(u, ws_test::copy_into(metas, model), [&](const TensorMeta& m) -> void* {
        const auto i = ws_test::index_of(metas, m);
        return i % 2 ? model.data(i) : nullptr;
      });
    };
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
