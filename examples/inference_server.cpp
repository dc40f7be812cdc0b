// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// A small inference server: serves an MLP's predictions over HTTP and takes new weights from a
// trainer through vLLM's weight-transfer routes (weightsync::http::add_vllm_routes).
//
//   inference_server [--port 8000] [--host 127.0.0.1] [--backend host|nccl] [--device 0]
//                    [--shadow off|on] [--max-body-bytes 16M] [--token T] [--threads 8]
//                    [--max-queued 64] [--header-timeout-ms 10000] [--max-header-bytes 64K]
//                    [--max-headers 100]
//
// --token (or the environment variable WEIGHTSYNC_HTTP_TOKEN): the routes that change weights or
// state (the vLLM POST routes and /shutdown) then need "Authorization: Bearer T". Bodies over
// --max-body-bytes are refused with 413. The HTTP limits are weightsync::http::ServerLimits
// (README, "Security").
//
//   POST /v1/predict {"inputs": [[x, y], ...]} -> {"classes": [...], "weight_version": "...",
//                    (+ "logits": true)            "generation": g, "syncing": b, "paused": b
//                                                  (+ "logits": [[l0, l1, l2], ...])}
//   GET  /v1/stats                              -> requests served, and the longest wait of one
//                                                  for its weights (in ns), while syncing and not
//   POST /shutdown                              -> stops the server
//   + the vLLM routes (see <weightsync/vllm/control_plane.hpp>)
//
// Every answer names the version (weight_version, generation: the number of updates published
// before it) of the weights it was computed with.
//
// --shadow off (the default): updates land in a staging copy; /finish_weight_update swaps it in
// under a mutex, and each request copies the live weights under that mutex. The trainer pauses
// the server around each sync (/pause, /resume).
// --shadow on: the engine's shadow mode (<weightsync/engine/shadow.hpp>). The server's parameters
// are registered with the engine, which keeps a second copy; a sync lands in the copy that is not
// being served, and /finish_weight_update publishes it in one step. Each request takes a snapshot
// (WeightTransferEngine::acquire(), which never waits on a sync) and computes with that
// snapshot's parameters: requests are answered during a sync, without /pause, and a sync that
// fails midway leaves what is served untouched. Needs --backend host (the model runs on the CPU)
// and a trainer that syncs the same way (trainer --shadow on: each transfer's outcome is voted on
// by every rank, Acknowledge::each_transfer).
#include <weightsync/backends.hpp>
#include <weightsync/engine.hpp>
#include <weightsync/vllm/control_plane.hpp>
#if WEIGHTSYNC_HAS_CUDA
#include <weightsync/cuda/check.hpp>
#endif

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <sys/socket.h>

#include "cli.hpp"
#include "demo_model.hpp"
#include "progress_line.hpp"

namespace ws = weightsync;
using nlohmann::json;

namespace {
httplib::Server* g_server = nullptr;
void on_signal(int) {
  if (g_server) g_server->stop();
}

// How long requests waited for their weights (a snapshot in shadow mode; the mutex and the copy
// of the live weights in place), for GET /v1/stats.
struct WaitStats {
  std::atomic<std::uint64_t> requests{0}, requests_syncing{0}, max_ns{0}, max_syncing_ns{0};
  static void raise(std::atomic<std::uint64_t>& max, std::uint64_t v) {
    auto cur = max.load(std::memory_order_relaxed);
    while (v > cur && !max.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
    }
  }
  void record(std::chrono::steady_clock::duration waited, bool syncing) {
    const auto ns = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(waited).count());
    ++requests;
    raise(max_ns, ns);
    if (syncing) {
      ++requests_syncing;
      raise(max_syncing_ns, ns);
    }
  }
};

