// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// http::join_servers (issue 59): the trainer's HTTP + rendezvous dance in one call, in process over
// loopback with the host backend. A server that is not there, answers the wrong route or refuses
// the init is reported as that, long before the rendezvous' deadline (2 minutes here); a good
// server joins and a sync runs.
#include <weightsync/host/backend.hpp>
#include <weightsync/vllm/control_plane.hpp>
#include <weightsync/vllm/http_server.hpp>
#include <weightsync/vllm/join.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "support/catch.hpp"
#include "support/process.hpp"

// (a namespace per test source: the sources build as unity translation units)
namespace ws_test_join_test {

using namespace std::chrono_literals;
namespace ws = weightsync;
namespace http = weightsync::http;
using nlohmann::json;

namespace {

// A server listening on 127.0.0.1 in its own thread.
template <class S>
struct Running {
  S& s;
  int port;
  std::thread t;
  explicit Running(S& server) : s(server), port(server.bind_to_any_port("127.0.0.1")) {
    t = std::thread([this] { s.listen_after_bind(); });
    for (int i = 0; i < 200 && !s.is_running(); ++i) std::this_thread::sleep_for(5ms);
  }
  ~Running() {
    s.stop();
    t.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port); }
};

// The trainer's side: the host backend, a rendezvous deadline far longer than any bound below.
ws::NcclInitInfo trainer_info() {
  ws::NcclInitInfo info;
  info.master_address = "127.0.0.1";
  info.master_port = ws_test::free_port();
  info.world_size = 2;
  info.rank_offset = 1;
  return info;
}
ws::TrainerEngine::Options trainer_options() {
  ws::TrainerEngine::Options o;
  o.engine.backend = "host";
  o.engine.timeout = 120s;
  return o;
}

// Runs f, returns the message of the `E` it throws ("" and a failed check for none) and how long
// it took.
template <class E, class F>
std::pair<std::string, std::chrono::milliseconds> thrown(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  std::string what;
  try {
    f();
    FAIL_CHECK("no exception");
  } catch (const E& e) {
    what = e.what();
  }
  return {what, std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::steady_clock::now() - t0)};
}

// The rendezvous' deadline is 120 s: an error within this bound did not wait for it.
constexpr auto kAtOnce = 30s;

}  // namespace

TEST_CASE("join_servers: a wrong URL is 'connection refused' naming host:port, at once",
          "[e2e][join]") {
  int port = 0;
  {
    auto l = ws::detail::listen_tcp("127.0.0.1", 0);
    port = ws::detail::local_port(l.get());
  }  // closed: nothing listens there now
  ws::TrainerEngine trainer(trainer_options());
  http::VllmClient server("http://127.0.0.1:" + std::to_string(port));
  const auto [what, took] =
      thrown<ws::peer_error>([&] { http::join_server(trainer, server, trainer_info()); });
  INFO(what);
  CHECK(what.find("connection refused") != std::string::npos);
  CHECK(what.find("127.0.0.1:" + std::to_string(port)) != std::string::npos);
  CHECK(took < kAtOnce);
  CHECK_FALSE(trainer.healthy());  // never joined anything
}

TEST_CASE("join_servers: a server without vLLM's routes is its 404, and gets no init call",
          "[e2e][join]") {
  httplib::Server s;
  std::atomic<int> posts{0};
  s.Post(".*", [&](const httplib::Request&, httplib::Response& res) {
    ++posts;
    res.status = 200;
  });
  Running r(s);
  ws::TrainerEngine trainer(trainer_options());
  http::VllmClient server(r.url());
  const auto [what, took] =
      thrown<ws::remote_error>([&] { http::join_server(trainer, server, trainer_info()); });
  INFO(what);
  CHECK(what.find("GET " + r.url() + "/get_world_size answered 404") != std::string::npos);
  CHECK(took < kAtOnce);
  CHECK(posts == 0);
}

TEST_CASE(
    "join_servers: an init the server refuses is its status and body, and the rendezvous "
    "stops",
    "[e2e][join]") {
  httplib::Server s;
  s.Get("/get_world_size", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"world_size": 0})", "application/json");
  });
  s.Post("/init_weight_transfer_engine", [](const httplib::Request&, httplib::Response& res) {
    std::this_thread::sleep_for(200ms);  // the trainer's rendezvous is listening by then
    res.status = 400;
    res.set_content(R"({"error": "init_info.world_size: must be 3 here, got 2"})",
                    "application/json");
  });
  Running r(s);
  ws::TrainerEngine trainer(trainer_options());
  http::VllmClient server(r.url());
  const auto info = trainer_info();
  const auto [what, took] =
      thrown<ws::remote_error>([&] { http::join_server(trainer, server, info); });
  INFO(what);
  CHECK(what.find("answered 400") != std::string::npos);
  CHECK(what.find("must be 3 here, got 2") != std::string::npos);
  CHECK(took < kAtOnce);
  // The stopped rendezvous let its port go.
  CHECK_NOTHROW(ws::detail::listen_tcp("127.0.0.1", *info.master_port));
}

TEST_CASE(
    "join_servers: a good server joins, a sync runs, and once the trainer leaves the "
    "worker refuses to start another",
    "[e2e][join]") {
  ws::WeightTransferEngine engine;
  std::vector<float> got;
  http::RouteHooks hooks;
  hooks.load = [&](std::span<const ws::TensorView> views, void*) {
    for (const auto& v : views) {
      const auto* f = static_cast<const float*>(v.data);
      got.insert(got.end(), f, f + v.nbytes / sizeof(float));
    }
  };
  http::ControlServer s;
  http::apply_limits(s, {});
  http::add_vllm_routes(s, engine, hooks);
  Running r(s);

  ws::TrainerEngine trainer(trainer_options());
  http::VllmClient server(r.url(), 60s);
  http::join_server(trainer, server, trainer_info());
  CHECK(trainer.healthy());
  CHECK(server.get_world_size() == 2);

  const std::vector<ws::TensorMeta> metas{{"w", ws::DType::float32, {4}}};
  const std::vector<float> w{1.5f, -2.f, 3.25f, 4.f};
  struct Source {
    const std::vector<ws::TensorMeta>& m;
    const std::vector<float>& w;
    std::vector<ws::TensorMeta> metas() const { return m; }
    std::vector<ws::SourceTensorRef> iterate() const { return {{&m[0], w.data()}}; }
  } src{metas, w};
  server.start_weight_update();
  auto update = std::async(std::launch::async,
                           [&] { return server.update_weights(trainer.update_info(metas)); });
  trainer.send_weights(src);
  update.get();
  server.finish_weight_update("step-1");
  CHECK(got == w);
  CHECK(server.weight_version() == "step-1");

  // The trainer leaves cleanly (its goodbye): the worker refuses the next update at its start,
  // saying why, instead of accepting one that no trainer will ever send.
  trainer.shutdown();
  const auto [what, took] = thrown<ws::remote_error>([&] { server.start_weight_update(); });
  INFO(what);
  CHECK(what.find("answered 409") != std::string::npos);
  CHECK(what.find("rank 0 left the transfer group") != std::string::npos);
  CHECK(took < kAtOnce);
}

}  // namespace ws_test_join_test
