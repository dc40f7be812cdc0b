// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Serving during syncs (#31, shadow mode): a trainer engine and a worker engine over "ipc" on one
// GPU (two processes). The worker is in shadow mode (library-owned second copy on the device);
// a reader thread keeps taking snapshots and running a small "forward" on the GPU with each: the
// chunk-digest kernel over the first --forward-bytes of the snapshot's parameters (a memory-bound
// read of the weights, as a decode step is). Reported: the forward's time (CUDA events) while
// idle and while a sync lands, p50 and p99; the longest wait for a snapshot (acquire()); and the
// time from the worker's update landing (update_weights returned: its last byte pulled and
// checked) to the first forward on the new version. Every version served is checked bit-exactly
// against the trainer's pattern once published.
//
//   shadow_bench [--layout dense8b] [--syncs 10] [--forward-bytes MiB (1024)] [--idle-ms 200]
//                [--checksum off|on] [--json FILE]
#include <weightsync/cuda/check.hpp>
#include <weightsync/cuda/device_policy.hpp>
#include <weightsync/cuda/digest.hpp>
#include <weightsync/cuda/event.hpp>
#include <weightsync/cuda/stream.hpp>
#include <weightsync/engine.hpp>
#include <weightsync/ipc/backend.hpp>
#include <weightsync/layouts.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cuda_pattern.hpp"
#include "gpu_model.hpp"
#include "process.hpp"

namespace ws = weightsync;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  std::string layout = "dense8b";
  int syncs = 10;
  std::size_t forward_bytes = std::size_t{1} << 30;
  int idle_ms = 200;
  bool checksum = false;
  std::string json;
  int rank = -1;
  int port = 0;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(k + " needs a value");
      return argv[++i];
    };
    if (k == "--layout")
      a.layout = val();
    else if (k == "--syncs")
      a.syncs = std::stoi(val());
    else if (k == "--forward-bytes")
      a.forward_bytes = static_cast<std::size_t>(std::stod(val()) * (1 << 20)) ;
    else if (k == "--idle-ms")
      a.idle_ms = std::stoi(val());
    else if (k == "--checksum")
      a.checksum = val() == "on";
    else if (k == "--json")
      a.json = val();
    else if (k == "--rank")
      a.rank = std::stoi(val());
    else if (k == "--port")
      a.port = std::stoi(val());
    else if (k == "-h" || k == "--help") {
      std::printf(
          "shadow_bench [--layout dense8b] [--syncs N] [--forward-bytes MiB] [--idle-ms MS]\n"
          "             [--checksum off|on] [--json FILE]\n");
      std::exit(0);
    } else {
      throw std::invalid_argument("unknown argument " + k);
    }
  }
  if (a.syncs < 1) throw std::invalid_argument("--syncs must be >= 1");
  return a;
}

std::vector<ws::TensorMeta> layout_of(const std::string& name) {
  if (name == "dense8b") return ws::layouts::dense8b();
  if (name == "small1b") return ws::layouts::small1b();
  throw std::invalid_argument("--layout: dense8b or small1b, got " + name);
}

struct Percentiles {
  double p50 = 0, p99 = 0, max = 0;
  std::size_t n = 0;
};
Percentiles percentiles(std::vector<double> v) {
  Percentiles p;
  p.n = v.size();
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  p.p50 = v[v.size() / 2];
  p.p99 = v[std::min(v.size() - 1, static_cast<std::size_t>(double(v.size()) * 0.99))];
  p.max = v.back();
  return p;
}

ws::EngineOptions engine_options(const Args& a) {
  ws::EngineOptions e;
  e.backend = "ipc";
  e.device = 0;
  e.timeout = 120s;
  e.acknowledge = ws::Acknowledge::each_transfer;
  e.checksum = a.checksum;
  return e;
}

ws::NcclInitInfo init_info(int port) {
  ws::NcclInitInfo i;
  i.master_address = "127.0.0.1";
  i.master_port = port;
  i.world_size = 2;
  i.rank_offset = 1;
  return i;
}

int trainer(const Args& a) {
  ws::detail::check(cudaSetDevice(0), "cudaSetDevice");
  const auto metas = layout_of(a.layout);
  ws_test::DeviceModel model(metas, 0);
  ws::CudaStream s(0);
  ws::TrainerEngine::Options o;
  o.engine = engine_options(a);
  ws::TrainerEngine t(o);
  t.trainer_init(init_info(a.port));
  for (int round = 1; round <= a.syncs; ++round) {
    model.fill(static_cast<std::uint64_t>(round), s.get());
    ws::detail::check(cudaStreamSynchronize(s.get()), "cudaStreamSynchronize");
    const ws_test::ModelSource src{metas, model};
    t.send_weights(src);
  }
  return 0;
}

