// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// The HTTP control plane against malformed bytes (issue 60, items 1 and 3), in process: every
// byte sequence gets an answer or a close, never a leak; a malformed request gets 400 and its
// connection closes; messages quote request bytes escaped; a 500 says nothing internal.
#include <dirent.h>

#include <weightsync/detail/socket.hpp>
#include <weightsync/log.hpp>
#include <weightsync/vllm/control_plane.hpp>
#include <weightsync/vllm/http_server.hpp>

#include <atomic>
#include <cstdio>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "support/catch.hpp"

// (a namespace per test source: the sources build as unity translation units)
namespace ws_test_http_malformed_test {

using namespace std::chrono_literals;
namespace ws = weightsync;
namespace http = weightsync::http;
using nlohmann::json;

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

// `s` printable: other bytes as \\xHH, at most `max` of them.
std::string shown(const std::string& s, std::size_t max = 200) {
  std::string out;
  for (std::size_t i = 0; i < s.size() && i < max; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7F) {
      out += static_cast<char>(c);
    } else {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02X", c);
      out += b;
    }
  }
  return out;
}

// The file descriptors this process holds.
int open_fds() {
  int n = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (const dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') ++n;
    ::closedir(d);
  }
  return n - 1;  // (the directory's own)
}

struct Reply {
  int status = -1;       // -1: no answer
  std::string text;      // all that came back
  bool closed = false;   // the server closed within the deadline
};

// Sends `raw`, half-closes when asked, and reads until the server closes or `t` passes.
Reply exchange(int port, const std::string& raw, bool half_close,
               std::chrono::milliseconds t = 10000ms) {
  namespace d = ws::detail;
  auto deadline = d::Deadline::after(t);
  d::Fd fd = d::connect_tcp("127.0.0.1", port, deadline, "http", 0);
  try {
    d::send_all(fd.get(), raw.data(), raw.size(), deadline, "http", 0);
  } catch (const ws::error&) {  // the server may answer and close before reading everything
  }
  if (half_close) ::shutdown(fd.get(), SHUT_WR);
  Reply r;
  char buf[4096];
  while (!deadline.expired()) {
    pollfd p{fd.get(), POLLIN, 0};
    if (::poll(&p, 1, deadline.poll_ms()) <= 0) break;
    const ssize_t k = ::recv(fd.get(), buf, sizeof buf, 0);
    if (k <= 0) {
      r.closed = true;
      break;
    }
    r.text.append(buf, static_cast<std::size_t>(k));
  }
  if (r.text.rfind("HTTP/1.1 ", 0) == 0) r.status = std::stoi(r.text.substr(9, 3));
  return r;
}

// The JSON body of an answer (discarded when it is none).
json body_of(const Reply& r) {
  const auto p = r.text.find("\r\n\r\n");
  return json::parse(p == std::string::npos ? std::string() : r.text.substr(p + 4), nullptr, false);
}

const std::string kProbe =
    "POST /v1/predict HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 14\r\n\r\n"
    "{\"inputs\": []}";

// A server with the vLLM routes (an engine never initialized) and a /v1/predict that parses its
// JSON body, under small limits.
struct Fixture {
  ws::WeightTransferEngine engine;
  http::ServerLimits limits;
  std::unique_ptr<http::ControlServer> server;
  Fixture() {
    limits.threads = 4;
    limits.max_header_bytes = 8u << 10;
    limits.max_header_count = 20;
    limits.header_timeout = 2000ms;
    server = std::make_unique<http::ControlServer>(limits);
    http::RouteOptions o;
    o.max_body_bytes = 1u << 20;
    http::apply_limits(*server, o);
    http::add_vllm_routes(*server, engine, {}, o);
    server->post("/v1/predict", [](const httplib::Request& req, httplib::Response& res) {
      auto j = http::detail::body_json(req, res);
      if (!j) return;
      http::detail::reply(res, 200, {{"ok", true}});
    });
    server->get("/boom", [](const httplib::Request&, httplib::Response&) {
      throw std::runtime_error("secret internal detail \xff\xfe");
    });
  }
};

struct Kind {
  const char* name;
  std::string raw;
  int status;
};

std::string post_with(const std::string& headers, const std::string& body = {}) {
  return "POST /v1/predict HTTP/1.1\r\nHost: x\r\n" + headers + "\r\n" + body;
}

