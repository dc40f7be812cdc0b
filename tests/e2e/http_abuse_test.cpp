// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// The demo server under abuse: malformed JSON, wrong types, huge bodies, deep nesting (up to the
// body limit), overflowing shapes, a million names, lifecycle calls out of order (init, start,
// update, finish, with an update in flight), many clients at once, a missing token. Every case
// gets a 4xx with a JSON message, and the server keeps serving /v1/predict with the weights of its
// last sync, within bounded memory.
#include <weightsync/detail/socket.hpp>
#include <weightsync/vllm/control_plane.hpp>

#include <atomic>
#include <fstream>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "demo_model.hpp"
#include "demo_process.hpp"
#include "support/catch.hpp"
#include "support/process.hpp"

// (a namespace per test source: the sources build as unity translation units)
namespace ws_test_http_abuse_test {

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
    // Nesting at the body limit: refused before parsing (nlohmann, unbounded, would spend ~70 bytes
    // per level: ~0.3 GB for 4 M levels, ~0.6 GB for 8 MiB of '['). First, while the server's
    // peak (VmHWM) is still its baseline, so that the peak measures these requests.
    const std::size_t limit = 8388608;
    const std::string head = "{\"update_info\": ";
    const std::size_t levels = (limit - head.size() - 1) / 2;
    std::string deep = head + nested(levels) + "}";
    deep.append(limit - deep.size(), ' ');
    REQUIRE(deep.size() == limit);
    const long peak_before = memory_kib(server.pid(), "VmHWM");
    const Answer a = post(h, "/update_weights", deep);
    CHECK_REFUSED(a, 400);
    CHECK(a.error.find("nested deeper than 64") != std::string::npos);
    CHECK_REFUSED(post(h, "/init_weight_transfer_engine", std::string(limit, '[')), 400);
    CHECK_REFUSED(post(h, "/v1/predict", std::string(limit, '{')), 400);
    // Bodies nested exactly to the limit still reach the route (and fail on their fields).
    const Answer at_limit = post(h, "/update_weights", "{\"update_info\": " + nested(63) + "}");
    CHECK_REFUSED(at_limit, 400);
    CHECK(at_limit.error.find("nested deeper") == std::string::npos);
    // (brackets inside strings do not count)
    const Answer in_string = post(h, "/finish_weight_update",
                                  "{\"weight_version\": \"" + std::string(1000, '[') + "\"}");
    CHECK(in_string.error.find("nested deeper") == std::string::npos);
    const long peak_after = memory_kib(server.pid(), "VmHWM");
    INFO("server peak before " << peak_before << " KiB, after " << peak_after << " KiB");
    // Seen: +40 MiB with the limit (the bodies and their copies; more under ASan, whose
    // quarantine keeps freed bodies), +900 MiB without it.
    CHECK(peak_after - peak_before < 256 * 1024);
  }
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

