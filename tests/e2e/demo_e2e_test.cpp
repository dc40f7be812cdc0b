// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// End-to-end: the demo's inference server and trainer as real processes on 127.0.0.1.
#include <weightsync/vllm/control_plane.hpp>

#include <signal.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "demo_process.hpp"
#include "support/catch.hpp"
#include "support/child.hpp"
#include "support/process.hpp"

// (a namespace per test source: the sources build as unity translation units)
namespace ws_test_demo_e2e_test {

using namespace std::chrono_literals;
namespace ws = weightsync;
using nlohmann::json;

namespace {

using ws_e2e::Proc;
using ws_e2e::start;
using ws_e2e::start_server;

std::vector<int> predict(ws::http::VllmClient& c) {
  return c.post("/v1/predict", {{"inputs", {{0.1, 0.2}, {-0.5, 0.3}, {0.7, -0.7}, {0.0, 0.9}}}})
      .at("classes")
      .get<std::vector<int>>();
}

}  // namespace

TEST_CASE("demo: a trainer syncs twice and the server answers as the trainer does", "[e2e][demo]") {
  const int port = ws_test::free_port();
  Proc server = start_server(port);
  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  Proc trainer = start({WEIGHTSYNC_DEMO_TRAINER, "--server", url, "--syncs", "2"});
  const int rc = trainer.wait(60s);
  INFO("trainer:\n" << trainer.output() << "\nserver:\n" << server.output());
  // The trainer itself checks that the server's answers match its own after each sync.
  REQUIRE(rc == 0);
  CHECK(trainer.output().find("sync 2") != std::string::npos);
  CHECK(trainer.output().find("answers match the trainer's") != std::string::npos);
  ws::http::VllmClient c(url, 5s);
  CHECK(c.weight_version() == "step-2");
  CHECK_FALSE(c.is_paused());
  CHECK(c.get_world_size() == 2);
  c.post("/shutdown", json::object());
  CHECK(server.wait(10s) == 0);
}

TEST_CASE("demo: a trainer killed mid-sync leaves the server serving the old weights",
          "[e2e][demo]") {
  const int port = ws_test::free_port();
  Proc server = start_server(port);
  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  Proc first =
      start({WEIGHTSYNC_DEMO_TRAINER, "--server", url, "--syncs", "3", "--die-at-sync", "2"});
  const int rc = first.wait(60s);
  INFO("trainer:\n" << first.output() << "\nserver:\n" << server.output());
  REQUIRE(rc == 128 + SIGKILL);
  ws::http::VllmClient c(url, 5s);
  // The server noticed, kept the weights of sync 1, and still answers.
  for (int i = 0; i < 200 && server.output().find("update failed") == std::string::npos; ++i)
    std::this_thread::sleep_for(25ms);
  CHECK(server.output().find("update failed, still serving 'step-1'") != std::string::npos);
  CHECK(c.weight_version() == "step-1");
  const auto before = predict(c);
  CHECK(before.size() == 4);
  // A new trainer can initialize again and sync.
  Proc second = start({WEIGHTSYNC_DEMO_TRAINER, "--server", url, "--syncs", "1"});
  INFO("second trainer:\n" << second.output());
  REQUIRE(second.wait(60s) == 0);
  CHECK(c.weight_version() == "step-1");  // its first sync is also named step-1
  c.post("/shutdown", json::object());
  CHECK(server.wait(10s) == 0);
}

TEST_CASE("demo server: bad requests get 400, calls out of order 409", "[e2e][demo]") {
  const int port = ws_test::free_port();
  Proc server = start_server(port);
  httplib::Client h("127.0.0.1", port);
  auto status = [&](const char* path, const std::string& body) {
    auto r = h.Post(path, body, "application/json");
    return r ? r->status : -1;
  };
  CHECK(status("/init_weight_transfer_engine", "{not json") == 400);
  CHECK(status("/init_weight_transfer_engine", "{}") == 400);  // missing init_info
  CHECK(status("/init_weight_transfer_engine", R"({"init_info": {"world_size": 2}})") == 400);
  CHECK(
      status(
          "/init_weight_transfer_engine",
          R"({"init_info": {"master_address": "127.0.0.1", "master_port": 0, "rank_offset": 1, "world_size": 2}})") ==
      400);
  // vLLM's nccl_m2n init info is read as one: its own fault is named, not an unknown key.
  auto m2n = h.Post("/init_weight_transfer_engine",
                    R"({"init_info": {"master_address": "127.0.0.1", "master_port": 1,
                        "rank_offset": 1, "world_size": 3, "src_mesh_dims": [1, 1],
                        "dst_mesh_dims": [1, 1], "names": [], "dtype_names": [], "shapes": [],
                        "src_placements": [], "nccl_unique_id_b64": null, "max_cta": null}})",
                    "application/json");
  REQUIRE(m2n);
  CHECK(m2n->status == 400);
  CHECK(m2n->body.find("dst_mesh_dims") != std::string::npos);
  CHECK(m2n->body.find("must cover the 2 workers") != std::string::npos);
  CHECK(status("/update_weights", "{}") == 400);  // missing update_info
  CHECK(
      status("/update_weights",
             R"({"update_info": {"names": ["a"], "dtype_names": ["float9"], "shapes": [[1]]}})") ==
      400);
  CHECK(status("/update_weights",
               R"({"update_info": {"names": [], "dtype_names": [], "shapes": []}})") == 409);
  CHECK(status("/start_weight_update", "{}") == 409);  // before init
  CHECK(status("/finish_weight_update", "{}") == 409);
  CHECK(status("/pause", R"({"mode": "sometimes"})") == 400);
  CHECK(status("/pause", R"({"mode": "wait"})") == 200);
  auto r = h.Get("/is_paused");
  REQUIRE(r);
  CHECK(r->body.find("true") != std::string::npos);
  CHECK(status("/resume", "") == 200);
  CHECK(status("/v1/predict", R"({"inputs": [[1]]})") == 400);
  CHECK(status("/shutdown", "") == 200);
  CHECK(server.wait(10s) == 0);
}

}  // namespace ws_test_demo_e2e_test