// The fused parameters of `s` as the demo's model reads them, and as a LoadPlan writes them.
demo::MlpView view_of(const weightsync::Snapshot& s) {
  demo::MlpView v;
  const auto names = demo::metas();
  for (std::size_t i = 0; i < names.size(); ++i)
    v.t[i] = static_cast<const float*>(s.at(names[i].name).data);
  return v;
}
std::vector<weightsync::ParamInfo> param_table_of(const weightsync::Snapshot& s) {
  std::vector<weightsync::ParamInfo> out;
  for (const auto& m : demo::metas())
    out.push_back({m.name, s.at(m.name).data, m.dtype, m.shape});
  return out;
}
}  // namespace

constexpr const char* kUsage =
    "usage: inference_server [--port 8000] [--host 127.0.0.1] [--backend host|nccl] [--device 0]\n"
    "                        [--shadow off|on] [--max-body-bytes 16M] [--token T] [--threads 8]\n"
    "                        [--max-queued 64] [--header-timeout-ms 10000] [--max-header-bytes "
    "64K]\n"
    "                        [--max-headers 100]\n"
    "Serves a small MLP's predictions (POST /v1/predict) and takes new weights from a trainer\n"
    "through vLLM's weight-transfer routes. --token (or WEIGHTSYNC_HTTP_TOKEN): the "
    "state-changing\n"
    "routes need 'Authorization: Bearer T'. Byte counts take K, M, G (KiB, MiB, GiB).\n"
    "--shadow on: answers requests during a sync, without a pause: syncs land in a second copy\n"
    "of the weights and are published in one step (host backend; the trainer needs --shadow on).\n";

