// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Updates without a pause (issue 31), end to end: the demo server in shadow mode answers requests
// while a trainer syncs 24 times, 6 of them failing midway on purpose; clients keep it busy the
// whole time, and every answer is checked against the model of the version it names: the logits
// bit for bit, computed here from the weights the trainer wrote for that version.
#include <weightsync/vllm/control_plane.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "demo_model.hpp"
#include "demo_process.hpp"
#include "support/catch.hpp"
#include "support/process.hpp"

// (a namespace per test source: the sources build as unity translation units)
namespace ws_test_shadow_serve_e2e_test {

using namespace std::chrono_literals;
namespace ws = weightsync;
using nlohmann::json;
using ws_e2e::Proc;
using ws_e2e::start;
using ws_e2e::start_server;

namespace {

constexpr int kSyncs = 24, kFailEvery = 4, kPoints = 4, kClients = 2;

// One answer of the server, as a client got it.
struct Answer {
  std::string version;
  std::uint64_t generation = 0;
  bool syncing = false;         // the server was between a start and its end when it computed it
  bool trainer_running = false; // sent while the trainer process ran
  std::array<std::pair<float, float>, kPoints> inputs{};
  std::array<std::array<float, demo::kClasses>, kPoints> logits{};
  std::array<int, kPoints> classes{};
  double latency_us = 0;
};

// A client: sends requests of kPoints random points (asking for the logits) until `stop`.
struct Client {
  std::vector<Answer> answers;
  std::string error;