TEST_CASE("demo server: lifecycle calls out of order are 409s with a message and the session "
          "survives",
          "[e2e][abuse]") {
  const int port = ws_test::free_port();
  Proc server = ws_e2e::start_server(port);
  httplib::Client h("127.0.0.1", port);
  h.set_read_timeout(60, 0);
  const std::string update = json{{"update_info", {{"names", json::array()},
                                                   {"dtype_names", json::array()},
                                                   {"shapes", json::array()}}}}.dump();
  // Before init: nothing but init is allowed.
  CHECK_REFUSED(post(h, "/start_weight_update", "{}"), 409);
  CHECK_REFUSED(post(h, "/update_weights", update), 409);
  CHECK_REFUSED(post(h, "/finish_weight_update", "{}"), 409);

  // This test is the trainer (in process, host backend), with the demo's HF pieces.
  ws::NcclInitInfo info;
  info.master_address = "127.0.0.1";
  info.master_port = ws_test::free_port();
  info.world_size = 2;
  info.rank_offset = 1;
  info.packed = true;
  info.packed_buffer_size_bytes = 4096;  // 3 chunks: [0, 7) [7, 9) [9, 12)
  ws::TrainerEngine::Options to;
  to.engine.timeout = 30s;
  ws::TrainerEngine trainer(to);
  auto init = std::async(std::launch::async, [&] {
    return post(h, "/init_weight_transfer_engine", json{{"init_info", info}}.dump());
  });
  trainer.trainer_init(info);
  REQUIRE(init.get().status == 200);
  CHECK_REFUSED(post(h, "/update_weights", update), 409);  // not started
  CHECK_REFUSED(post(h, "/finish_weight_update", "{}"), 409);
  REQUIRE(post(h, "/start_weight_update", "{}").status == 200);
  CHECK_REFUSED(post(h, "/start_weight_update", "{}"), 409);  // started twice

  // An update in flight: the trainer's source holds back tensor 8. It is taken for chunk 1, after
  // the handshake, which needs the server's side: the server is then inside update_weights. (The
  // engine asks a source for a tensor only when its chunk is taken, see AnyTensorRange; before
  // that, taking chunk 0 read two tensors ahead and this test raced with the server's join.)
  const auto metas = demo::hf_metas();
  demo::Mlp model;
  demo::init_random(model, 99);
  const auto ptrs = demo::hf_pointers(model);
  std::promise<void> reached, release;
  auto released = release.get_future().share();
  struct Source {
    const std::vector<ws::TensorMeta>& m;
    const std::vector<const void*>& p;
    std::promise<void>& reached;
    std::shared_future<void> released;
    std::vector<ws::TensorMeta> metas() const { return m; }
    ws::AnyTensorRange iterate() {
      return ws::AnyTensorRange([this, i = std::size_t{0}](ws::SourceTensorRef& out) mutable {
        if (i == m.size()) return false;
        if (i == 8) {
          reached.set_value();
          released.wait();
        }
        out = {&m[i], p[i]};
        ++i;
        return true;
      });
    }
  } src{metas, ptrs, reached, released};
  auto in_flight = std::async(std::launch::async, [&] {
    return post(h, "/update_weights", json{{"update_info", trainer.update_info(metas)}}.dump());
  });
  auto sent = std::async(std::launch::async, [&] { return trainer.send_weights(src); });
  const bool held = reached.get_future().wait_for(30s) == std::future_status::ready;
  {
    INFO("the trainer never reached tensor 8");
    CHECK(held);
  }
  if (held) {
    httplib::Client c("127.0.0.1", port);  // (h's connection is busy with the update)
    c.set_read_timeout(30, 0);
    const Answer reinit = post(c, "/init_weight_transfer_engine", json{{"init_info", info}}.dump());
    CHECK_REFUSED(reinit, 409);  // init twice, while an update runs
    CHECK(reinit.error.find("while update_weights is running") != std::string::npos);
    CHECK_REFUSED(post(c, "/start_weight_update", "{}"), 409);
    const Answer second = post(c, "/update_weights", update);
    CHECK_REFUSED(second, 409);
    CHECK(second.error.find("another update_weights is running") != std::string::npos);
    const Answer early = post(c, "/finish_weight_update", R"({"weight_version": "early"})");
    CHECK_REFUSED(early, 409);
    CHECK(early.error.find("while update_weights is running") != std::string::npos);
  }
  release.set_value();
  CHECK(sent.get().tensors == metas.size());
  CHECK(in_flight.get().status == 200);
  REQUIRE(post(h, "/finish_weight_update", R"({"weight_version": "lifecycle-1"})").status == 200);

  // After finish: no session.
  const Answer late = post(h, "/update_weights", update);
  CHECK_REFUSED(late, 409);
  CHECK(late.error.find("without start_weight_update") != std::string::npos);
  CHECK_REFUSED(post(h, "/finish_weight_update", R"({"weight_version": "evil"})"), 409);
  // A new session can still start and end (no version: the version stays).
  CHECK(post(h, "/start_weight_update", "{}").status == 200);
  CHECK(post(h, "/finish_weight_update", "{}").status == 200);

  // The server serves what the trainer sent, under the version of the session that sent it.
  const json answer = predict(h);
  CHECK(answer.at("weight_version") == "lifecycle-1");
  std::vector<int> expected;
  for (const auto& p : kInputs.at("inputs"))
    expected.push_back(demo::predict(model, p[0].get<float>(), p[1].get<float>()));
  CHECK(answer.at("classes").get<std::vector<int>>() == expected);
  trainer.shutdown();
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

}  // namespace ws_test_http_abuse_test
