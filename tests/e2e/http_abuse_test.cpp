// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// The demo server under abuse: malformed JSON, wrong types, huge bodies, deep nesting, overflowing
// shapes, a million names, calls out of order, many clients at once, a missing token. Every case
// gets a 4xx with a JSON message, and the server keeps serving /v1/predict with the weights of its
// last sync, within bounded memory.
#include <weightsync/detail/socket.hpp>
#include <weightsync/http/control_plane.hpp>

#include <atomic>
#include <mutex>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "demo_process.hpp"
#include "support/catch.hpp"
#include "support/process.hpp"

using namespace std::chrono_literals;
namespace ws = weightsync;
using nlohmann::json;
using ws_e2e::Proc;

namespace {

const json kInputs = {{"inputs", {{0.1, 0.2}, {-0.5, 0.3}, {0.7, -0.7}, {0.0, 0.9}}}};

// The server's memory in KiB: "VmRSS" now or "VmHWM" (peak).
long memory_kib(pid_t pid, const std::string& key) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(key + ":", 0) == 0) return std::stol(line.substr(key.size() + 1));
  return -1;
}

// Sends `raw` bytes to 127.0.0.1:port and returns what comes back before the server closes the
// connection (or 10 s pass).
std::string raw_exchange(int port, const std::string& raw) {
  namespace d = ws::detail;
  auto deadline = d::Deadline::after(10s);
  d::Fd fd = d::connect_tcp("127.0.0.1", port, deadline, "http", 0);
  try {
    d::send_all(fd.get(), raw.data(), raw.size(), deadline, "http", 0);
  } catch (const ws::error&) {  // the server may answer and close before reading everything
  }
  std::string out;
  char buf[4096];
  while (!deadline.expired()) {
    pollfd p{fd.get(), POLLIN, 0};
    if (::poll(&p, 1, deadline.poll_ms()) <= 0) break;
    const ssize_t k = ::recv(fd.get(), buf, sizeof buf, 0);
    if (k <= 0) break;
    out.append(buf, static_cast<std::size_t>(k));
    if (out.find("\r\n\r\n") != std::string::npos && out.find("}") != std::string::npos) break;
  }
  return out;
}

struct Answer {
  int status = -1;
  std::string error;  // the JSON body's "error", "" when absent
};

Answer post(httplib::Client& h, const std::string& path, const std::string& body,
            const httplib::Headers& headers = {}) {
  auto r = h.Post(path, headers, body, "application/json");
  Answer a;
  if (!r) {
    a.error = "no answer: " + httplib::to_string(r.error());
    return a;
  }
  a.status = r->status;
  auto j = json::parse(r->body, nullptr, false);
  if (!j.is_discarded() && j.is_object() && j.contains("error") && j["error"].is_string())
    a.error = j["error"].get<std::string>();
  return a;
}

// A 4xx with a message.
#define CHECK_REFUSED(answer, code)      \
  do {                                   \
    const Answer a_ = (answer);          \
    INFO("answer: " << a_.status << " " << a_.error); \
    CHECK(a_.status == (code));          \
    CHECK_FALSE(a_.error.empty());       \
  } while (0)

json predict(httplib::Client& h) {
  auto r = h.Post("/v1/predict", kInputs.dump(), "application/json");
  REQUIRE(r);
  REQUIRE(r->status == 200);
  return json::parse(r->body);
}

std::string nested(std::size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

}  // namespace

