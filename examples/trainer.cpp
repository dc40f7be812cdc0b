// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// A small trainer: trains the demo MLP on a CPU and, every few epochs, pushes its weights into one
// or more inference servers through vLLM's HTTP routes and weightsync's TrainerEngine, printing the
// servers' accuracy before and after each sync and checking that they now answer exactly as the
// trainer's own copy of the model does.
//
//   trainer --server http://127.0.0.1:8000[,http://...] [--backend host|nccl] [--device 0]
//           [--syncs 4] [--epochs-per-sync 1] [--transfer-port 0 (any)] [--die-at-sync N]
//
// --die-at-sync N kills this process (SIGKILL) in the middle of sync N's transfer: the test of a
// trainer that crashes while the server is receiving.
#include <weightsync/engine.hpp>
#include <weightsync/http/control_plane.hpp>
#if WEIGHTSYNC_HAS_CUDA
#include <weightsync/cuda/check.hpp>
#include <weightsync/cuda/device_buffer.hpp>
#endif

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "demo_model.hpp"

namespace ws = weightsync;
using nlohmann::json;

namespace {

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::size_t a = 0;
  while (true) {
    const auto b = s.find(',', a);
    out.push_back(s.substr(a, b - a));
    if (b == std::string::npos) return out;
    a = b + 1;
  }
}

// A port for the transfer group's rendezvous: random below Linux's ephemeral range (32768+), so
// that no outgoing connection can take it between this check and rank 0's bind.
int free_port() {
  std::mt19937 rng(std::random_device{}());
  for (int i = 0; i < 200; ++i) {
    const int port = 20000 + static_cast<int>(rng() % 12000);
    try {
      ws::detail::listen_tcp("127.0.0.1", port);
      return port;
    } catch (const ws::error&) {
    }
  }
  throw ws::config_error("transfer-port", "no free port in 20000..31999; pass --transfer-port");
}

// The server's predictions for the evaluation set.
std::vector<int> server_predictions(ws::http::VllmClient& c, const demo::Dataset& d) {
  json inputs = json::array();
  for (std::size_t i = 0; i < d.size(); ++i) inputs.push_back({d.x[i], d.y[i]});
  const auto r = c.post("/v1/predict", {{"inputs", inputs}});
  return r.at("classes").get<std::vector<int>>();
}

double accuracy_of(const std::vector<int>& p, const demo::Dataset& d) {
  std::size_t ok = 0;
  for (std::size_t i = 0; i < d.size(); ++i) ok += p[i] == d.label[i];
  return static_cast<double>(ok) / static_cast<double>(d.size());
}

// Runs f on every server concurrently (one thread each) and rethrows the first failure.
template <class F>
void on_all(std::vector<ws::http::VllmClient>& servers, F f) {
  std::vector<std::future<void>> fs;
  for (std::size_t i = 0; i < servers.size(); ++i)
    fs.push_back(std::async(std::launch::async, [&, i] { f(servers[i], i); }));
  std::exception_ptr first;
  for (auto& x : fs) try {
      x.get();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  if (first) std::rethrow_exception(first);
}

}  // namespace

int main(int argc, char** argv) try {
  std::string urls = "http://127.0.0.1:8000", backend = "host";
  int device = 0, syncs = 4, epochs_per_sync = 1, transfer_port = 0, die_at_sync = -1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--server") urls = v;
    else if (k == "--backend") backend = v;
    else if (k == "--device") device = std::stoi(v);
    else if (k == "--syncs") syncs = std::stoi(v);
    else if (k == "--epochs-per-sync") epochs_per_sync = std::stoi(v);
    else if (k == "--transfer-port") transfer_port = std::stoi(v);
    else if (k == "--die-at-sync") die_at_sync = std::stoi(v);
    else throw ws::config_error(k, "unknown option");
  }
#if WEIGHTSYNC_HAS_CUDA
  if (backend != "host") ws::detail::check(cudaSetDevice(device), "cudaSetDevice");
