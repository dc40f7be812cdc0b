// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Interop with Python torch's own TCPStore client and server (tests/interop/torch_store_peer.py),
// and the vLLM / torch.distributed unique-id flows that run through the store. Needs a Python with
// torch (CPU is enough); skipped visibly otherwise. WEIGHTSYNC_TORCH_PYTHON picks the interpreter.
#include <weightsync/c10d/client.hpp>
#include <weightsync/c10d/server.hpp>
#include <weightsync/c10d/store_group.hpp>
#include <weightsync/c10d/vllm_pickle.hpp>

#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <string>

#include "support/catch.hpp"
#include "support/process.hpp"

// (a namespace per test source: the sources build as unity translation units)
namespace ws_test_tcp_store_torch_test {

using namespace weightsync;
using namespace std::chrono_literals;

namespace {
struct PyRun {
  int rc = -1;
  std::string out;
};

// The first interpreter that can import torch.distributed ("" if none).
const std::string& torch_python() {
  static const std::string py = [] {
    std::vector<std::string> c;
    if (const char* e = std::getenv("WEIGHTSYNC_TORCH_PYTHON")) c.push_back(e);
    c.insert(c.end(), {"python3", "/usr/bin/python3"});
    for (const auto& p : c)
      if (std::system(
              (p + " -c 'import torch.distributed as d; d.TCPStore' >/dev/null 2>&1").c_str()) == 0)
        return p;
    return std::string();
  }();
  return py;
}
std::string torch_version() {
  PyRun r;
  FILE* f =
      ::popen((torch_python() + " -c 'import torch; print(torch.__version__)' 2>&1").c_str(), "r");
  char buf[256];
  while (f && std::fgets(buf, sizeof buf, f)) r.out += buf;
  if (f) ::pclose(f);
  return r.out;
}

PyRun run_peer(const std::string& args) {
  const std::string cmd = "timeout 60 " + torch_python() +
                          " " WEIGHTSYNC_SOURCE_DIR "/tests/interop/torch_store_peer.py " + args +
                          " 2>&1";
  PyRun r;
  FILE* f = ::popen(cmd.c_str(), "r");
  if (!f) return r;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, f)) r.out += buf;
  const int st = ::pclose(f);
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}
std::future<PyRun> start_peer(const std::string& args) {
  return std::async(std::launch::async, [args] { return run_peer(args); });
}
#define REQUIRE_TORCH()                                                                            \
  do {                                                                                             \
    if (torch_python().empty()) {                                                                  \
      WS_SKIP("no Python with torch (apt install python3-torch, or set WEIGHTSYNC_TORCH_PYTHON)"); \
      return;                                                                                      \
    }                                                                                              \
    UNSCOPED_INFO("torch " << torch_version());                                                    \
  } while (0)

TcpStoreClientOptions copts(int port) {
  TcpStoreClientOptions o;
  o.port = port;
  o.timeout = 20000ms;
  return o;
}
std::string hex(const UniqueIdBytes& b) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (auto x : b) {
    s += d[std::to_integer<int>(x) >> 4];
    s += d[std::to_integer<int>(x) & 15];
  }
  return s;
}
UniqueIdBytes sample_id(int seed) {
  UniqueIdBytes b{};
  for (int i = 0; i < 128; ++i)
    b[static_cast<std::size_t>(i)] = std::byte(static_cast<unsigned char>(i * 37 + seed));
  return b;
}
// The client's dialect for this machine's torch (1.x has no VALIDATE).
TcpStoreWire torch_wire() {
  return torch_version().rfind("1.", 0) == 0 ? TcpStoreWire::torch1_13 : TcpStoreWire::torch2;
}
}  // namespace

TEST_CASE("tcp_store+torch: torch's client against the C++ server", "[unit][tcp_store][torch]") {
  REQUIRE_TORCH();
  TcpStoreServer server;
  auto c = TcpStoreClient::connect(copts(server.port()));
  c.set("cpp/k", "from-cpp");
  auto peer = start_peer("client --port " + std::to_string(server.port()));
  c.wait({"py/done"});
  CHECK(c.get("py/k") == "from-py");
  CHECK(c.get("py/n") == "7");
  const auto r = peer.get();
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK(r.out.find("OK client") != std::string::npos);
  CHECK(server.refused() == 0);
}

