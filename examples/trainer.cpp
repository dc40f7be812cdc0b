// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// A small trainer: trains the demo MLP on a CPU and, every few epochs, pushes its weights into one
// or more inference servers through vLLM's HTTP routes and weightsync's TrainerEngine, printing the
// servers' accuracy before and after each sync and checking that they now answer exactly as the
// trainer's own copy of the model does.
//
//   trainer --server http://127.0.0.1:8000[,http://...] [--backend host|nccl] [--device 0]
//           [--syncs 4] [--epochs-per-sync 1] [--transfer-port 0 (any)] [--die-at-sync N]
//           [--token T] [--timeout-s 30] [--shadow off|on] [--fail-every N]
//           [--weights-dir DIR] [--piece-delay-ms 0]
//
// --token (or WEIGHTSYNC_HTTP_TOKEN): sent as "Authorization: Bearer T" to every server.
// --timeout-s: one deadline for the transfer group's rendezvous and each HTTP call's answer (the
// HTTP calls get 5 s more, so that a server's own timeout error arrives before ours). A server
// that refuses or fails its init call ends the run at once with that error, not after the
// rendezvous' deadline.
// --die-at-sync N kills this process (SIGKILL) in the middle of sync N's transfer: the test of a
// trainer that crashes while the server is receiving.
// --shadow on: syncs without pausing the servers (they must run with --shadow on: each sync lands
// in a second copy of their weights while they serve, and every rank votes on the outcome of each
// transfer, Acknowledge::each_transfer); the default pauses them around each sync.
// --fail-every N: every Nth sync fails midway on purpose, after some of its chunks went out; the
// odd ones send a wrong item (a piece whose shape is not the declared one), the even ones abort
// (the weights' iteration throws). The servers must go on serving the previous version, which the
// trainer checks; the run goes on with the next sync.
// --weights-dir DIR: before each sync, writes the weights it sends to DIR/<version>.bin (the
// fused tensors, see demo::save), and after it appends "<version> ok" or "<version> failed" to
// DIR/syncs.txt: a client can check every answer against the version it names.
// --piece-delay-ms N: waits N ms before each piece it sends (a slow sync: requests overlap it).
#include <weightsync/backends.hpp>
#include <weightsync/engine.hpp>
#include <weightsync/vllm/control_plane.hpp>
#include <weightsync/vllm/join.hpp>
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
#include <fstream>
#include <future>
#include <optional>
#include <stdexcept>
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
    "               [--token T] [--timeout-s 30] [--shadow off|on] [--fail-every N]\n"
    "               [--weights-dir DIR] [--piece-delay-ms 0]\n"
    "Trains a small MLP and pushes its weights into the inference servers through vLLM's routes.\n"
    "--token (or WEIGHTSYNC_HTTP_TOKEN): the servers' bearer token. --timeout-s: the deadline of\n"
    "the rendezvous and of each HTTP call. --transfer-port 0: any free port.\n"
    "--shadow on: syncs without pausing the servers (inference_server --shadow on).\n"
    "--fail-every N: every Nth sync fails midway on purpose (a wrong item, or an abort); the\n"
    "servers must keep the previous version live. --weights-dir DIR: each version's weights\n"
    "go to DIR/<version>.bin and the outcome of each sync to DIR/syncs.txt. --piece-delay-ms N:\n"
    "a pause before each piece sent (a slow sync).\n";

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
  int fail_every = 0, piece_delay_ms = 0;
  bool shadow = false;
  std::string weights_dir;
  long long timeout_s = 30;
  if (const char* t = std::getenv("WEIGHTSYNC_HTTP_TOKEN")) token = t;
  cli::parse_pairs(
      argc, argv,
      {"--server", "--backend", "--device", "--syncs", "--epochs-per-sync", "--transfer-port",
       "--die-at-sync", "--token", "--timeout-s", "--shadow", "--fail-every", "--weights-dir",
       "--piece-delay-ms"},
      [&](const std::string& k, const std::string& v) {
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
    else if (k == "--shadow")
      shadow = cli::parse_on_off(k, v);
    else if (k == "--fail-every")
      fail_every = static_cast<int>(cli::parse_int(k, v, 1, 1000000));
    else if (k == "--weights-dir")
      weights_dir = v;
    else if (k == "--piece-delay-ms")
      piece_delay_ms = static_cast<int>(cli::parse_int(k, v, 0, 60000));
    else
      throw ws::config_error(k,
                             "unknown option (known: --server --backend --device --syncs "
                             "--epochs-per-sync --transfer-port --die-at-sync --token "
                             "--timeout-s --shadow --fail-every --weights-dir "
                             "--piece-delay-ms; --help)");
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
  // The chunks of the current sync that have gone out (a sync that fails says how far it got).
  std::size_t chunks_out = 0, chunks_planned = 0;
  to.engine.progress = [line = demo::progress_line("[trainer]"),  // on a terminal only
                        &chunks_out, &chunks_planned](const ws::TransferProgress& p) {
    chunks_out = p.chunk;
    chunks_planned = p.chunks;
    if (line) line(p);
  };
  // Shadow mode's servers commit on a vote: every rank learns every rank's outcome in the same
  // transfer (the handshake refuses a trainer and servers that disagree).
  if (shadow) to.engine.acknowledge = ws::Acknowledge::each_transfer;
  ws::TrainerEngine trainer(to);
  // Every server is checked first (a wrong URL: "connection refused" at once), then the servers'
  // init calls and the rendezvous run together; a server that fails or refuses its init call
  // stops the rendezvous and is the error (see <weightsync/vllm/join.hpp>).
  try {
    ws::http::join_servers(trainer, servers, info);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trainer: %s\n", e.what());
    std::fflush(nullptr);
    std::_Exit(2);  // (an init call still out runs on its own thread: no static destructors)
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
  int sync_no = 0, failed_syncs = 0;
  // How a sync fails on purpose (--fail-every).
  enum class Fail { none, wrong_item, abort };
  struct Source {
    const std::vector<ws::TensorMeta>& m;
    std::vector<const void*> ptrs;
    bool die = false;
    Fail fail = Fail::none;
    int sync = 0;
    std::chrono::milliseconds piece_delay{0};
    ws::TensorMeta wrong;  // the wrong item's metadata
    std::vector<ws::TensorMeta> metas() const { return m; }
    ws::AnyTensorRange iterate() {
      return ws::AnyTensorRange([this, i = std::size_t{0}](ws::SourceTensorRef& out) mutable {
        if (i == m.size()) return false;
        if (piece_delay.count() > 0) std::this_thread::sleep_for(piece_delay);
        if (die && i == 4) {  // after the first chunk went out
          std::printf("[trainer] dying in the middle of the transfer, as asked\n");
          std::fflush(stdout);
          ::kill(::getpid(), SIGKILL);
        }
        // Midway: the last pieces are in the last chunk; the ones before it have gone out (and
        // landed on the servers) by now.
        if (fail == Fail::abort && i == m.size() - 1)
          throw std::runtime_error(ws::detail::cat("sync ", sync, " aborted midway on purpose (--fail-every), before ", m[i].name));
        if (fail == Fail::wrong_item && i == m.size() - 2) {
          wrong = m[i];
          wrong.shape[0] += 1;  // not the declared shape: the transfer fails on every rank
          out = {&wrong, ptrs[i]};
        } else {
          out = {&m[i], ptrs[i]};
        }
        ++i;
        return true;
      });
    }
  };
  // What the servers serve now: the last version that landed (the initial random weights are the
  // servers' own, so a failure before the first success is checked by version only).
  std::optional<demo::Mlp> served;
  std::string served_version;
  auto note = [&](const std::string& line) {
    if (weights_dir.empty()) return;
    std::ofstream f(weights_dir + "/syncs.txt", std::ios::app);
    f << line << "\n";
    if (!f) throw ws::config_error("--weights-dir", "cannot write " + weights_dir + "/syncs.txt");
  };

  for (int s = 1; s <= syncs; ++s) {
    double loss = 0;
    for (int e = 0; e < epochs_per_sync; ++e) loss = demo::train_epoch(model, train, 0.15f, rng);
    const double own = demo::accuracy(model, eval);
    sync_no = s;
    const std::string version = "step-" + std::to_string(s * epochs_per_sync);
    Source src{metas, {}, s == die_at_sync, Fail::none, s, {}, {}};
    src.ptrs = demo::hf_pointers(model);
    src.piece_delay = std::chrono::milliseconds(piece_delay_ms);
    if (fail_every > 0 && s % fail_every == 0)
      src.fail = (s / fail_every) % 2 == 1 ? Fail::wrong_item : Fail::abort;
    if (!weights_dir.empty()) demo::save(model, weights_dir + "/" + version + ".bin");
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
    // 2. Pause (not in shadow mode: the servers answer throughout), start, transfer (the
    //    servers' /update_weights and our send run together), finish with a version, resume.
    on_all(servers, [&](ws::http::VllmClient& c, std::size_t) {
      if (!shadow) c.pause(ws::PauseMode::keep);
      c.start_weight_update();
    });
    auto updates = std::async(std::launch::async, [&] {
      on_all(servers, [&](ws::http::VllmClient& c, std::size_t) {
        c.update_weights(trainer.update_info(metas));
      });
    });
    if (src.fail != Fail::none) {
      // Both sides must fail: our send with our own error, every server's update with a 500.
      std::string sent_error = "(none)", update_error = "(none)";
      chunks_out = chunks_planned = 0;
      try {
        (void)trainer.send_weights(src);
      } catch (const std::exception& e) {
        sent_error = e.what();
      }
      try {
        updates.get();
      } catch (const std::exception& e) {
        update_error = e.what();
      }
      ++failed_syncs;
      note(version + " failed");
      std::printf(
          "[trainer] sync %d failed on purpose (%s) after %zu of %zu chunks went out: trainer: "
          "%s; servers: %s\n",
          s, src.fail == Fail::wrong_item ? "wrong item" : "abort", chunks_out, chunks_planned,
          sent_error.c_str(), update_error.c_str());
      if (sent_error == "(none)" || update_error == "(none)") {
        std::fprintf(stderr, "trainer: sync %d should have failed on both sides\n", s);
        return 1;
      }
      // The session is over on every server; in place, they were paused for it.
      if (!shadow)
        on_all(servers, [](ws::http::VllmClient& c, std::size_t) { c.resume(); });
      // 3'. Every server still serves the last version that landed, and answers as it should.
      for (auto& c : servers) {
        const auto now = c.weight_version();
        const bool same_version = served ? now == served_version : now != version;
        bool same = true;
        if (served) {
          const auto pred = server_predictions(c, eval);
          for (std::size_t i = 0; i < eval.size(); ++i)
            same = same && pred[i] == demo::predict(*served, eval.x[i], eval.y[i]);
        }
        std::printf("[trainer] after the failed sync %d, %s serves '%s'%s\n", s, c.url().c_str(),
                    now.c_str(), same ? "" : " but ANSWERS DIFFER from it");
        if (!same_version || !same) {
          std::fprintf(stderr, "trainer: %s changed what it serves after a failed sync\n",
                       c.url().c_str());
          return 1;
        }
      }
      std::fflush(stdout);
      continue;
    }
    const auto st = trainer.send_weights(src);
    std::printf("[trainer] sent: %s\n", demo::summary(st).c_str());
    updates.get();
    on_all(servers, [&](ws::http::VllmClient& c, std::size_t) {
      c.finish_weight_update(version);
      if (!shadow) c.resume();
    });
    note(version + " ok");
    served = model;
    served_version = version;
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
  std::printf("[trainer] done after %d syncs (%d failed on purpose)\n", sync_no, failed_syncs);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "trainer: %s\n", e.what());
  return 2;
}