  void run(int port, unsigned seed, const std::atomic<bool>& stop,
           const std::atomic<bool>& trainer_running, std::atomic<long>& count) {
    httplib::Client h("127.0.0.1", port);
    h.set_keep_alive(true);
    h.set_tcp_nodelay(true);  // (else Nagle and the delayed ACK cost 40 ms a request)
    h.set_connection_timeout(5, 0);
    h.set_read_timeout(10, 0);
    h.set_write_timeout(10, 0);
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> coord(-1.2f, 1.2f);
    try {
      while (!stop) {
        Answer a;
        a.trainer_running = trainer_running;
        json inputs = json::array();
        for (auto& p : a.inputs) {
          p = {coord(rng), coord(rng)};
          inputs.push_back({p.first, p.second});  // a float as a double: read back exactly
        }
        const std::string body = json{{"inputs", inputs}, {"logits", true}}.dump();
        const auto t0 = std::chrono::steady_clock::now();
        auto r = h.Post("/v1/predict", body, "application/json");
        a.latency_us =
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                .count();
        if (!r) throw std::runtime_error("request failed: " + httplib::to_string(r.error()));
        if (r->status != 200)
          throw std::runtime_error("answered " + std::to_string(r->status) + ": " + r->body);
        const auto j = json::parse(r->body);
        a.version = j.at("weight_version").get<std::string>();
        a.generation = j.at("generation").get<std::uint64_t>();
        a.syncing = j.at("syncing").get<bool>();
        const auto& l = j.at("logits");
        const auto& c = j.at("classes");
        if (l.size() != kPoints || c.size() != kPoints)
          throw std::runtime_error("an answer without one result per input: " + r->body);
        for (int i = 0; i < kPoints; ++i) {
          a.classes[i] = c[i].get<int>();
          for (int k = 0; k < demo::kClasses; ++k)
            a.logits[i][k] = static_cast<float>(l[i].at(k).get<double>());
        }
        answers.push_back(a);
        ++count;
      }
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
};

// A temporary directory, removed with the handle.
struct TempDir {
  std::string path;
  TempDir() {
    std::string t = "/tmp/ws_shadow_serve_XXXXXX";
    if (!::mkdtemp(t.data())) throw std::runtime_error("mkdtemp failed");
    path = t;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto k = static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(k, v.size() - 1)];
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

std::size_t count_of(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (auto p = text.find(needle); p != std::string::npos; p = text.find(needle, p + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE(
    "shadow serving: the server answers through 24 syncs (6 failing midway) without a pause, "
    "and every answer is exactly the model of the version it names",
    "[e2e][demo][shadow]") {
  const int port = ws_test::free_port();
  Proc server = start_server(port, {"--shadow", "on", "--threads", "8"});
  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  TempDir dir;

  // Clients busy before, during and a moment after the syncs.
  std::atomic<bool> stop{false}, trainer_running{false};
  std::atomic<long> count{0};
  std::vector<Client> clients(kClients);
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i)
    threads.emplace_back([&, i] {
      clients[static_cast<std::size_t>(i)].run(port, 100u + static_cast<unsigned>(i), stop,
                                               trainer_running, count);
    });
  struct Joiner {  // the clients stop however the test ends
    std::atomic<bool>& stop;
    std::vector<std::thread>& threads;
    ~Joiner() {
      stop = true;
      for (auto& t : threads)
        if (t.joinable()) t.join();
    }
  } joiner{stop, threads};
  for (int i = 0; i < 500 && count < 200; ++i) std::this_thread::sleep_for(10ms);

  // The trainer: no pause, a slow sync (3 ms before each of its 12 pieces), every 4th failing.
  trainer_running = true;
  Proc trainer = start({WEIGHTSYNC_DEMO_TRAINER, "--server", url, "--shadow", "on", "--syncs",
                        std::to_string(kSyncs), "--fail-every", std::to_string(kFailEvery),
                        "--weights-dir", dir.path, "--piece-delay-ms", "3"});
  const int rc = trainer.wait(150s);
  trainer_running = false;
  const long after = count;
  for (int i = 0; i < 500 && count < after + 200; ++i) std::this_thread::sleep_for(10ms);
  stop = true;
  for (auto& t : threads) t.join();
  INFO("trainer:\n" << trainer.output() << "\nserver:\n" << server.output());
  REQUIRE(rc == 0);
  for (const auto& c : clients) REQUIRE(c.error.empty());

  // The versions: "default" (the server's own), then what the trainer wrote, in the order sent.
  std::map<std::string, demo::Mlp> weights;
  demo::init_random(weights["default"], demo::kServerInitSeed);
  std::vector<std::string> published{"default"};  // published[g]: generation g
  std::vector<std::string> failed;
  {
    std::ifstream f(dir.path + "/syncs.txt");
    std::string version, outcome;
    while (f >> version >> outcome) {
      if (outcome == "ok") {
        published.push_back(version);
        weights[version] = demo::load(dir.path + "/" + version + ".bin");
      } else {
        REQUIRE(outcome == "failed");
        failed.push_back(version);
      }
    }
  }
  REQUIRE(published.size() - 1 + failed.size() == static_cast<std::size_t>(kSyncs));
  REQUIRE(failed.size() == static_cast<std::size_t>(kSyncs / kFailEvery));
  // Each failed sync failed on the server too, and left the live version serving.
  CHECK(count_of(server.output(), "update failed, still serving") == failed.size());

  // Every answer against the model of the version it names.
  std::size_t requests = 0, during_trainer = 0, syncing = 0, wrong = 0, unknown = 0,
              out_of_order = 0;
  // Latency: no trainer at all (before and after it), the trainer between syncs (training, its
  // own checks), during a sync.
  std::vector<double> idle_us, between_us, syncing_us;
  std::map<std::string, std::size_t> per_version;
  std::string first_wrong;
  for (const auto& c : clients) {
    std::uint64_t last_generation = 0;
    for (const auto& a : c.answers) {
      ++requests;
      during_trainer += a.trainer_running;
      syncing += a.syncing;
      (a.syncing ? syncing_us : a.trainer_running ? between_us : idle_us).push_back(a.latency_us);
      ++per_version[a.version];
      if (a.generation < last_generation) ++out_of_order;  // one client's answers never go back
      last_generation = a.generation;
      const auto w = weights.find(a.version);
      if (w == weights.end() || a.generation >= published.size() ||
          published[a.generation] != a.version) {
        if (++unknown == 1 && first_wrong.empty())
          first_wrong = "version '" + a.version + "' generation " + std::to_string(a.generation) +
                        " was never published as such";
        continue;
      }
      bool ok = true;
      for (int i = 0; i < kPoints; ++i) {
        demo::Activations want;
        demo::forward(w->second, a.inputs[i].first, a.inputs[i].second, want);
        for (int k = 0; k < demo::kClasses; ++k) ok = ok && same_bits(a.logits[i][k], want.logits[k]);
        ok = ok && a.classes[i] == demo::argmax(want.logits);
      }
      if (!ok && ++wrong == 1 && first_wrong.empty())
        first_wrong = "an answer naming '" + a.version + "' (syncing " +
                      (a.syncing ? "yes" : "no") + ") is not that version's model";
    }
  }
  std::size_t versions_seen = 0;
  for (const auto& v : published) versions_seen += per_version.count(v) > 0;
  for (const auto& v : failed) CHECK(per_version.count(v) == 0);  // a failed sync never serves

  ws::http::VllmClient control(url, 5s);
  const auto stats = control.get("/v1/stats");
  const double max_wait_us = static_cast<double>(stats.at("max_weights_wait_ns").get<std::uint64_t>()) / 1000.0;
  const double max_wait_syncing_us =
      static_cast<double>(stats.at("max_weights_wait_while_syncing_ns").get<std::uint64_t>()) / 1000.0;
  std::printf(
      "[shadow serving] %zu requests (%zu while the trainer ran, %zu computed during a sync), "
      "%d syncs (%zu published, %zu failed midway on purpose), %zu of %zu published versions "
      "seen by the clients; wrong answers %zu, unknown versions %zu, out of order %zu; longest "
      "wait for a snapshot: %.1f us (%.1f us during a sync); latency p50/p99 (requests): no "
      "trainer %.0f/%.0f us (%zu), trainer between syncs %.0f/%.0f us (%zu), during a sync "
      "%.0f/%.0f us (%zu)\n",
      requests, during_trainer, syncing, kSyncs, published.size() - 1, failed.size(),
      versions_seen, published.size(), wrong, unknown, out_of_order, max_wait_us,
      max_wait_syncing_us, percentile(idle_us, 0.5), percentile(idle_us, 0.99), idle_us.size(),
      percentile(between_us, 0.5), percentile(between_us, 0.99), between_us.size(),
      percentile(syncing_us, 0.5), percentile(syncing_us, 0.99), syncing_us.size());
  std::fflush(stdout);

  INFO(first_wrong);
  CHECK(wrong == 0);
  CHECK(unknown == 0);
  CHECK(out_of_order == 0);
  CHECK(during_trainer >= 1000);
  CHECK(syncing >= 100);  // the syncs were really served through
  CHECK(versions_seen >= published.size() / 2);
  CHECK(control.weight_version() == published.back());
  CHECK_FALSE(control.is_paused());  // nobody paused it
  control.post("/shutdown", json::object());
  CHECK(server.wait(10s) == 0);
}

TEST_CASE("shadow serving: in place (the default), a failed sync leaves the server as it was",
          "[e2e][demo][shadow]") {
  const int port = ws_test::free_port();
  Proc server = start_server(port);
  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  Proc trainer =
      start({WEIGHTSYNC_DEMO_TRAINER, "--server", url, "--syncs", "4", "--fail-every", "2"});
  const int rc = trainer.wait(60s);
  INFO("trainer:\n" << trainer.output() << "\nserver:\n" << server.output());
  REQUIRE(rc == 0);  // the trainer checks the server after each sync, failed or not
  CHECK(count_of(trainer.output(), "failed on purpose (") == 2);
  CHECK(trainer.output().find("wrong item") != std::string::npos);
  CHECK(trainer.output().find("abort") != std::string::npos);
  ws::http::VllmClient c(url, 5s);
  CHECK(c.weight_version() == "step-3");
  CHECK_FALSE(c.is_paused());
  c.post("/shutdown", json::object());
  CHECK(server.wait(10s) == 0);
}

TEST_CASE("shadow serving: a trainer without --shadow is refused by a shadow server, saying why",
          "[e2e][demo][shadow]") {
  const int port = ws_test::free_port();
  Proc server = start_server(port, {"--shadow", "on"});
  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  Proc trainer = start({WEIGHTSYNC_DEMO_TRAINER, "--server", url, "--syncs", "1"});
  const int rc = trainer.wait(60s);
  INFO("trainer:\n" << trainer.output() << "\nserver:\n" << server.output());
  CHECK(rc == 2);
  CHECK(trainer.output().find("acknowledge") != std::string::npos);
  ws::http::VllmClient c(url, 5s);
  CHECK(c.weight_version() == "default");
  c.post("/shutdown", json::object());
  CHECK(server.wait(10s) == 0);
}

}  // namespace ws_test_shadow_serve_e2e_test