TEST_CASE("tcp_store+torch: the C++ client against torch's server", "[unit][tcp_store][torch]") {
  REQUIRE_TORCH();
  const int port = ws_test::free_port();
  auto peer = start_peer("server --port " + std::to_string(port));
  auto o = copts(port);
  o.wire = torch_wire();
  auto c = TcpStoreClient::connect(o);
  CHECK(c.get("py/k") == "from-py");
  c.set("cpp/k", "from-cpp");
  CHECK(c.add("cpp/n", 40) == 40);
  CHECK(c.add("cpp/n", 2) == 42);
  CHECK(c.compare_set("cpp/cs", "", "x") == "x");
  CHECK(c.delete_key("cpp/cs"));
  CHECK(c.num_keys() >= 3);
  CHECK_THROWS_AS(c.wait({"cpp/never"}, 200ms), timeout_error);
  if (!c.connected()) c = TcpStoreClient::connect(o);  // torch 1.13: a timed-out wait closes
  c.set("cpp/done", "1");
  CHECK(c.get("py/done") == "1");
  const auto r = peer.get();
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK(r.out.find("OK server") != std::string::npos);
}

TEST_CASE("tcp_store+torch: a client of torch 2.x's dialect is told to use torch 1.13's",
          "[unit][tcp_store][torch]") {
  REQUIRE_TORCH();
  if (torch_wire() != TcpStoreWire::torch1_13) {
    WS_SKIP("needs a torch < 2.1 server (this torch speaks the 2.x handshake)");
  }
  const int port = ws_test::free_port();
  auto peer = start_peer("server --port " + std::to_string(port));
  auto o = copts(port);
  o.wire = TcpStoreWire::torch2;
  o.validate_timeout = 2000ms;
  const auto t0 = std::chrono::steady_clock::now();
  std::string error;
  try {
    (void)TcpStoreClient::connect(o);  // torch 1.13's server resets torch 2.x's handshake
  } catch (const weightsync::error& e) {
    error = e.what();
  }
  INFO(error);
  CHECK(error.find("torch 2.x's validation") != std::string::npos);
  CHECK(error.find("TcpStoreWire::torch1_13") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - t0 < 10000ms);  // not the 20 s timeout
  // The server survived it: the right dialect is served.
  o.wire = TcpStoreWire::torch1_13;
  auto c = TcpStoreClient::connect(o);
  CHECK(c.get("py/k") == "from-py");
  c.set("cpp/k", "from-cpp");
  CHECK(c.add("cpp/n", 42) == 42);
  c.set("cpp/done", "1");
  CHECK(c.get("py/done") == "1");
  const auto r = peer.get();
  INFO(r.out);
  CHECK(r.rc == 0);
}

TEST_CASE("tcp_store+torch: vLLM TCP mode, C++ rank 0 publishes the pickled unique id",
          "[unit][tcp_store][torch][vllm]") {
  REQUIRE_TORCH();
  const int port = ws_test::free_port();
  auto peer = start_peer("vllm-worker --port " + std::to_string(port));
  StoreGroupOptions o;
  o.port = port;
  o.rank = 0;
  o.world_size = 2;
  o.timeout = 20000ms;
  auto g = StoreGroup::create(o);  // returns once the Python rank joined ("init/" == 2)
  const auto id = sample_id(3);
  CHECK(vllm_exchange_unique_id(g, id) == id);
  const auto r = peer.get();
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK(r.out.find("OK " + hex(id)) != std::string::npos);
}