// One forward of the reader.
struct Forward {
  Clock::time_point start;  // before acquire()
  double acquire_us = 0;
  double gpu_us = 0;
  bool during_sync = false;
  std::uint64_t generation = 0;
};

int worker(const Args& a) {
  ws::detail::check(cudaSetDevice(0), "cudaSetDevice");
  const auto metas = layout_of(a.layout);
  ws_test::DeviceModel model(metas, 0);
  ws::CudaStream s(0);
  model.fill(0, s.get());
  ws::detail::check(cudaStreamSynchronize(s.get()), "cudaStreamSynchronize");
  ws::WeightTransferEngine::Options o;
  o.engine = engine_options(a);
  o.shadow.enabled = true;
  // Every update is a full one: the shadow need not start as a copy of the live version.
  o.shadow.copy_live_at_start = false;
  o.shadow.memory =
      std::make_shared<ws::PolicyShadowMemory<ws::CudaPolicy>>(ws::CudaPolicy(0), "cuda:0");
  ws::WeightTransferEngine e(o);
  e.init_transfer_engine(init_info(a.port));
  std::vector<ws::ShadowParameter> table;
  for (std::size_t i = 0; i < metas.size(); ++i) table.push_back({metas[i], model.data(i), nullptr});
  e.register_parameters(table);

  std::atomic<bool> stop{false}, syncing{false};
  std::vector<Forward> forwards;
  forwards.reserve(1 << 20);
  std::thread reader([&] {
    ws::detail::check(cudaSetDevice(0), "cudaSetDevice");
    ws::CudaStream rs(0);
    ws::TimedEvent b(0), en(0);
    ws::DeviceBuffer sum(8, 0);
    std::vector<ws::detail::DigestSpan> spans;
    while (!stop.load()) {
      Forward f;
      f.during_sync = syncing.load();
      f.start = Clock::now();
      const auto snap = e.acquire();
      f.acquire_us = std::chrono::duration<double, std::micro>(Clock::now() - f.start).count();
      f.generation = snap->generation();
      spans.clear();
      std::size_t bytes = 0;
      for (const auto& p : snap->parameters()) {
        if (bytes >= a.forward_bytes) break;
        if (p.nbytes() == 0) continue;
        spans.push_back({p.data, p.nbytes(), 0, 0});
        bytes += p.nbytes();
      }
      b.record(rs.get());
      ws::detail::DigestKernel::instance().launch(spans.data(), spans.size(),
                                                  reinterpret_cast<std::uint64_t*>(sum.data()), 1,
                                                  rs.get());
      en.record(rs.get());
      ws::detail::check(cudaStreamSynchronize(rs.get()), "cudaStreamSynchronize");
      f.gpu_us = ws::TimedEvent::elapsed(b, en).count();
      f.during_sync = f.during_sync && syncing.load();
      forwards.push_back(f);
    }
  });

  const auto u = ws::NcclUpdateInfo::from_metas(metas);
  auto nothing = [](std::span<const ws::TensorView>, void*) {
    throw std::runtime_error("every tensor is registered: nothing goes to load_weights");
  };
  std::vector<Clock::time_point> landed(static_cast<std::size_t>(a.syncs) + 1);
  std::vector<double> sync_ms, start_ms;
  unsigned long long wrong = 0;
  std::this_thread::sleep_for(std::chrono::milliseconds(a.idle_ms));
  for (int round = 1; round <= a.syncs; ++round) {
    const auto t0 = Clock::now();
    e.start_weight_update();  // waits for the readers of the next shadow
    const auto t1 = Clock::now();
    syncing = true;
    e.update_weights(u, nothing);
    landed[static_cast<std::size_t>(round)] = Clock::now();
    e.finish_weight_update("v" + std::to_string(round));
    syncing = false;
    start_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    sync_ms.push_back(
        std::chrono::duration<double, std::milli>(landed[static_cast<std::size_t>(round)] - t1)
            .count());
    {  // the new version, bit-exact (its snapshot held while checked)
      const auto snap = e.acquire();
      unsigned long long* counter = nullptr;
      ws::detail::check(cudaMalloc(reinterpret_cast<void**>(&counter), 8), "cudaMalloc");
      ws::detail::check(cudaMemsetAsync(counter, 0, 8, s.get()), "cudaMemsetAsync");
      for (std::size_t i = 0; i < metas.size(); ++i)
        ws_pattern::count_wrong(snap->parameters()[i].data, metas[i].nbytes(),
                                ws_test::tensor_seed(static_cast<std::uint64_t>(round), i), counter,
                                s.get());
      unsigned long long host = 0;
      ws::detail::check(cudaMemcpyAsync(&host, counter, 8, cudaMemcpyDeviceToHost, s.get()), "D2H");
      ws::detail::check(cudaStreamSynchronize(s.get()), "sync");
      cudaFree(counter);
      wrong += host;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(a.idle_ms));
  }
  stop = true;
  reader.join();

  std::vector<double> idle, during, acquire;
  std::vector<double> first_after;  // per sync: landed -> first forward on it, ms
  for (const auto& f : forwards) {
    (f.during_sync ? during : idle).push_back(f.gpu_us);
    acquire.push_back(f.acquire_us);
  }
  for (int round = 1; round <= a.syncs; ++round) {
    const auto gen = static_cast<std::uint64_t>(round);
    for (const auto& f : forwards)
      if (f.generation == gen) {
        first_after.push_back(std::chrono::duration<double, std::micro>(
                                  f.start - landed[static_cast<std::size_t>(round)])
                                  .count());
        break;
      }
  }
  const auto pi = percentiles(idle), pd = percentiles(during), pa = percentiles(acquire),
             pf = percentiles(first_after), ps = percentiles(sync_ms), pst = percentiles(start_ms);
  std::size_t bytes = 0;
  for (const auto& m : metas) bytes += m.nbytes();
  std::printf("# shadow_bench: layout %s (%zu tensors, %zu bytes) over ipc on one GPU, %d syncs, "
              "checksum %s, forward = digest of the first %zu bytes of the snapshot\n",
              a.layout.c_str(), metas.size(), bytes, a.syncs, a.checksum ? "on" : "off",
              a.forward_bytes);
  std::printf("# %-34s %10s %10s %10s %8s\n", "", "p50", "p99", "max", "n");
  std::printf("  %-34s %10.1f %10.1f %10.1f %8zu\n", "forward while idle (us)", pi.p50, pi.p99,
              pi.max, pi.n);
  std::printf("  %-34s %10.1f %10.1f %10.1f %8zu\n", "forward while syncing (us)", pd.p50, pd.p99,
              pd.max, pd.n);
  std::printf("  %-34s %10.1f %10.1f %10.1f %8zu\n", "wait for a snapshot (us)", pa.p50, pa.p99,
              pa.max, pa.n);
  std::printf("  %-34s %10.1f %10.1f %10.1f %8zu\n", "landed -> first forward on it (us)", pf.p50,
              pf.p99, pf.max, pf.n);
  std::printf("  %-34s %10.2f %10.2f %10.2f %8zu\n", "sync: update_weights (ms)", ps.p50, ps.p99,
              ps.max, ps.n);
  std::printf("  %-34s %10.2f %10.2f %10.2f %8zu\n", "start_weight_update (ms)", pst.p50, pst.p99,
              pst.max, pst.n);
  std::printf("# versions served bit-exact: %d of %d (%llu wrong bytes)\n",
              wrong == 0 ? a.syncs : 0, a.syncs, wrong);
  if (!a.json.empty()) {
    auto row = [](const Percentiles& p) {
      return nlohmann::json{{"p50", p.p50}, {"p99", p.p99}, {"max", p.max}, {"n", p.n}};
    };
    nlohmann::json j = {{"tool", "shadow_bench"},        {"layout", a.layout},
                        {"bytes", bytes},                {"syncs", a.syncs},
                        {"checksum", a.checksum},        {"forward_bytes", a.forward_bytes},
                        {"forward_idle_us", row(pi)},    {"forward_syncing_us", row(pd)},
                        {"acquire_us", row(pa)},         {"landed_to_first_forward_us", row(pf)},
                        {"update_weights_ms", row(ps)}, {"start_weight_update_ms", row(pst)},
                        {"nwrong", wrong}};
    std::ofstream(a.json, std::ios::app) << j.dump() << "\n";
  }
  return wrong == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) try {
  Args a = parse(argc, argv);
  if (a.rank == 0) return trainer(a);
  if (a.rank == 1) return worker(a);
  const int port = ws_test::free_port();
  std::vector<pid_t> kids;
  for (int r = 0; r < 2; ++r) {
    std::vector<std::string> args;
    for (int i = 0; i < argc; ++i) args.push_back(argv[i]);
    args.insert(args.end(), {"--rank", std::to_string(r), "--port", std::to_string(port)});
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid == 0) {
      std::vector<char*> cargv;
      for (auto& s : args) cargv.push_back(s.data());
      cargv.push_back(nullptr);
      ::execv("/proc/self/exe", cargv.data());
      ::_exit(127);
    }
    kids.push_back(pid);
  }
  int rc = 0;
  for (std::size_t i = 0; i < kids.size(); ++i) {
    int st = 0;
    ::waitpid(kids[i], &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      std::fprintf(stderr, "shadow_bench: rank %zu failed\n", i);
      rc = 1;
      for (auto k : kids) ::kill(k, SIGTERM);
    }
  }
  return rc;
} catch (const std::exception& e) {
  std::fprintf(stderr, "shadow_bench: %s\n", e.what());
  return 2;
}
