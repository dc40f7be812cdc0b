// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Shadow mode on the CUDA path: a worker engine (WeightTransferEngine::Options::shadow) whose
// second copy is library-owned device memory (PolicyShadowMemory<CudaPolicy>), fed by a trainer
// engine over nccl (two processes; on one GPU they share it through NCCL's socket transport) and
// over ipc (both on GPU 0), with checksums on. A reader thread takes a snapshot after another for
// the whole run and checks each one bit-exactly against the version it names, on the device: the
// snapshots serve v while v+1 lands, a failed update (the trainer's item 20 is wrong, after
// earlier chunks landed in the shadow) leaves v serving, and the next update is served.
#include <weightsync/cuda/device_policy.hpp>
#include <weightsync/cuda/stream.hpp>
#include <weightsync/engine.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "support/catch.hpp"
#include "support/cuda_pattern.hpp"
#include "support/engine_options.hpp"
#include "support/gpu_model.hpp"
#include "support/gpu_peers.hpp"
#include "support/gpu_round.hpp"
#include "support/host_world.hpp"
#include "support/role.hpp"

using namespace weightsync;
using namespace std::chrono_literals;

namespace ws_test_shadow_gpu {

constexpr std::size_t kLie = 20;  // the tensor the trainer offers with a wrong dtype in round 3

// A trainer's source whose item kLie has the wrong dtype when `lie` is set.
struct LyingSource {
  const std::vector<TensorMeta>& declared;
  const ws_test::DeviceModel& model;
  bool lie = false;
  TensorMeta wrong;
  std::vector<TensorMeta> metas() const { return declared; }
  std::vector<SourceTensorRef> iterate() {
    auto v = ws_test::ModelSource{declared, model}.iterate();
    if (lie) {
      wrong = declared[kLie];
      wrong.dtype = DType::float16;
      v[kLie].meta_ = &wrong;
    }
    return v;
  }
};

// Reads snapshots until told to stop, checking each against its version's pattern.
struct Reader {
  const std::vector<TensorMeta>& metas;
  WeightTransferEngine& e;
  int device;
  std::atomic<bool> stop{false};
  std::atomic<bool> syncing{false};
  std::atomic<unsigned long long> reads{0}, reads_during_sync{0}, wrong{0}, unknown{0};
  std::atomic<long long> longest_acquire_ns{0};

  static std::uint64_t round_of(const std::string& v) {
    return v == "default" ? 0 : std::stoull(v.substr(1));
  }
  void run() {
    detail::check(cudaSetDevice(device), "cudaSetDevice");
    CudaStream s(device);
    unsigned long long* counter = nullptr;
    detail::check(cudaMalloc(reinterpret_cast<void**>(&counter), 8), "cudaMalloc");
    while (!stop.load()) {
      const bool during = syncing.load();
      const auto t0 = std::chrono::steady_clock::now();
      const auto snap = e.acquire();
      const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now() - t0)
                          .count();
      longest_acquire_ns = std::max<long long>(longest_acquire_ns.load(), ns);
      if (snap->version().empty() || (snap->version() != "default" && snap->version()[0] != 'v')) {
        ++unknown;
        continue;
      }
      const std::uint64_t round = round_of(snap->version());
      detail::check(cudaMemsetAsync(counter, 0, 8, s.get()), "cudaMemsetAsync");
      for (std::size_t i = 0; i < metas.size(); ++i) {
        const auto& p = snap->at(metas[i].name);
        ws_pattern::count_wrong(p.data, p.nbytes(), ws_test::tensor_seed(round, i), counter, s.get());
      }
      unsigned long long host = 0;
      detail::check(cudaMemcpyAsync(&host, counter, 8, cudaMemcpyDeviceToHost, s.get()), "D2H");
      detail::check(cudaStreamSynchronize(s.get()), "cudaStreamSynchronize");
      wrong += host;
      ++reads;
      if (during && syncing.load()) ++reads_during_sync;
    }
    cudaFree(counter);
  }
};