int main(int argc, char** argv) try {
  if (cli::wants_help(argc, argv)) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  std::string host = "127.0.0.1", backend = "host";
  int port = 8000, device = 0;
  bool shadow = false;
  ws::http::RouteOptions ro;
  ws::http::ServerLimits sl;
  if (const char* t = std::getenv("WEIGHTSYNC_HTTP_TOKEN")) ro.bearer_token = t;
  cli::parse_pairs(
      argc, argv,
      {"--port", "--host", "--backend", "--device", "--shadow", "--max-body-bytes", "--token",
       "--threads", "--max-queued", "--header-timeout-ms", "--max-header-bytes", "--max-headers"},
      [&](const std::string& k, const std::string& v) {
    if (k == "--port")
      port = static_cast<int>(cli::parse_int(k, v, 0, 65535));
    else if (k == "--host")
      host = v;
    else if (k == "--backend") {
      if (v != "host" && v != "nccl")
        throw ws::config_error(k, "expected host or nccl, got '" + v + "'");
      backend = v;
    } else if (k == "--device")
      device = static_cast<int>(cli::parse_int(k, v, 0, 1023));
    else if (k == "--shadow")
      shadow = cli::parse_on_off(k, v);
    else if (k == "--max-body-bytes")
      ro.max_body_bytes = cli::parse_bytes(k, v);
    else if (k == "--token")
      ro.bearer_token = v;
    else if (k == "--threads")
      sl.threads = static_cast<std::size_t>(cli::parse_int(k, v, 1, 1024));
    else if (k == "--max-queued")
      sl.max_queued = static_cast<std::size_t>(cli::parse_int(k, v, 0, 1 << 20));
    else if (k == "--header-timeout-ms")
      sl.header_timeout = std::chrono::milliseconds(cli::parse_int(k, v, 1, 3600000));
    else if (k == "--max-header-bytes")
      sl.max_header_bytes = cli::parse_bytes(k, v);
    else if (k == "--max-headers")
      sl.max_header_count = static_cast<std::size_t>(cli::parse_int(k, v, 1, 1 << 20));
    else
      throw ws::config_error(k,
                             "unknown option (known: --port --host --backend --device "
                             "--shadow --max-body-bytes --token --threads --max-queued "
                             "--header-timeout-ms --max-header-bytes --max-headers; --help)");
  });
  if (shadow && backend != "host")
    throw ws::config_error("--shadow",
                           "shadow mode needs --backend host: the demo's model runs on the CPU, "
                           "and the " +
                               backend + " backend lands tensors in device memory");
#if WEIGHTSYNC_HAS_CUDA
  if (backend != "host") ws::detail::check(cudaSetDevice(device), "cudaSetDevice");
#endif

  // Serving state: the live weights (random until the first sync) and, in place, a staging copy.
  // In shadow mode `live` is the memory registered with the engine (one of its two copies: read
  // only through snapshots), and `staging`, `version`, `generation` are unused.
  std::mutex mu;
  demo::Mlp live, staging;
  demo::init_random(live, demo::kServerInitSeed);
  std::string version = "default";
  std::uint64_t generation = 0;
  std::atomic<bool> syncing{false};  // between a start and its finish (or failure)
  WaitStats waits;

  ws::WeightTransferEngine::Options eo;
  eo.engine.backend = backend;
  eo.engine.device = device;
  eo.engine.timeout = std::chrono::seconds(30);
  eo.engine.progress = demo::progress_line("[server]");  // on a terminal only
  if (shadow) {
    // The commit is a vote: every rank learns every rank's outcome before the version flips.
    eo.engine.acknowledge = ws::Acknowledge::each_transfer;
    eo.shadow.enabled = true;  // the second copy in host memory (ShadowOptions::memory null)
  }
  ws::WeightTransferEngine engine(eo);
  if (shadow) {
    std::vector<ws::ShadowParameter> params;
    const auto names = demo::metas();
    for (std::size_t i = 0; i < names.size(); ++i)
      params.push_back({names[i], live.tensor(i).data(), nullptr});
    engine.register_parameters(std::move(params));
  }
  engine.set_hooks({[](ws::PauseMode m) {
                      std::printf("[server] paused (%s)\n", ws::pause_mode_name(m));
                      std::fflush(stdout);
                    },
                    [] {
                      std::printf("[server] resumed\n");
                      std::fflush(stdout);
                    },
                    [&engine, &syncing](const std::string& why) {
                      syncing = false;
                      std::printf("[server] update failed, still serving '%s': %s\n",
                                  engine.weight_version().c_str(), why.c_str());
                      std::fflush(stdout);
                    }});

  // The server holds fused parameters (mlp.0.*, mlp.2.*); the trainer sends unfused HF-style
  // pieces. A LoadPlan, made at each start for the staging copy, places every piece at its rows:
  // on the host backend they are received straight there (destination), on GPU backends the
  // device views are brought to host memory and the plan copies them in. In shadow mode the plan
  // is made for the shadow copy (the engine places only tensors named as a registered parameter;
  // the pieces come to load, which copies them into the shadow at their rows).
  std::optional<ws::LoadPlan> plan;
  const auto hf = demo::hf_metas();
  std::vector<std::byte> scratch;
  ws::http::RouteHooks hooks;
  if (!shadow)  // (shadow mode places tensors itself, and refuses a destination)
    hooks.destination = [&](const ws::TensorMeta& m) -> void* {
      return backend == "host" && plan ? plan->destination(m) : nullptr;
    };
  hooks.load = [&](std::span<const ws::TensorView> batch, void* stream) {
    if (!plan) throw ws::state_error("no load plan: update before start");
    if (stream == nullptr) {  // host backend: host memory
      plan->load(batch, ws::HostStream{});
      return;
    }
#if WEIGHTSYNC_HAS_CUDA
    // GPU backends hand device memory, ready on `stream`; the transfer returns only after this.
    std::size_t total = 0;
    for (const auto& v : batch) total += v.nbytes;
    scratch.resize(total);
    std::vector<ws::TensorView> host_views;
    std::size_t off = 0;
    for (const auto& v : batch) {
      if (v.nbytes)
        ws::detail::check(
            cudaMemcpyAsync(scratch.data() + off, v.data, v.nbytes, cudaMemcpyDeviceToHost,
                            static_cast<cudaStream_t>(stream)),
            "cudaMemcpyAsync");
      host_views.push_back({v.meta, scratch.data() + off, v.nbytes});
      off += v.nbytes;
    }
    ws::detail::check(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)),
                      "cudaStreamSynchronize");
    plan->load(std::span<const ws::TensorView>(host_views), ws::HostStream{});