// Malformed requests, each with the status it must get.
std::vector<Kind> malformed_kinds() {
  std::string many;
  for (int i = 0; i < 30; ++i) many += "X-H" + std::to_string(i) + ": v\r\n";
  return {
      {"Content-Length not UTF-8", post_with("Content-Length: \xff\r\n"), 400},
      {"Content-Length negative", post_with("Content-Length: -1\r\n"), 400},
      {"Content-Length overflows", post_with("Content-Length: 99999999999999999999999\r\n"), 400},
      {"two Content-Lengths", post_with("Content-Length: 2\r\nContent-Length: 3\r\n", "{}"), 400},
      {"Content-Length and chunks", post_with("Content-Length: 2\r\nTransfer-Encoding: chunked\r\n", "{}"), 400},
      {"body over the limit", post_with("Content-Length: 99999999\r\n"), 413},
      {"unknown Transfer-Encoding", post_with("Transfer-Encoding: gzip\r\n"), 501},
      {"chunk size not hex", post_with("Transfer-Encoding: chunked\r\n", "zz\r\n{}\r\n0\r\n\r\n"), 400},
      {"chunk size overflows", post_with("Transfer-Encoding: chunked\r\n", "fffffffffffffffffffff\r\n"), 400},
      {"chunk not followed by CRLF", post_with("Transfer-Encoding: chunked\r\n", "2\r\n{}XY0\r\n\r\n"), 400},
      {"chunk size not UTF-8", post_with("Transfer-Encoding: chunked\r\n", "\xff\r\n"), 400},
      {"garbage request line", "\x16\x03\x01\x02\x00\x01 hello\r\n\r\n", 400},
      {"HTTP/0.9", "GET /\r\n\r\n", 400},
      {"HTTP/2.0", "GET /is_paused HTTP/2.0\r\nHost: x\r\n\r\n", 505},
      {"unknown method", "BREW /pot HTTP/1.1\r\nHost: x\r\n\r\n", 501},
      {"method not UTF-8", "P\xffST /v1/predict HTTP/1.1\r\nHost: x\r\n\r\n", 400},
      {"path not UTF-8", "GET /v1/\xff\xfe HTTP/1.1\r\nHost: x\r\n\r\n", 400},
      {"path %FF", "GET /is_paused%FF HTTP/1.1\r\nHost: x\r\n\r\n", 400},
      {"query value %FF", "POST /pause?mode=%FF HTTP/1.1\r\nHost: x\r\n\r\n", 400},
      {"query name %FE", "POST /pause?%FE=1 HTTP/1.1\r\nHost: x\r\n\r\n", 400},
      {"header name not UTF-8", post_with("X-\xff: 1\r\nContent-Length: 2\r\n", "{}"), 400},
      {"header value not UTF-8", post_with("X-A: \xff\xfe\r\nContent-Length: 2\r\n", "{}"), 400},
      {"header value with NUL", post_with(std::string("X-A: a\0b\r\n", 10) + "Content-Length: 2\r\n", "{}"), 400},
      {"header without colon", post_with("NoColonHere\r\n"), 400},
      {"blank before colon", post_with("Host : x\r\n"), 400},
      {"folded header", post_with("X-A: a\r\n b\r\n"), 400},
      {"bare LF", "GET /is_paused HTTP/1.1\nHost: x\n\n", 400},
      {"too many headers", post_with(many), 431},
      {"headers too large", post_with("X-Big: " + std::string(9000, 'b') + "\r\n"), 431},
      {"JSON body not UTF-8", post_with("Content-Length: 16\r\n", "{\"inputs\":\"\xff\xfe\"}"), 400},
      {"cut short", post_with("Content-Length: 10\r\n", "{\"in"), 400},
  };
}

}  // namespace

TEST_CASE("control server: a thousand requests whose Content-Length is not UTF-8 leak no socket",
          "[e2e][http][malformed]") {
  Fixture f;
  Running run(*f.server);
  REQUIRE(exchange(run.port, kProbe, false).status == 200);
  const int before = open_fds();
  const std::string raw = post_with("Content-Length: \xff\r\n");
  for (int i = 0; i < 1000; ++i) {
    const Reply r = exchange(run.port, raw, false, 5000ms);
    INFO("request " << i << ": " << shown(r.text, 300));
    REQUIRE(r.status == 400);
    REQUIRE(r.closed);
  }
  // The last connections close as their workers finish (the client saw the close already).
  for (int i = 0; i < 500 && open_fds() > before; ++i) std::this_thread::sleep_for(10ms);
  CHECK(open_fds() <= before);
  const Reply probe = exchange(run.port, kProbe, false);
  CHECK(probe.status == 200);
}

