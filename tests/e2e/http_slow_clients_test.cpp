// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Slow clients cannot starve the HTTP control plane (issue 60, item 2): slowloris connections
// (a header byte at a time) and slow bodies are read by the server's front and hold no worker;
// probes are answered while they trickle, a trainer's full sync succeeds, and connections past
// max_connections evict the one that has waited longest for its request.
#include <weightsync/detail/socket.hpp>
#include <weightsync/vllm/control_plane.hpp>
#include <weightsync/vllm/http_server.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "demo_process.hpp"
#include "support/catch.hpp"
#include "support/process.hpp"

// (a namespace per test source: the sources build as unity translation units)
namespace ws_test_http_slow_clients_test {

using namespace std::chrono_literals;
namespace ws = weightsync;
namespace http = weightsync::http;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

struct Running {
  http::ControlServer& s;
  int port;
  std::thread t;
  explicit Running(http::ControlServer& server)
      : s(server), port(server.bind_to_any_port("127.0.0.1")) {
    t = std::thread([this] { s.listen_after_bind(); });
    for (int i = 0; i < 400 && !s.is_running(); ++i) std::this_thread::sleep_for(5ms);
  }
  ~Running() {
    s.stop();
    t.join();
  }
};

// `loris` connections that send a request's head a byte at a time and `bodies` that send a
// complete head and then their body a byte at a time, each a byte every 100 ms, until destroyed.
struct SlowClients {
  std::vector<ws::detail::Fd> fds;
  std::atomic<bool> stop{false};
  std::thread t;
  SlowClients(int port, int loris, int bodies) {
    namespace d = ws::detail;
    const std::string body_head =
        "POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n{";
    for (int i = 0; i < loris + bodies; ++i) {
      auto deadline = d::Deadline::after(10s);
      fds.push_back(d::connect_tcp("127.0.0.1", port, deadline, "slow client", 0));
      const std::string first = i < loris ? "POST /v1/predict HTTP/1.1\r\nHost: x\r\n" : body_head;
      d::send_all(fds.back().get(), first.data(), first.size(), deadline, "slow client", 0);
    }
    t = std::thread([this, loris] {
      const std::string header = "X-Slow: trickle\r\n";
      for (std::size_t k = 0; !stop; ++k) {
        for (std::size_t i = 0; i < fds.size(); ++i) {
          const char c = static_cast<int>(i) < loris ? header[k % header.size()] : 'a';
          (void)::send(fds[i].get(), &c, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        }
        for (int w = 0; w < 10 && !stop; ++w) std::this_thread::sleep_for(10ms);
      }
    });
  }
  ~SlowClients() {
    stop = true;
    t.join();
  }
};

// POST /v1/predict on a new connection: the status (-1: no answer within `t`).
int probe(int port, std::chrono::milliseconds t = 10000ms) {
  httplib::Client c("127.0.0.1", port);
  const auto s = std::chrono::duration_cast<std::chrono::seconds>(t).count();
  c.set_connection_timeout(s, 0);
  c.set_read_timeout(s, 0);
  c.set_write_timeout(s, 0);
  auto r = c.Post("/v1/predict", R"({"inputs": [[0.1, 0.2]]})", "application/json");
  return r ? r->status : -1;
}

std::unique_ptr<http::ControlServer> predict_server(const http::ServerLimits& l) {
  auto s = std::make_unique<http::ControlServer>(l);
  http::apply_limits(*s, {});
  s->post("/v1/predict", [](const httplib::Request& req, httplib::Response& res) {
    auto j = http::detail::body_json(req, res);
    if (!j) return;
    http::detail::reply(res, 200, {{"ok", true}});
  });
  return s;
}

}  // namespace

TEST_CASE("control server: 48 slowloris and 16 slow-body clients hold no worker, and probes are "
          "answered while they trickle",
          "[e2e][http][slow]") {
  http::ServerLimits l;
  l.threads = 2;
  l.max_queued = 8;
  // Deadlines far longer than the test: a probe that waited for a slow client to time out, or
  // found every worker and queue slot held by one (503), fails.
  l.header_timeout = 30s;
  l.read_timeout = 30s;
  l.request_timeout = 60s;
  auto s = predict_server(l);
  Running run(*s);
  SlowClients slow(run.port, 48, 16);
  std::this_thread::sleep_for(300ms);  // every slow client has sent bytes
  std::vector<double> took;
  for (int i = 0; i < 20; ++i) {
    const auto t0 = Clock::now();
    const int status = probe(run.port);
    took.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    INFO("probe " << i);
    CHECK(status == 200);
  }
  std::sort(took.begin(), took.end());
  INFO("probe latency: median " << took[took.size() / 2] << " s, max " << took.back() << " s");
  CHECK(took.back() < 10.0);  // (each would wait 30 s behind a slow client)
  CHECK(s->overloaded() == 0);
  CHECK(s->refused_headers() == 0);  // the slow clients are still being read, none refused
}

TEST_CASE("control server: past max_connections, the connection that has waited longest for its "
          "request goes and a new one is served",
          "[e2e][http][slow]") {
  http::ServerLimits l;
  l.threads = 2;
  l.max_connections = 16;
  l.header_timeout = 30s;
  auto s = predict_server(l);
  Running run(*s);
  SlowClients slow(run.port, 40, 0);
  std::this_thread::sleep_for(300ms);
  for (int i = 0; i < 5; ++i) CHECK(probe(run.port) == 200);
  CHECK(s->evicted() >= 40 - 16);
}

TEST_CASE("demo: a trainer's full sync succeeds beside 64 slowloris and 16 slow-body clients, and "
          "/v1/predict is answered throughout",
          "[e2e][demo][slow]") {
  const int port = ws_test::free_port();
  ws_e2e::Proc server = ws_e2e::start_server(port, {"--header-timeout-ms", "60000"});
  SlowClients slow(port, 64, 16);
  std::atomic<bool> done{false};
  std::atomic<int> probes{0}, failed{0};
  std::thread prober([&] {
    while (!done) {
      ++probes;
      if (probe(port) != 200) ++failed;
      std::this_thread::sleep_for(50ms);
    }
  });
  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  ws_e2e::Proc trainer = ws_e2e::start({WEIGHTSYNC_DEMO_TRAINER, "--server", url, "--syncs", "1"});
  const int rc = trainer.wait(120s);
  done = true;
  prober.join();
  INFO("trainer:\n" << trainer.output() << "\nserver:\n" << server.output());
  CHECK(rc == 0);
  CHECK(trainer.output().find("answers match the trainer's") != std::string::npos);
  CHECK(probes > 0);
  CHECK(failed == 0);
  ws::http::VllmClient c(url, 10s);
  CHECK(c.weight_version() == "step-1");
  c.post("/shutdown", json::object());
  CHECK(server.wait(20s) == 0);
}

}  // namespace ws_test_http_slow_clients_test
