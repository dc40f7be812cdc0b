// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// A small trainer: trains the demo MLP on a CPU and, every few epochs, pushes its weights into one
// or more inference servers through vLLM's HTTP routes and weightsync's TrainerEngine, printing the
// servers' accuracy before and after each sync and checking that they now answer exactly as the
// trainer's own copy of the model does.
//
//   trainer --server http://127.0.0.1:8000[,http://...] [--backend host|nccl] [--device 0]
//           [--syncs 4] [--epochs-per-sync 1] [--transfer-port 0 (any)] [--die-at-sync N]
//           [--token T] [--timeout-s 30]
//
// --token (or WEIGHTSYNC_HTTP_TOKEN): sent as "Authorization: Bearer T" to every server.
// --timeout-s: one deadline for the transfer group's rendezvous and each HTTP call's answer (the
// HTTP calls get 5 s more, so that a server's own timeout error arrives before ours). A server
// that refuses or fails its init call ends the run at once with that error, not after the
// rendezvous' deadline.
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

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "cli.hpp"
#include "demo_model.hpp"
#include "progress_line.hpp"

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

constexpr const char* kUsage =
    "usage: trainer [--server http://127.0.0.1:8000[,http://...]] [--backend host|nccl] [--device "
    "0]\n"
    "               [--syncs 4] [--epochs-per-sync 1] [--transfer-port 0] [--die-at-sync N]\n"
    "               [--token T] [--timeout-s 30]\n"
    "Trains a small MLP and pushes its weights into the inference servers through vLLM's routes.\n"
    "--token (or WEIGHTSYNC_HTTP_TOKEN): the servers' bearer token. --timeout-s: the deadline of\n"
    "the rendezvous and of each HTTP call. --transfer-port 0: any free port.\n";

int main(int argc, char** argv) try {
  if (cli::wants_help(argc, argv)) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  // cpp-httplib 0.11's client writes without MSG_NOSIGNAL: a server that answers early and closes
  // (413, 401) would kill us with SIGPIPE instead of letting the error say what happened.
  ::signal(SIGPIPE, SIG_IGN);
  std::string urls = "http://127.0.0.1:8000", backend = "host", token;
  int device = 0, syncs = 4, epochs_per_sync = 1, transfer_port = 0, die_at_sync = -1;
  long long timeout_s = 30;
  if (const char* t = std::getenv("WEIGHTSYNC_HTTP_TOKEN")) token = t;
  cli::parse_pairs(argc, argv, [&](const std::string& k, const std::string& v) {
    if (k == "--server")
      urls = v;
    else if (k == "--backend") {
      if (v != "host" && v != "nccl")
        throw ws::config_error(k, "expected host or nccl, got '" + v + "'");
      backend = v;
    } else if (k == "--device")
      device = static_cast<int>(cli::parse_int(k, v, 0, 1023));
    else if (k == "--syncs")
      syncs = static_cast<int>(cli::parse_int(k, v, 0, 1000000));
    else if (k == "--epochs-per-sync")
      epochs_per_sync = static_cast<int>(cli::parse_int(k, v, 1, 1000000));
    else if (k == "--transfer-port")
      transfer_port = static_cast<int>(cli::parse_int(k, v, 0, 65535));
    else if (k == "--die-at-sync")
      die_at_sync = static_cast<int>(cli::parse_int(k, v, 1, 1000000));
    else if (k == "--token")
      token = v;
    else if (k == "--timeout-s")
      timeout_s = cli::parse_int(k, v, 1, 86400);
    else
      throw ws::config_error(k,
                             "unknown option (known: --server --backend --device --syncs "
                             "--epochs-per-sync --transfer-port --die-at-sync --token "
                             "--timeout-s; --help)");
  });
#if WEIGHTSYNC_HAS_CUDA
  if (backend != "host") ws::detail::check(cudaSetDevice(device), "cudaSetDevice");
#endif
  const auto deadline = std::chrono::seconds(timeout_s);
  std::vector<ws::http::VllmClient> servers;
  for (const auto& u : split(urls)) {
    if (u.rfind("http://", 0) != 0)
      throw ws::config_error("--server", "expected http://host:port, got '" + u + "'");
    servers.emplace_back(u, deadline + std::chrono::seconds(5), token);
  }
  // Every server must answer before anything starts: a wrong URL is "connection refused" now,
  // not a rendezvous timeout later.
  for (auto& c : servers) (void)c.get_world_size();

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
  to.engine.timeout = deadline;
  to.engine.progress = demo::progress_line("[trainer]");  // on a terminal only
  ws::TrainerEngine trainer(to);
  {
    auto inits = std::async(std::launch::async, [&] {
      on_all(servers, [&](ws::http::VllmClient& c, std::size_t i) {
        auto mine = info;
        mine.rank_offset = 1 + static_cast<int>(i);
        c.init_weight_transfer_engine(mine);
      });
    });
    auto rendezvous = std::async(std::launch::async, [&] { trainer.trainer_init(info); });
    // Whichever fails first is the error to report: an init call that fails (refused, 401, 400,
    // 500, reset) means its server will never join, so waiting out the rendezvous would only
    // hide the reason.
    while (rendezvous.wait_for(std::chrono::milliseconds(20)) != std::future_status::ready) {
      if (inits.wait_for(std::chrono::seconds(0)) != std::future_status::ready) continue;
      try {
        inits.get();
      } catch (const std::exception& e) {
        // The rendezvous has no cancel: report and leave now, without waiting for it.
        std::fprintf(stderr, "trainer: %s\n", e.what());
        std::fflush(nullptr);
        std::_Exit(2);
      }
      break;  // every init call answered: the rendezvous completes or fails on its own
    }
    try {
      rendezvous.get();
    } catch (const std::exception& e) {
      // An init call's own error says more than "never joined"; wait a moment for one.
      std::string why = e.what();
      if (inits.valid() && inits.wait_for(std::chrono::seconds(1)) == std::future_status::ready) {
        try {
          inits.get();
        } catch (const std::exception& h) {
          why = std::string(h.what()) + " (and the rendezvous failed: " + why + ")";
        }
      } else if (inits.valid()) {
        why += " (the servers' init calls have not answered: a server that hangs?)";
      }
      std::fprintf(stderr, "trainer: %s\n", why.c_str());
      std::fflush(nullptr);
      std::_Exit(2);  // an unanswered init call cannot be cancelled: do not wait for it
    }
    if (inits.valid()) inits.get();
  }
  std::printf("[trainer] %zu server(s) joined over the %s backend (world size %d)\n",
              servers.size(), backend.c_str(), info.world_size);
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
    std::printf("[trainer] sent: %s\n", demo::summary(st).c_str());
    updates.get();
    on_all(servers, [&](ws::http::VllmClient& c, std::size_t) {
      c.finish_weight_update(version);
      c.resume();
    });
    // 3. Every server now answers exactly as our own copy of the model does.
    std::vector<int> own_pred;
    for (std::size_t i = 0; i < eval.size(); ++i)
      own_pred.push_back(demo::predict(model, eval.x[i], eval.y[i]));
    for (auto& c : servers) {
      const auto pred = server_predictions(c, eval);
      const bool same = pred == own_pred;
      std::printf(
          "[trainer] sync %d (%zu tensors, %zu bytes, %zu chunks): loss %.3f, trainer accuracy "
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