#endif
  };
  hooks.on_start = [&] {
    syncing = true;
    if (shadow) {
      // The copy being written in this session (the engine copied the live version into it).
      // Not held past this call: a snapshot of it would keep it from being the next shadow.
      const auto being_written = engine.shadow_snapshot();
      if (!being_written) throw ws::state_error("shadow mode: no shadow after the start");
      plan.emplace(ws::plan_loading(hf, param_table_of(*being_written), demo::load_map(),
                                    {.require_full_coverage = true}));
      std::printf("[server] load plan: %zu HF pieces into the shadow copy %d of %zu fused "
                  "parameters (serving '%s' meanwhile)\n",
                  hf.size(), being_written->copy(), demo::metas().size(),
                  engine.acquire()->version().c_str());
      std::fflush(stdout);
      return;
    }
    std::lock_guard lock(mu);
    staging = live;
    // Checks every piece's name, shape and rows against the fused parameters before any byte moves.
    plan.emplace(ws::plan_loading(hf, demo::param_table(staging), demo::load_map(),
                                  {.require_full_coverage = true}));
    std::printf(
        "[server] load plan: %zu HF pieces into %zu fused parameters (%zu received in place, "
        "%zu copied)\n",
        hf.size(), demo::metas().size(),
        backend == "host" ? plan->in_place_count() : std::size_t{0},
        backend == "host" ? plan->gather_count() : plan->in_place_count() + plan->gather_count());
    std::fflush(stdout);
  };
  hooks.on_finish = [&](const std::string& v) {
    syncing = false;
    if (!shadow) {  // (shadow mode: finish_weight_update has published the shadow)
      std::lock_guard lock(mu);
      live = staging;
      ++generation;
      if (!v.empty()) version = v;
    }
    std::printf("[server] now serving weights '%s'\n", engine.weight_version().c_str());
    std::fflush(stdout);
  };
  hooks.on_update_failed = [&](const std::string& e) {
    syncing = false;
    std::printf("[server] update failed, still serving '%s': %s\n", engine.weight_version().c_str(),
                e.c_str());
    std::fflush(stdout);
  };

  ws::http::ControlServer server(sl);
  g_server = &server;
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  ws::http::apply_limits(server, ro);
  ws::http::add_vllm_routes(server, engine, hooks, ro);
  server.post("/v1/predict", [&](const httplib::Request& req, httplib::Response& res) {
    if (!ws::http::detail::admitted(ro, req, res, false)) return;
    // (the routes' parser: bad JSON and JSON nested deeper than ro.max_json_depth are 400s)
    auto parsed = ws::http::detail::body_json(req, res, ro.max_json_depth);
    if (!parsed) return;
    const json& body = *parsed;
    if (!body.contains("inputs") || !body.at("inputs").is_array()) {
      res.status = 400;
      res.set_content(json{{"error", "expected {\"inputs\": [[x, y], ...]}"}}.dump(),
                      "application/json");
      return;
    }
    bool want_logits = false;
    if (auto it = body.find("logits"); it != body.end()) {
      if (!it->is_boolean()) {
        res.status = 400;
        res.set_content(json{{"error", "logits: expected true or false"}}.dump(),
                        "application/json");
        return;
      }
      want_logits = it->get<bool>();
    }
    std::vector<std::pair<float, float>> points;
    for (const auto& p : body.at("inputs")) {
      // Finite and within float's range (a larger double converted to float is undefined).
      auto coord = [](const json& x) {
        return x.is_number() && std::isfinite(x.get<double>()) &&
               std::fabs(x.get<double>()) <= 1e30;
      };
      if (!p.is_array() || p.size() != 2 || !coord(p[0]) || !coord(p[1])) {
        res.status = 400;
        res.set_content(
            json{{"error", "every input is [x, y], finite numbers of magnitude <= 1e30"}}.dump(),
            "application/json");
        return;
      }
      points.emplace_back(static_cast<float>(p[0].get<double>()),
                          static_cast<float>(p[1].get<double>()));
    }
    // The weights of one version for the whole request, and that version's name.
    const bool during_sync = syncing.load();
    const auto t0 = std::chrono::steady_clock::now();
    std::shared_ptr<const ws::Snapshot> snapshot;  // shadow mode: held until the answer is made
    demo::Mlp copy;                                // in place: a copy made under the mutex
    demo::MlpView w;
    std::string served;
    std::uint64_t gen = 0;
    if (shadow) {
      snapshot = engine.acquire();
      w = view_of(*snapshot);
      served = snapshot->version();
      gen = snapshot->generation();
    } else {
      std::lock_guard lock(mu);
      copy = live;
      served = version;
      gen = generation;
      w = demo::view(copy);
    }
    waits.record(std::chrono::steady_clock::now() - t0, during_sync);
    json classes = json::array(), logits = json::array();
    for (const auto& [x, y] : points) {
      demo::Activations a;
      demo::forward(w, x, y, a);
      classes.push_back(demo::argmax(a.logits));
      // (float -> double is exact, and the JSON number reads back as the same double)
      if (want_logits) logits.push_back({a.logits[0], a.logits[1], a.logits[2]});
    }
    snapshot.reset();
    json out{{"classes", std::move(classes)},
             {"weight_version", served},
             {"generation", gen},
             {"syncing", during_sync},
             {"paused", engine.is_paused()}};
    if (want_logits) out["logits"] = std::move(logits);
    res.set_content(out.dump(), "application/json");
  });
  server.get("/v1/stats", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content(json{{"mode", shadow ? "shadow" : "in-place"},
                         {"requests", waits.requests.load()},
                         {"requests_while_syncing", waits.requests_syncing.load()},
                         {"max_weights_wait_ns", waits.max_ns.load()},
                         {"max_weights_wait_while_syncing_ns", waits.max_syncing_ns.load()}}
                        .dump(),
                    "application/json");
  });
  server.post("/shutdown", [&](const httplib::Request& req, httplib::Response& res) {
    if (!ws::http::detail::admitted(ro, req, res, true)) return;
    res.set_content(json{{"status", "stopping"}}.dump(), "application/json");
    server.stop();
  });
  // The listening socket: SO_REUSEADDR only (httplib's default SO_REUSEPORT would let another
  // process of this user bind the same port and take our connections), and a backlog of 1024
  // (httplib 0.11 listens with 5: a burst of clients then sees connection resets).
  int listen_fd = -1;
  server.set_socket_options([&listen_fd](socket_t s) {
    int yes = 1;
    ::setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    listen_fd = s;
  });
  // TCP_NODELAY (inherited by the accepted sockets): an answer's headers and body go out as two
  // writes, and on a kept-alive connection Nagle would hold the body back until the client's
  // delayed ACK (40 ms a request).
  server.set_tcp_nodelay(true);
  if (!server.bind_to_port(host, port))
    throw ws::config_error("port", host + ":" + std::to_string(port) + " is not available");
  if (listen_fd >= 0) ::listen(listen_fd, 1024);  // Linux: listen() again sets the new backlog
  std::printf(
      "[server] serving a random MLP on http://%s:%d (backend %s, %s, body limit %zu bytes, "
      "bearer token %s, %zu threads, %zu queued at most)\n",
      host.c_str(), port, backend.c_str(),
      shadow ? "shadow mode: serves during syncs" : "updates in place", ro.max_body_bytes,
      ro.bearer_token.empty() ? "off" : "required", sl.threads, sl.max_queued);
  std::fflush(stdout);
  server.listen_after_bind();
  engine.shutdown();
  std::printf("[server] stopped\n");
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "inference_server: %s\n", e.what());
  return 2;
}