TEST_CASE("demo server under abuse: every bad request is a 4xx with a message and the weights stay",
          "[e2e][abuse]") {
  const int port = ws_test::free_port();
  Proc server = ws_e2e::start_server(port, {"--max-body-bytes", "8388608"});
  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  // One real sync first, so that there are weights other than the initial ones to keep.
  Proc trainer = ws_e2e::start({WEIGHTSYNC_DEMO_TRAINER, "--server", url, "--syncs", "1"});
  REQUIRE(trainer.wait(60s) == 0);
  httplib::Client h("127.0.0.1", port);
  h.set_read_timeout(30, 0);
  h.set_write_timeout(30, 0);
  const json before = predict(h);
  REQUIRE(before.at("weight_version") == "step-1");
  const long rss_before = memory_kib(server.pid(), "VmRSS");

  {
    for (const std::string path : {"/init_weight_transfer_engine", "/update_weights",
                                   "/finish_weight_update", "/pause", "/start_weight_update"}) {
      INFO(path);
      CHECK_REFUSED(post(h, path, "{not json"), 400);
      CHECK_REFUSED(post(h, path, "[1, 2]"), 400);
      CHECK_REFUSED(post(h, path, "null"), 400);
      CHECK_REFUSED(post(h, path, std::string("{\"a\": \"\xff\xfe\"}")), 400);  // not UTF-8
      CHECK_REFUSED(post(h, path, std::string("{\"a\":\0}", 7)), 400);
    }
    CHECK_REFUSED(post(h, "/v1/predict", "{not json"), 400);
    CHECK_REFUSED(post(h, "/v1/predict", R"({"inputs": [[1e308, 1]]})"), 400);
    CHECK_REFUSED(post(h, "/v1/predict", R"({"inputs": [["x", 1]]})"), 400);
  }
  {
    CHECK_REFUSED(post(h, "/init_weight_transfer_engine", R"({"init_info": "tcp://x"})"), 400);
    CHECK_REFUSED(post(h, "/init_weight_transfer_engine",
                       R"({"init_info": {"master_address": "127.0.0.1", "master_port": "1", "rank_offset": 1, "world_size": 2}})"),
                  400);
    CHECK_REFUSED(post(h, "/init_weight_transfer_engine",
                       R"({"init_info": {"master_address": "127.0.0.1", "master_port": 29500, "rank_offset": 1, "world_size": 2.5}})"),
                  400);
    CHECK_REFUSED(post(h, "/init_weight_transfer_engine",
                       R"({"init_info": {"nccl_unique_id_b64": "####", "rank_offset": 1, "world_size": 2}})"),
                  400);
    CHECK_REFUSED(post(h, "/update_weights", R"({"update_info": {"names": 5, "dtype_names": [], "shapes": []}})"), 400);
    CHECK_REFUSED(post(h, "/update_weights", R"({"update_info": {"names": ["a"], "dtype_names": ["float32"], "shapes": [["1"]]}})"), 400);
    CHECK_REFUSED(post(h, "/update_weights", R"({"update_info": {"names": ["a"], "dtype_names": ["float32"], "shapes": [[-1]]}})"), 400);
    CHECK_REFUSED(post(h, "/update_weights", R"({"update_info": {"names": [], "dtype_names": [], "shapes": [], "surprise": 1}})"), 400);
    CHECK_REFUSED(post(h, "/finish_weight_update", R"({"weight_version": 3})"), 400);
    CHECK_REFUSED(post(h, "/pause", R"({"mode": 7})"), 400);
    CHECK_REFUSED(post(h, "/pause", R"({"mode": "forever"})"), 400);
  }
  {
    CHECK_REFUSED(post(h, "/update_weights",
                       R"({"update_info": {"names": ["a"], "dtype_names": ["float64"], "shapes": [[4294967296, 4294967296, 16]]}})"),
                  400);
    CHECK_REFUSED(post(h, "/update_weights",
                       R"({"update_info": {"names": ["a"], "dtype_names": ["float32"], "shapes": [[18446744073709551615]]}})"),
                  400);
    CHECK_REFUSED(post(h, "/update_weights",
                       R"({"update_info": {"names": ["a"], "dtype_names": ["float32"], "shapes": [[1e400]]}})"),
                  400);
  }
  {
    CHECK_REFUSED(post(h, "/update_weights", "{\"update_info\": " + nested(100000) + "}"), 400);
    CHECK_REFUSED(post(h, "/init_weight_transfer_engine", nested(1000000)), 400);
    CHECK_REFUSED(post(h, "/v1/predict", "{\"inputs\": " + nested(100000) + "}"), 400);
  }
  {
    std::string names = "[";
    for (int i = 0; i < 1000000; ++i) names += i ? ",\"a\"" : "\"a\"";
    names += "]";
    const std::string body =
        R"({"update_info": {"names": )" + names + R"(, "dtype_names": [], "shapes": []}})";
    REQUIRE(body.size() < 8388608);
    CHECK_REFUSED(post(h, "/update_weights", body), 400);
  }
  {
    // Over the limit with a body: 413 with a message.
    CHECK_REFUSED(post(h, "/update_weights", std::string(8388608 + 1, ' ')), 413);
    // A Content-Length of 1 GB that is never sent: refused before the server reads (or allocates) it.
    const std::string reply = raw_exchange(
        port, "POST /update_weights HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              "Content-Length: 1000000000\r\n\r\n{");
    INFO(reply);
    CHECK(reply.rfind("HTTP/1.1 413", 0) == 0);
    CHECK(reply.find("\"error\"") != std::string::npos);
  }
  {
    // The trainer's session is over: no update is open.
    CHECK_REFUSED(post(h, "/update_weights", R"({"update_info": {"names": [], "dtype_names": [], "shapes": []}})"), 409);
    CHECK_REFUSED(post(h, "/finish_weight_update", R"({"weight_version": "evil"})"), 409);
  }
  {
    std::atomic<int> wrong{0};
    std::mutex mu;
    std::string why;
    auto note = [&](const std::string& w) {
      ++wrong;
      std::lock_guard lock(mu);
      if (why.size() < 2000) why += w + "\n";
    };
    std::vector<std::thread> clients;
    for (int i = 0; i < 50; ++i)
      clients.emplace_back([&, i] {
        httplib::Client c("127.0.0.1", port);
        c.set_read_timeout(30, 0);
        Answer a = i % 2 ? post(c, "/update_weights", R"({"update_info": {"names": 1}})")
                         : post(c, "/init_weight_transfer_engine", "{\"init_info\": [" + nested(1000) + "]}");
        if (a.status != 400 || a.error.empty())
          note("bad request answered " + std::to_string(a.status) + " " + a.error);
        auto r = c.Post("/v1/predict", kInputs.dump(), "application/json");
        if (!r)
          note("predict: " + httplib::to_string(r.error()));
        else if (r->status != 200 || json::parse(r->body) != before)
          note("predict answered " + std::to_string(r->status) + " " + r->body);
      });
    for (auto& t : clients) t.join();
    INFO(why);
    CHECK(wrong.load() == 0);
  }

  // Still serving the weights of the last sync, and memory stayed bounded.
  CHECK(predict(h) == before);
  const long rss_after = memory_kib(server.pid(), "VmRSS");
  const long peak = memory_kib(server.pid(), "VmHWM");
  INFO("server RSS before " << rss_before << " KiB, after " << rss_after << " KiB, peak " << peak
                            << " KiB");
  CHECK(rss_after > 0);
  CHECK(peak < 1024 * 1024);  // 1 GiB: a few copies of the largest admitted (8 MiB) body
  CHECK(rss_after < rss_before + 512 * 1024);
  CHECK(post(h, "/shutdown", "").status == 200);
  CHECK(server.wait(10s) == 0);
}

TEST_CASE("demo server with a token: state-changing routes need it and reads stay open",
          "[e2e][abuse]") {
  const int port = ws_test::free_port();
  Proc server = ws_e2e::start_server(port, {"--token", "s3cret"});
  httplib::Client h("127.0.0.1", port);
  for (const std::string path : {"/init_weight_transfer_engine", "/start_weight_update",
                                 "/update_weights", "/finish_weight_update", "/pause", "/resume",
                                 "/shutdown"}) {
    INFO(path);
    CHECK_REFUSED(post(h, path, "{}"), 401);
    CHECK_REFUSED(post(h, path, "{}", {{"Authorization", "Bearer s3creT"}}), 401);
    CHECK_REFUSED(post(h, path, "{}", {{"Authorization", "Bearer s3cret2"}}), 401);
    CHECK_REFUSED(post(h, path, "{}", {{"Authorization", "s3cret"}}), 401);
  }
  auto r = h.Get("/weight_info");
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(predict(h).at("weight_version") == "default");
  const httplib::Headers ok{{"Authorization", "Bearer s3cret"}};
  CHECK_REFUSED(post(h, "/start_weight_update", "{}", ok), 409);  // past the token, then the state
  CHECK(post(h, "/pause", R"({"mode": "keep"})", ok).status == 200);
  CHECK(post(h, "/resume", "", ok).status == 200);
  CHECK(post(h, "/shutdown", "", ok).status == 200);
  CHECK(server.wait(10s) == 0);
}