TEST_CASE("control server: 10,000 malformed requests of 31 kinds: each answered as it must be, fds "
          "flat, probes answered throughout",
          "[e2e][http][malformed]") {
  Fixture f;
  Running run(*f.server);
  const auto kinds = malformed_kinds();
  // Each kind once first, with its message checked.
  for (const auto& k : kinds) {
    const Reply r = exchange(run.port, k.raw, true);
    INFO(k.name << ": " << shown(r.text, 400));
    CHECK(r.status == k.status);
    CHECK(r.closed);
    const json b = body_of(r);
    CHECK((b.is_object() && b.contains("error") && b["error"].is_string()));
  }
  REQUIRE(exchange(run.port, kProbe, false).status == 200);
  const int before = open_fds();
  constexpr int kThreads = 4, kPerThread = 2500, kProbeEvery = 250;
  std::atomic<int> wrong{0}, probes_failed{0}, probes{0}, peak{0};
  std::mutex mu;
  std::string first_wrong;
  std::vector<std::thread> clients;
  for (int t = 0; t < kThreads; ++t)
    clients.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const Kind& k = kinds[static_cast<std::size_t>(t * kPerThread + i) % kinds.size()];
        const Reply r = exchange(run.port, k.raw, true);
        if (r.status != k.status || !r.closed) {
          std::lock_guard lock(mu);
          if (wrong++ == 0)
            first_wrong = std::string(k.name) + ": " + shown(r.text, 300);
        }
        if (i % kProbeEvery == 0) {
          ++probes;
          if (exchange(run.port, kProbe, false).status != 200) ++probes_failed;
          const int n = open_fds();
          for (int p = peak.load(); n > p && !peak.compare_exchange_weak(p, n);) {
          }
        }
      }
    });
  for (auto& c : clients) c.join();
  INFO("first wrong answer: " << first_wrong);
  CHECK(wrong == 0);
  CHECK(probes == kThreads * (kPerThread / kProbeEvery));
  CHECK(probes_failed == 0);
  // In flight at most: each client's socket and the server's side of it, and the workers'.
  CHECK(peak <= before + 2 * kThreads + static_cast<int>(f.limits.threads) + 4);
  for (int i = 0; i < 500 && open_fds() > before; ++i) std::this_thread::sleep_for(10ms);
  CHECK(open_fds() <= before);
  CHECK(exchange(run.port, kProbe, false).status == 200);
}

TEST_CASE("control server: a malformed request gets 400 and its connection closes, holding no "
          "worker and sending nothing later",
          "[e2e][http][malformed]") {
  Fixture f;
  f.limits.threads = 1;
  f.server = std::make_unique<http::ControlServer>(f.limits);
  f.server->post("/v1/predict", [](const httplib::Request&, httplib::Response& res) {
    http::detail::reply(res, 200, {{"ok", true}});
  });
  Running run(*f.server);
  for (const std::string& raw :
       {std::string("garbage\r\nmore garbage\r\n\r\n"), std::string("GET /\r\n\r\nGET /\r\n\r\n"),
        post_with("Transfer-Encoding: chunked\r\n", "zz\r\nabc\r\n0\r\n\r\n"),
        post_with("Content-Length: 2\r\n", "{}") + "BREW / HTTP/1.1\r\n\r\n"}) {
    INFO(shown(raw));
    // The client keeps its side open: the server must close, at once and with nothing more.
    auto answer = std::async(std::launch::async, [&] { return exchange(run.port, raw, false, 8000ms); });
    // Meanwhile the one worker is free for a probe.
    CHECK(exchange(run.port, kProbe, false, 5000ms).status == 200);
    const Reply r = answer.get();
    CHECK(r.closed);
    const std::size_t statuses = [&] {
      std::size_t n = 0;
      for (auto p = r.text.find("HTTP/1.1 "); p != std::string::npos; p = r.text.find("HTTP/1.1 ", p + 1)) ++n;
      return n;
    }();
    if (raw.rfind("POST /v1/predict", 0) == 0 && raw.find("BREW") != std::string::npos) {
      CHECK(r.status == 200);  // the first request is served, the second refused, then the close
      CHECK(r.text.find("HTTP/1.1 501") != std::string::npos);
      CHECK(statuses == 2);
    } else {
      CHECK(r.status == 400);
      CHECK(statuses == 1);
    }
    CHECK(r.text.find("Connection: close") != std::string::npos);
    CHECK(r.text.find("408") == std::string::npos);
  }
}

TEST_CASE("vllm routes: a query parameter that is not UTF-8 is a 400 naming it, and a throwing "
          "route a generic 500 with the detail in the log",
          "[e2e][http][malformed]") {
  Fixture f;
  Running run(*f.server);
  const Reply pause = exchange(run.port, "POST /pause?mode=%FF HTTP/1.1\r\nHost: x\r\n\r\n", false);
  CHECK(pause.status == 400);
  const json b = body_of(pause);
  REQUIRE(b.is_object());
  CHECK(b.value("field", "") == "mode");
  CHECK(b.value("error", "").find("%FF") != std::string::npos);
  // A good mode still reaches the engine (409: nothing to pause before an init... or 200).
  const Reply ok = exchange(run.port, "POST /pause?mode=keep HTTP/1.1\r\nHost: x\r\n\r\n", false);
  CHECK(ok.status != 400);

  std::mutex mu;
  std::vector<std::string> logged;
  ws::set_log_handler([&](ws::LogLevel, std::string_view m) {
    std::lock_guard lock(mu);
    logged.emplace_back(m);
  });
  const Reply boom = exchange(run.port, "GET /boom HTTP/1.1\r\nHost: x\r\n\r\n", false, 3000ms);
  ws::set_log_handler(nullptr);
  CHECK(boom.status == 500);
  CHECK(boom.text.find("secret") == std::string::npos);
  CHECK(boom.text.find("EXCEPTION_WHAT") == std::string::npos);
  CHECK(body_of(boom).is_object());
  std::lock_guard lock(mu);
  bool seen = false;
  for (const auto& m : logged) seen = seen || m.find("secret internal detail \\xFF\\xFE") != std::string::npos;
  CHECK(seen);
}

}  // namespace ws_test_http_malformed_test