TEST_CASE("tcp_store+torch: vLLM TCP mode, C++ rank 1 joins a Python trainer's store",
          "[unit][tcp_store][torch][vllm]") {
  REQUIRE_TORCH();
  const int port = ws_test::free_port();
  const auto id = sample_id(11);
  auto peer = start_peer("vllm-trainer --port " + std::to_string(port) + " --id-hex " + hex(id));
  StoreGroupOptions o;
  o.port = port;
  o.rank = 1;
  o.world_size = 2;
  o.timeout = 20000ms;
  o.wire = torch_wire();
  auto g = StoreGroup::create(o);
  CHECK(vllm_exchange_unique_id(g, {}) == id);
  g.store().set("cpp/done", "1");
  const auto r = peer.get();
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK(r.out.find("OK vllm-trainer pickle=247") != std::string::npos);
}

TEST_CASE("tcp_store+torch: torch.distributed group store keys, both directions",
          "[unit][tcp_store][torch][torch_pg]") {
  REQUIRE_TORCH();
  const std::string group = GENERATE(std::string(), std::string("weight_sync"));
  const auto keys = group.empty() ? TorchGroupKeys{} : TorchGroupKeys::named(group);
  const std::string gflag = group.empty() ? "" : " --group " + group;
  const auto id = sample_id(group.empty() ? 5 : 9);
  SECTION("C++ hosts as rank 0, Python rank 1 reads the id") {
    const int port = ws_test::free_port();
    auto peer = start_peer("torch-pg --rank 1 --port " + std::to_string(port) + gflag);
    StoreGroupOptions o;
    o.port = port;
    o.world_size = 2;
    o.timeout = 20000ms;
    auto g = StoreGroup::create(o);
    CHECK(torch_exchange_unique_id(g, keys, id) == id);
    const auto r = peer.get();
    INFO(r.out);
    CHECK(r.rc == 0);
    CHECK(r.out.find("OK " + hex(id)) != std::string::npos);
  }
  SECTION("Python hosts as rank 0, C++ rank 1 reads the id") {
    const int port = ws_test::free_port();
    auto peer = start_peer("torch-pg --rank 0 --port " + std::to_string(port) + " --id-hex " +
                           hex(id) + gflag);
    StoreGroupOptions o;
    o.port = port;
    o.rank = 1;
    o.world_size = 2;
    o.timeout = 20000ms;
    o.wire = torch_wire();
    auto g = StoreGroup::create(o);
    CHECK(torch_exchange_unique_id(g, keys, {}) == id);
    g.store().set("cpp/done", "1");
    const auto r = peer.get();
    INFO(r.out);
    CHECK(r.rc == 0);
  }
}

TEST_CASE("vllm_pickle: the template round-trips and anything else is refused by offset",
          "[unit][vllm]") {
  const auto id = sample_id(1);
  const std::string p = vllm_pickle_unique_id(id);
  REQUIRE(p.size() == kVllmUniqueIdPickleBytes);
  CHECK(vllm_unpickle_unique_id(p) == id);
  std::string p5 = p;
  p5[1] = 5;  // Python 3.14's default protocol
  CHECK(vllm_unpickle_unique_id(p5) == id);
  std::string bad = p;
  bad[40] = 'X';  // inside the module name
  try {
    (void)vllm_unpickle_unique_id(bad);
    FAIL("accepted");
  } catch (const protocol_error& e) {
    CHECK(std::string(e.what()).find("offset 40 (the module name") != std::string::npos);
  }
  CHECK_THROWS_AS(vllm_unpickle_unique_id(p.substr(0, 200)), protocol_error);
  std::string p3 = p;
  p3[1] = 3;
  CHECK_THROWS_AS(vllm_unpickle_unique_id(p3), protocol_error);
  // The bytes CPython 3.11 wrote for vLLM's structure (see vllm_pickle.hpp), id bytes (i*37+5)%256.
  const std::string head(
      "\x80\x04\x95\xec\x00\x00\x00\x00\x00\x00\x00\x8c\x07_ctypes\x94\x8c\t_unpickle"
      "\x94\x93\x94\x8c\x34vllm.distributed.device_communicators.pynccl_wrapper"
      "\x94\x8c\x0cncclUniqueId\x94\x93\x94}\x94\x43\x80",
      111);
  CHECK(p.substr(0, 111) == head);
  CHECK(p.substr(239) == std::string("\x94\x86\x94\x86\x94R\x94.", 8));
}

}  // namespace ws_test_tcp_store_torch_test