#endif
  std::vector<ws::http::VllmClient> servers;
  for (const auto& u : split(urls)) servers.emplace_back(u, std::chrono::seconds(60));

  const auto train = demo::spirals(200, 1), eval = demo::spirals(100, 2);
  demo::Mlp model;
  demo::init_random(model, 7);
  std::mt19937 rng(3);
  // The trainer sends HuggingFace-style unfused pieces (q/k/v-like, gate/up-like); the servers
  // hold fused parameters and place each piece with a LoadPlan.
  const auto metas = demo::hf_metas();

  // 1. Every server joins the trainer's transfer group: rank 0 is this trainer, server i takes
  //    rank 1 + i. The servers' init calls block until the trainer joins, so they run concurrently.
  ws::NcclInitInfo info;
  info.master_address = "127.0.0.1";
  info.master_port = transfer_port ? transfer_port : free_port();
  info.world_size = 1 + static_cast<int>(servers.size());
  info.rank_offset = 1;
  info.packed = true;
  info.packed_buffer_size_bytes = 4096;  // small chunks: a real pipeline even for a tiny model
  info.packed_num_buffers = 2;
  ws::TrainerEngine::Options to;
  to.engine.backend = backend;
  to.engine.device = device;
  to.engine.timeout = std::chrono::seconds(30);
  ws::TrainerEngine trainer(to);
  {
    auto inits = std::async(std::launch::async, [&] {
      on_all(servers, [&](ws::http::VllmClient& c, std::size_t i) {
        auto mine = info;
        mine.rank_offset = 1 + static_cast<int>(i);
        c.init_weight_transfer_engine(mine);
      });
    });
    trainer.trainer_init(info);
    inits.get();
  }
  std::printf("[trainer] %zu server(s) joined over the %s backend (world size %d)\n", servers.size(),
              backend.c_str(), info.world_size);
  for (std::size_t i = 0; i < servers.size(); ++i)
    std::printf("[trainer] before training, %s answers with accuracy %.3f (weights '%s')\n",
                servers[i].url().c_str(), accuracy_of(server_predictions(servers[i], eval), eval),
                servers[i].weight_version().c_str());

#if WEIGHTSYNC_HAS_CUDA
  std::vector<ws::DeviceBuffer> device_copy;
  if (backend != "host")
    for (const auto& m : metas) device_copy.emplace_back(m.nbytes(), device);
#endif
  int sync_no = 0;
  struct Source {
    const std::vector<ws::TensorMeta>& m;
    std::vector<const void*> ptrs;
    bool die = false;
    std::vector<ws::TensorMeta> metas() const { return m; }
    ws::AnyTensorRange iterate() {
      return ws::AnyTensorRange([this, i = std::size_t{0}](ws::SourceTensorRef& out) mutable {
        if (i == m.size()) return false;
        if (die && i == 4) {  // after the first chunk went out
          std::printf("[trainer] dying in the middle of the transfer, as asked\n");
          std::fflush(stdout);
          ::kill(::getpid(), SIGKILL);
        }
        out = {&m[i], ptrs[i]};
        ++i;
        return true;
      });
    }
  };

  for (int s = 1; s <= syncs; ++s) {
    double loss = 0;
    for (int e = 0; e < epochs_per_sync; ++e) loss = demo::train_epoch(model, train, 0.15f, rng);
    const double own = demo::accuracy(model, eval);
    sync_no = s;
    const std::string version = "step-" + std::to_string(s * epochs_per_sync);
    Source src{metas, {}, s == die_at_sync};
    src.ptrs = demo::hf_pointers(model);
#if WEIGHTSYNC_HAS_CUDA
    if (backend != "host") {
      for (std::size_t i = 0; i < metas.size(); ++i) {
        ws::detail::check(cudaMemcpy(device_copy[i].data(), src.ptrs[i], metas[i].nbytes(),
                                     cudaMemcpyHostToDevice),
                          "cudaMemcpy");
        src.ptrs[i] = device_copy[i].data();
      }
    }
#endif
    // 2. Pause, start, transfer (the servers' /update_weights and our send run together),
    //    finish with a version, resume.
    on_all(servers, [](ws::http::VllmClient& c, std::size_t) {
      c.pause(ws::PauseMode::keep);
      c.start_weight_update();
    });
    auto updates = std::async(std::launch::async, [&] {
      on_all(servers, [&](ws::http::VllmClient& c, std::size_t) {
        c.update_weights(trainer.update_info(metas));
      });
    });
    const auto st = trainer.send_weights(src);
    updates.get();
    on_all(servers, [&](ws::http::VllmClient& c, std::size_t) {
      c.finish_weight_update(version);
      c.resume();
    });
    // 3. Every server now answers exactly as our own copy of the model does.
    std::vector<int> own_pred;
    for (std::size_t i = 0; i < eval.size(); ++i) own_pred.push_back(demo::predict(model, eval.x[i], eval.y[i]));
    for (auto& c : servers) {
      const auto pred = server_predictions(c, eval);
      const bool same = pred == own_pred;
      std::printf("[trainer] sync %d (%zu tensors, %zu bytes, %zu chunks): loss %.3f, trainer accuracy "
                  "%.3f, %s accuracy %.3f, weights '%s', %s\n",
                  s, st.tensors, st.bytes, st.chunks, loss, own, c.url().c_str(), accuracy_of(pred, eval),
                  c.weight_version().c_str(), same ? "answers match the trainer's" : "ANSWERS DIFFER");
      if (!same || c.weight_version() != version) {
        std::fprintf(stderr, "trainer: %s does not serve the weights just sent\n", c.url().c_str());
        return 1;
      }
    }
    std::fflush(stdout);
  }
  std::printf("[trainer] done after %d syncs\n", sync_no);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "trainer: %s\n", e.what());
  return 2;
}