void run(const std::string& backend) {
  const auto& r = ws_test::role();
  const int device = backend == "ipc" ? 0 : r.rank % ws_test::device_count();
  detail::check(cudaSetDevice(device), "cudaSetDevice");
  const NcclInitInfo info = ws_test::loopback_init_info(r.port, 2);
  EngineOptions eo = ws_test::gpu_engine_options(backend, device, 60s);
  eo.acknowledge = Acknowledge::each_transfer;
  eo.checksum = true;
  const auto metas = ws_test::mixed_layout();
  ws_test::DeviceModel model(metas, device);
  CudaStream s(device);
  if (r.rank == 0) {
    TrainerEngine t(ws_test::options_for<TrainerEngine>(eo));
    t.trainer_init(info);
    for (std::uint64_t round = 1; round <= 4; ++round) {
      ws_test::fill_now(model, round, s.get());
      LyingSource src{metas, model, round == 3, {}};
      if (round == 3)
        REQUIRE_THROWS_AS(t.send_weights(src), config_error);
      else
        t.send_weights(src);
    }
    return;
  }
  auto wo = ws_test::options_for<WeightTransferEngine>(eo);
  wo.shadow.enabled = true;
  wo.shadow.memory = std::make_shared<PolicyShadowMemory<CudaPolicy>>(CudaPolicy(device), "cuda");
  WeightTransferEngine e(wo);
  e.init_transfer_engine(info);
  ws_test::fill_now(model, 0, s.get());  // version "default" is round 0's pattern
  std::vector<ShadowParameter> table;
  for (std::size_t i = 0; i < metas.size(); ++i) table.push_back({metas[i], model.data(i), nullptr});
  e.register_parameters(table);
  REQUIRE(e.shadow_extra_bytes() >= model.bytes());
  Reader reader{metas, e, device};
  std::thread th([&] { reader.run(); });
  const auto u = NcclUpdateInfo::from_metas(metas);
  auto nothing = [](std::span<const TensorView>, void*) {
    throw std::runtime_error("every tensor is registered: nothing goes to load_weights");
  };
  std::string failure;
  for (std::uint64_t round = 1; round <= 4; ++round) {
    e.start_weight_update();
    reader.syncing = true;
    bool failed = false;
    try {
      e.update_weights(u, nothing);
    } catch (const remote_error& ex) {
      failed = true;
      failure = ex.what();
    }
    reader.syncing = false;
    if (!failed) e.finish_weight_update("v" + std::to_string(round));
    INFO("round " << round << ": " << failure);
    CHECK(failed == (round == 3));
    const std::string want = round == 3 ? "v2" : "v" + std::to_string(round);
    CHECK(e.acquire()->version() == want);
    CHECK(e.weight_version() == want);
  }
  // the reader sees the last version for a while too
  std::this_thread::sleep_for(200ms);
  reader.stop = true;
  th.join();
  CHECK(failure.find("dtype float16 where bfloat16 was declared") != std::string::npos);
  ws_test::say("[ws-test] " + backend + " shadow: " + std::to_string(reader.reads.load()) + " snapshots read (" +
               std::to_string(reader.reads_during_sync.load()) + " during syncs), " +
               std::to_string(reader.wrong.load()) + " wrong bytes, longest acquire " +
               std::to_string(reader.longest_acquire_ns.load() / 1000) + " us");
  CHECK(reader.wrong == 0);
  CHECK(reader.unknown == 0);
  CHECK(reader.reads > 0);
}

}  // namespace ws_test_shadow_gpu

TEST_CASE("shadow mode on the GPU over nccl: snapshots serve v while v+1 lands, a failed update "
          "leaves v serving, bit-exact",
          "[gpu][nccl][multi_gpu][shadow]") {
  if (ws_test::ran_as_parent_reporting(2, 300s)) return;
  ws_test_shadow_gpu::run("nccl");
}

TEST_CASE("shadow mode on the GPU over ipc: snapshots serve v while v+1 lands, a failed update "
          "leaves v serving, bit-exact",
          "[gpu][ipc][shadow]") {
  if (ws_test::ran_as_parent_reporting(1, 300s)) return;
  ws_test_shadow_gpu::run("ipc");
}
