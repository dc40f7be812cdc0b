// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// The c10d TCPStore server and client: every command in both dialects, bad input, deadlines, and
// the server surviving misbehaving connections.
#include <weightsync/host/tcp_store_client.hpp>
#include <weightsync/host/tcp_store_engine.hpp>
#include <weightsync/host/tcp_store_server.hpp>
#include <weightsync/host/torch_store_group.hpp>

#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "support/catch.hpp"
#include "support/process.hpp"

// (a namespace per test source: the sources build as unity translation units)
namespace ws_test_tcp_store_test {

using namespace weightsync;
using namespace std::chrono_literals;

namespace {
TcpStoreClientOptions copts(int port, TcpStoreWire wire = TcpStoreWire::torch2,
                            std::chrono::milliseconds t = 5000ms) {
  TcpStoreClientOptions o;
  o.port = port;
  o.wire = wire;
  o.timeout = t;
  return o;
}

// A raw connection for sending what no well-behaved client sends.
detail::Fd raw_connect(int port) {
  return detail::connect_tcp("127.0.0.1", port, detail::Deadline::after(2000ms), "test", 0);
}
void raw_send(const detail::Fd& fd, const std::string& b) {
  detail::send_all(fd.get(), b.data(), b.size(), detail::Deadline::after(1000ms), "test", 0);
}
// True when the server closes the connection before `t` passes.
bool closed_within(const detail::Fd& fd, std::chrono::milliseconds t) {
  const auto d = detail::Deadline::after(t);
  while (!d.expired()) {
    if (detail::peer_closed(fd.get())) return true;
    std::this_thread::sleep_for(5ms);
  }
  return false;
}
std::string validate_bytes() {
  detail::c10d::Out o;
  o.u8(0).u32(detail::c10d::kValidationMagic);
  return o.bytes();
}
bool refused_within(const TcpStoreServer& s, std::size_t n, std::chrono::milliseconds t) {
  const auto d = detail::Deadline::after(t);
  while (!d.expired()) {
    if (s.refused() >= n) return true;
    std::this_thread::sleep_for(5ms);
  }
  return false;
}
void set_quiet() {
  set_log_handler([](LogLevel, std::string_view) {});
}
// Collects the log lines (the server logs from its own thread).
struct LogCapture {
  std::mutex m;
  std::vector<std::string> lines;
  LogCapture() {
    set_log_handler([this](LogLevel, std::string_view s) {
      std::lock_guard<std::mutex> g(m);
      lines.emplace_back(s);
    });
  }
  ~LogCapture() { set_log_handler(nullptr); }
  bool has(const std::string& needle, std::chrono::milliseconds t = 2000ms) {
    const auto d = detail::Deadline::after(t);
    do {
      {
        std::lock_guard<std::mutex> g(m);
        for (const auto& l : lines)
          if (l.find(needle) != std::string::npos) return true;
      }
      std::this_thread::sleep_for(5ms);
    } while (!d.expired());
    return false;
  }
};

using detail::c10d::Cmd;
std::uint8_t qb(Cmd c, TcpStoreWire w = TcpStoreWire::torch2) {
  return static_cast<std::uint8_t>(detail::c10d::byte_of(c, w));
}
// One request's bytes in the torch 2.x dialect.
detail::c10d::Out req(Cmd c) {
  detail::c10d::Out o;
  o.u8(qb(c));
  return o;
}
std::string keys_req(Cmd c, const std::vector<std::string>& keys) {
  auto o = req(c);
  o.u64(keys.size());
  for (const auto& k : keys) o.str(k);
  return o.bytes();
}

// Drives a StoreEngine directly: connections that said VALIDATE, their replies collected.
struct Engine {
  detail::c10d::StoreEngine e;
  std::vector<detail::c10d::Reply> out;
  explicit Engine(TcpStoreLimits l = {}) : e(l) {}
  void open(int c) {
    e.open(c);
    REQUIRE(feed(c, validate_bytes()).empty());
  }
  std::string feed(int c, const std::string& b) { return e.feed(c, b, out); }
  // Everything answered to `c` so far (and forgets it).
  std::string replies(int c) {
    std::string r;
    for (auto it = out.begin(); it != out.end();) {
      if (it->conn == c) {
        r += it->bytes;
        it = out.erase(it);
      } else {
        ++it;
      }
    }
    return r;
  }
  std::string ok() { return e.check_invariants(); }
};
std::string i64_bytes(std::int64_t v) {
  detail::c10d::Out o;
  o.i64(v);
  return o.bytes();
}
std::string str_bytes(const std::string& s) {
  detail::c10d::Out o;
  o.str(s);
  return o.bytes();
}

// A scripted peer on a free port: accepts one connection and runs `script` on it.
struct FakePeer {
  detail::Fd listener = detail::listen_tcp("127.0.0.1", 0);
  int port = detail::local_port(listener.get());
  std::thread t;
  template <class F>
  void run(F script) {
    t = std::thread([this, script] {
      try {
        auto fd = detail::accept_tcp(listener.get(), detail::Deadline::after(5000ms));
        if (fd) script(fd);
      } catch (...) {
      }
    });
  }
  ~FakePeer() {
    if (t.joinable()) t.join();
  }
};
// Reads torch 2.4's opening (VALIDATE + PING) and answers the PING.
void answer_handshake(const detail::Fd& fd) {
  char b[10];
  detail::recv_all(fd.get(), b, 10, detail::Deadline::after(2000ms), "fake", 0);
  raw_send(fd, std::string(b + 6, 4));
}
std::string recv_n(const detail::Fd& fd, std::size_t n, std::chrono::milliseconds t = 2000ms) {
  std::string b(n, '\0');
  detail::recv_all(fd.get(), b.data(), n, detail::Deadline::after(t), "test", 0);
  return b;
}
std::chrono::milliseconds since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                               t0);
}
}  // namespace

TEST_CASE("tcp_store: every command, torch 2.x, 2.0 and 1.13 dialects", "[unit][tcp_store]") {
  const auto wire = GENERATE(TcpStoreWire::torch2, TcpStoreWire::torch2_0, TcpStoreWire::torch1_13);
  TcpStoreServer server;
  auto c = TcpStoreClient::connect(copts(server.port(), wire));
  c.set("a", "1");
  CHECK(c.get("a") == "1");
  CHECK(c.add("n", 5) == 5);
  CHECK(c.add("n", -2) == 3);
  CHECK(c.get("n") == "3");  // counters are decimal text, as in torch
  CHECK(c.add_raw("init/", 1) == 1);
  CHECK(c.check({"a", "n"}));
  CHECK_FALSE(c.check({"a", "missing"}));
  CHECK(c.compare_set("cs", "", "first") == "first");        // missing + empty expected: sets
  CHECK(c.compare_set("cs", "wrong", "second") == "first");  // mismatch: unchanged
  CHECK(c.compare_set("cs", "first", "second") == "second");
  CHECK(c.compare_set("absent", "x", "y") == "x");  // torch's answer for a missing key
  if (wire != TcpStoreWire::torch1_13) {            // torch 2.0 added APPEND, MULTI_*, CANCEL_WAIT
    c.append("ap", "ab");
    c.append("ap", "cd");
    CHECK(c.get("ap") == "abcd");
    c.multi_set({{"m1", "v1"}, {"m2", std::string("\0\xff", 2)}});
    CHECK(c.multi_get({"m1", "m2"}) == std::vector<std::string>{"v1", std::string("\0\xff", 2)});
  } else {  // torch 1.13's server has no APPEND / MULTI_*: the client refuses before sending
    CHECK_THROWS_AS(c.append("ap", "ab"), state_error);
    CHECK_THROWS_AS(c.multi_get({"a"}), state_error);
    c.set("ap", "abcd");
    c.set("m1", "v1");
    c.set("m2", "v2");
  }
  const auto before = c.num_keys();
  CHECK(before == 7);  // a n init/ cs ap m1 m2
  CHECK(c.delete_key("a"));
  CHECK_FALSE(c.delete_key("a"));
  CHECK(c.num_keys() == before - 1);
  c.set("big", std::string(1 << 20, 'x'));
  CHECK(c.get("big").size() == (1u << 20));
  if (wire == TcpStoreWire::torch2) c.ping(0xdeadbeef);
  if (wire != TcpStoreWire::torch2) CHECK_THROWS_AS(c.ping(1), state_error);
  if (wire != TcpStoreWire::torch2) CHECK_THROWS_AS(c.queue_len("q"), state_error);
}

TEST_CASE("tcp_store: WAIT wakes on another client's SET and is bounded by a deadline",
          "[unit][tcp_store]") {
  TcpStoreServer server;
  auto waiter = TcpStoreClient::connect(copts(server.port()));
  auto setter = TcpStoreClient::connect(copts(server.port(), TcpStoreWire::torch1_13));
  std::thread t([&] {
    std::this_thread::sleep_for(100ms);
    setter.set("late", "v");
  });
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(waiter.get("late") == "v");
  t.join();
  CHECK(std::chrono::steady_clock::now() - t0 >= 90ms);

  const auto t1 = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(waiter.wait({"never"}, 200ms), timeout_error);
  const auto took = std::chrono::steady_clock::now() - t1;
  CHECK(took >= 190ms);
  CHECK(took < 2000ms);
  // The cancelled wait left the connection in step: it is still usable.
  waiter.set("after", "ok");
  CHECK(waiter.get("after") == "ok");
  try {
    waiter.wait({"never", "neither"}, 50ms);
    FAIL("no timeout");
  } catch (const timeout_error& e) {
    CHECK(std::string(e.what()).find("'never', 'neither'") != std::string::npos);
  }
}

TEST_CASE(
    "tcp_store: garbage, oversized, truncated and unknown requests are refused, the server "
    "keeps serving",
    "[unit][tcp_store]") {
  set_quiet();
  TcpStoreServerOptions so;
  so.request_timeout = 300ms;
  so.limits.max_value_bytes = 1 << 16;
  TcpStoreServer server(so);
  auto good = TcpStoreClient::connect(copts(server.port()));
  good.set("k", "v");
  std::size_t refused = 0;

  SECTION("unknown query byte after VALIDATE") {
    auto fd = raw_connect(server.port());
    raw_send(fd, validate_bytes() + std::string(1, '\x7f'));
    CHECK(closed_within(fd, 2000ms));
  }
  SECTION("oversized key length") {
    auto fd = raw_connect(server.port());
    detail::c10d::Out o;
    o.u8(1).u64(std::uint64_t(1) << 40);
    raw_send(fd, validate_bytes() + o.bytes());
    CHECK(closed_within(fd, 2000ms));
  }
  SECTION("oversized value") {
    auto fd = raw_connect(server.port());
    detail::c10d::Out o;
    o.u8(1).str("/x").u64((1 << 16) + 1);
    raw_send(fd, validate_bytes() + o.bytes());
    CHECK(closed_within(fd, 2000ms));
  }
  SECTION("too many keys in a WAIT") {
    auto fd = raw_connect(server.port());
    detail::c10d::Out o;
    o.u8(6).u64(1u << 20);
    raw_send(fd, validate_bytes() + o.bytes());
    CHECK(closed_within(fd, 2000ms));
  }
  SECTION("truncated request is dropped after request_timeout") {
    auto fd = raw_connect(server.port());
    detail::c10d::Out o;
    o.u8(1).u64(10).str("abc");  // announces 10 key bytes, sends 11 bytes then stops
    raw_send(fd, validate_bytes() + o.bytes().substr(0, 12));
    CHECK_FALSE(closed_within(fd, 100ms));
    CHECK(closed_within(fd, 2000ms));
  }
  SECTION("a second VALIDATE, WATCH_KEY of 1.13, ADD on a non-integer") {
    auto fd1 = raw_connect(server.port());
    raw_send(fd1, validate_bytes() + validate_bytes());
    CHECK(closed_within(fd1, 2000ms));
    auto fd2 = raw_connect(server.port());
    detail::c10d::Out w;
    w.u8(7).str("/k");
    raw_send(fd2, w.bytes());
    CHECK(closed_within(fd2, 2000ms));
    auto fd3 = raw_connect(server.port());
    detail::c10d::Out a;
    a.u8(4).str("/k").i64(1);  // "/k" holds "v"
    raw_send(fd3, validate_bytes() + a.bytes());
    CHECK(closed_within(fd3, 2000ms));
    refused = 2;
  }
  CHECK(refused_within(server, refused + 1, 2000ms));
  // The well-behaved client is unaffected.
  CHECK(good.get("k") == "v");
  good.set("k2", "v2");
  auto again = TcpStoreClient::connect(copts(server.port()));
  CHECK(again.get("k2") == "v2");
  set_log_handler(nullptr);
}

TEST_CASE("tcp_store: a server that refuses torch 1.13 drops connections without VALIDATE",
          "[unit][tcp_store]") {
  set_quiet();
  TcpStoreServerOptions so;
  so.accept_torch1_13 = false;
  TcpStoreServer server(so);
  auto fd = raw_connect(server.port());
  detail::c10d::Out o;
  o.u8(0).str("/k").str("v");  // a 1.13 SET
  raw_send(fd, o.bytes());
  CHECK(closed_within(fd, 2000ms));
  auto c = TcpStoreClient::connect(copts(server.port()));
  c.set("k", "v");
  CHECK(c.get("k") == "v");
  set_log_handler(nullptr);
}

TEST_CASE("tcp_store: the client names a peer that is no TCPStore, within its deadline",
          "[unit][tcp_store]") {
  auto listener = detail::listen_tcp("127.0.0.1", 0);
  const int port = detail::local_port(listener.get());
  SECTION("silent peer: timeout") {
    std::thread t([&] {
      auto fd = detail::accept_tcp(listener.get(), detail::Deadline::after(2000ms));
      std::this_thread::sleep_for(600ms);
    });
    const auto t0 = std::chrono::steady_clock::now();
    CHECK_THROWS_AS(TcpStoreClient::connect(copts(port, TcpStoreWire::torch2, 300ms)),
                    timeout_error);
    CHECK(std::chrono::steady_clock::now() - t0 < 2000ms);
    t.join();
  }
  SECTION("garbage answer: protocol error") {
    std::thread t([&] {
      auto fd = detail::accept_tcp(listener.get(), detail::Deadline::after(2000ms));
      raw_send(fd, "HTTP/1.1 400 Bad Request\r\n\r\n");
      std::this_thread::sleep_for(300ms);
    });
    CHECK_THROWS_AS(TcpStoreClient::connect(copts(port, TcpStoreWire::torch2, 1000ms)),
                    protocol_error);
    t.join();
  }
  SECTION("nobody listening: timeout names the address") {
    listener.reset();
    try {
      TcpStoreClient::connect(copts(port, TcpStoreWire::torch2, 200ms));
      FAIL("connected");
    } catch (const timeout_error& e) {
      CHECK(std::string(e.what()).find(std::to_string(port)) != std::string::npos);
    }
  }
}

TEST_CASE("tcp_store: the engine survives random input (fuzz entry point)", "[unit][tcp_store]") {
  std::mt19937 rng(1234);
  for (int i = 0; i < 3000; ++i) {
    std::vector<std::uint8_t> buf(rng() % 200);
    for (auto& b : buf) b = static_cast<std::uint8_t>(rng() % 4 == 0 ? rng() % 20 : rng());
    if (i % 3 == 0 && buf.size() > 6) {  // a valid handshake makes the parser go deeper
      buf[1] = 0;
      std::memcpy(buf.data() + 2, &detail::c10d::kValidationMagic, 4);
    }
    std::string why;
    const int rc = detail::store_fuzz_one(buf.data(), buf.size(), &why);
    INFO("input " << i << ": " << why);
    CHECK(rc == 0);
  }
}

TEST_CASE("tcp_store: a MULTI_GET of no keys sends nothing and the connection goes on",
          "[unit][tcp_store]") {
  // Found by fuzz.tcp_store (corpus/tcp_store/regress_multi_get_no_keys): the engine queued an
  // empty reply. torch's server sends nothing for it either.
  using namespace detail::c10d;
  StoreEngine e;
  e.open(1);
  std::vector<Reply> out;
  Out q;
  q.u8(0).u32(kValidationMagic);
  q.u8(static_cast<std::uint8_t>(byte_of(Cmd::multi_get, TcpStoreWire::torch2))).i64(0);
  q.u8(static_cast<std::uint8_t>(byte_of(Cmd::ping, TcpStoreWire::torch2))).u32(0x5eed1234u);
  REQUIRE(e.feed(1, q.bytes(), out).empty());
  REQUIRE(out.size() == 1);  // the PING's answer only
  CHECK(out[0].bytes == std::string("\x34\x12\xed\x5e", 4));
  CHECK(e.check_invariants().empty());
}

TEST_CASE("tcp_store: the engine keeps no entry for a queue popped while missing or emptied",
          "[unit][tcp_store]") {
  using namespace detail::c10d;
  StoreEngine e;
  e.open(1);
  std::vector<Reply> out;
  Out q;
  q.u8(0).u32(kValidationMagic);
  const int pop = byte_of(Cmd::queue_pop, TcpStoreWire::torch2);
  const int push = byte_of(Cmd::queue_push, TcpStoreWire::torch2);
  for (int i = 0; i < 100; ++i)
    q.u8(static_cast<std::uint8_t>(pop)).str("/missing" + std::to_string(i));
  q.u8(static_cast<std::uint8_t>(push)).str("/q").str("v");
  q.u8(static_cast<std::uint8_t>(pop)).str("/q");
  REQUIRE(e.feed(1, q.bytes(), out).empty());
  CHECK(out.size() == 101);
  CHECK(e.check_invariants().empty());
  CHECK(e.stored_bytes() == 0);
  // A SET over the store's bound is refused (the connection dropped) and nothing is counted.
  TcpStoreLimits tiny;
  tiny.max_store_bytes = 4;
  StoreEngine t(tiny);
  t.open(1);
  Out s;
  s.u8(0).u32(kValidationMagic);
  s.u8(static_cast<std::uint8_t>(byte_of(Cmd::set, TcpStoreWire::torch2))).str("/k").str("toolong");
  CHECK_FALSE(t.feed(1, s.bytes(), out).empty());  // over the store's bound: refused
  CHECK(t.check_invariants().empty());
  CHECK(t.stored_bytes() == 0);
}

TEST_CASE(
    "store group: rank 0 names a rank that never joins, a rank > 0 refuses a value that is "
    "not vLLM's pickle",
    "[unit][tcp_store][vllm]") {
  StoreGroupOptions o;
  o.world_size = 3;
  o.timeout = 300ms;
  try {
    (void)StoreGroup::create(o);  // rank 0 hosts on a free port; nobody else comes
    FAIL("no timeout");
  } catch (const timeout_error& e) {
    CHECK(std::string(e.what()).find("1 of 3 ranks joined") != std::string::npos);
  }
  // Two C++ ranks: rank 0 stores something else under vLLM's key.
  o.world_size = 2;
  o.timeout = 5000ms;
  o.port = ws_test::free_port();
  std::string host_error;
  std::thread host([&] {
    try {
      auto g = StoreGroup::create(o);  // returns once rank 1 joined
      g.broadcast("not a pickle", 0);
      g.store().wait({"r1/done"});
    } catch (const std::exception& e) {
      host_error = e.what();
    }
  });
  StoreGroupOptions o1 = o;
  o1.rank = 1;
  auto g1 = StoreGroup::create(o1);
  try {
    (void)vllm_exchange_unique_id(g1, {});
    FAIL("accepted");
  } catch (const protocol_error& e) {
    CHECK(std::string(e.what()).find("12 bytes, expected 247") != std::string::npos);
  }
  g1.store().set("r1/done", "1");
  host.join();
  CHECK(host_error.empty());
}

// ---- torch's wire: byte values and dialects (audit items 1, 2, 3, 7) ----

TEST_CASE("tcp_store wire: torch's QueryType bytes, LIST is 17 and nothing follows it",
          "[unit][tcp_store]") {
  using detail::c10d::cmd_name;
  using detail::c10d::cmd_of;
  CHECK(qb(Cmd::list) == 17);
  CHECK(std::string(cmd_name(cmd_of(17, TcpStoreWire::torch2))) == "LIST");
  CHECK(qb(Cmd::queue_push) == 14);
  CHECK(qb(Cmd::ping) == 13);
  for (int b = 18; b < 256; ++b)  // torch's enum ends at LIST: BARRIER (18) was ours, not torch's
    CHECK(cmd_of(static_cast<std::uint8_t>(b), TcpStoreWire::torch2) == Cmd::invalid);
  // torch 1.13 knows 0..8 (its server resets on 9); torch 2.0 added APPEND..CANCEL_WAIT as 9..12.
  CHECK(cmd_of(8, TcpStoreWire::torch1_13) == Cmd::delete_key);
  for (int b = 9; b < 256; ++b)
    CHECK(cmd_of(static_cast<std::uint8_t>(b), TcpStoreWire::torch1_13) == Cmd::invalid);
  CHECK(cmd_of(7, TcpStoreWire::torch2_0) == Cmd::watch_key);
  CHECK(cmd_of(9, TcpStoreWire::torch2_0) == Cmd::append);
  CHECK(cmd_of(12, TcpStoreWire::torch2_0) == Cmd::cancel_wait);
  CHECK(cmd_of(13, TcpStoreWire::torch2_0) == Cmd::invalid);
  // The default bounds are libuv's MAX_STRING_LEN, MAX_PAYLOAD_LEN and MAX_KEY_COUNT.
  const TcpStoreLimits lim;
  CHECK(lim.max_key_bytes == 8 * 1024);
  CHECK(lim.max_value_bytes == 8 * 1024 * 1024);
  CHECK(lim.max_keys_per_request == 128 * 1024);
}

TEST_CASE("tcp_store: query byte 18 (no torch command) is refused with a logged reason",
          "[unit][tcp_store]") {
  LogCapture logs;
  TcpStoreServer server;
  auto fd = raw_connect(server.port());
  detail::c10d::Out o;
  o.u8(18).str("/bar").i64(1);  // what our BARRIER used to parse
  raw_send(fd, validate_bytes() + o.bytes());
  CHECK(closed_within(fd, 2000ms));
  CHECK(refused_within(server, 1, 2000ms));
  CHECK(logs.has("unknown query byte 18"));
  auto c = TcpStoreClient::connect(copts(server.port()));
  CHECK(c.num_keys() == 0);  // nothing was stored under "/bar"
}

TEST_CASE("tcp_store: a WAIT of more than 4096 keys (torch allows 128 Ki)", "[unit][tcp_store]") {
  TcpStoreServer server;
  auto c = TcpStoreClient::connect(copts(server.port()));
  std::vector<std::string> keys;
  for (int i = 0; i < 5000; ++i) keys.push_back("k" + std::to_string(i));
  for (std::size_t i = 0; i < keys.size(); i += 500) {
    std::vector<std::pair<std::string, std::string>> kv;
    for (std::size_t j = i; j < i + 500; ++j) kv.emplace_back(keys[j], "v");
    c.multi_set(kv);
  }
  c.wait(keys, 2000ms);
  CHECK(c.check(keys));
}

TEST_CASE("tcp_store: torch 2.0 dialect (no handshake, APPEND..CANCEL_WAIT at 9..12)",
          "[unit][tcp_store]") {
  TcpStoreServer server;
  auto c = TcpStoreClient::connect(copts(server.port(), TcpStoreWire::torch2_0));
  c.append("a", "x");
  c.append("a", "y");
  CHECK(c.multi_get({"a"}) == std::vector<std::string>{"xy"});
  CHECK_THROWS_AS(c.wait({"never"}, 100ms), timeout_error);
  CHECK(c.connected());  // cancelled with CANCEL_WAIT (byte 12), unlike 1.13
  CHECK(c.get("a") == "xy");
  CHECK_THROWS_AS(c.ping(1), state_error);
  CHECK_THROWS_AS(c.list_keys(), state_error);
  // A raw 1.13-style client: byte 9 is APPEND for a server serving clients without handshake.
  detail::c10d::StoreEngine e;
  e.open(1);
  std::vector<detail::c10d::Reply> out;
  detail::c10d::Out q;
  q.u8(9).str("/z").str("1").u8(2).str("/z");  // APPEND, GET in the torch 2.0 table
  CHECK(e.feed(1, q.bytes(), out).empty());
  CHECK(e.wire(1) == TcpStoreWire::torch2_0);
  REQUIRE(out.size() == 1);
  CHECK(out[0].bytes == str_bytes("1"));
}

// ---- waking (audit items 4, 6; 16: CANCEL_WAIT and a late STOP_WAITING) ----

TEST_CASE("tcp_store engine: a WAIT is answered only once all its keys exist",
          "[unit][tcp_store]") {
  Engine g;
  g.open(1);
  g.open(2);
  g.open(3);
  SECTION("queue pushes do not count down a waiter's other keys") {
    REQUIRE(g.feed(1, keys_req(Cmd::wait, {"/q", "/k"})).empty());
    auto push = req(Cmd::queue_push);
    push.str("/q").str("item");
    REQUIRE(g.feed(2, push.bytes() + push.bytes()).empty());
    CHECK(g.replies(1).empty());  // "/k" is still missing
    CHECK(g.ok().empty());
    auto set = req(Cmd::set);
    set.str("/k").str("v");
    REQUIRE(g.feed(2, set.bytes()).empty());
    CHECK(g.replies(1) == std::string(1, '\0'));
  }
  SECTION("a COMPARE_SET that leaves the key missing wakes nobody") {
    REQUIRE(g.feed(1, keys_req(Cmd::wait, {"/cs"})).empty());
    auto cs = req(Cmd::compare_set);
    cs.str("/cs").str("expected").str("desired");
    REQUIRE(g.feed(2, cs.bytes()).empty());
    CHECK(g.replies(2) == str_bytes("expected"));  // torch's answer for a missing key
    CHECK(g.replies(1).empty());
    auto cs2 = req(Cmd::compare_set);
    cs2.str("/cs").str("").str("now");  // creates it
    REQUIRE(g.feed(2, cs2.bytes()).empty());
    CHECK(g.replies(1) == std::string(1, '\0'));
    CHECK(g.replies(2) == str_bytes("now"));
  }
  SECTION("a key deleted before the others arrive is awaited again") {
    auto set = req(Cmd::set);
    set.str("/a").str("1");
    REQUIRE(g.feed(2, set.bytes()).empty());
    REQUIRE(g.feed(1, keys_req(Cmd::wait, {"/a", "/b"})).empty());
    auto del = req(Cmd::delete_key);
    del.str("/a");
    REQUIRE(g.feed(2, del.bytes()).empty());
    auto setb = req(Cmd::set);
    setb.str("/b").str("2");
    REQUIRE(g.feed(2, setb.bytes()).empty());
    CHECK(g.replies(1).empty());  // "/a" is gone again
    REQUIRE(g.feed(2, set.bytes()).empty());
    CHECK(g.replies(1) == std::string(1, '\0'));
  }
  SECTION("one pushed item wakes one of two queue waiters") {
    REQUIRE(g.feed(1, keys_req(Cmd::wait, {"/q"})).empty());
    REQUIRE(g.feed(3, keys_req(Cmd::wait, {"/q"})).empty());
    auto push = req(Cmd::queue_push);
    push.str("/q").str("x");
    REQUIRE(g.feed(2, push.bytes()).empty());
    const std::string r1 = g.replies(1), r3 = g.replies(3);
    CHECK(r1.size() + r3.size() == 1);
    REQUIRE(g.feed(2, push.bytes()).empty());
    CHECK(g.replies(1).size() + g.replies(3).size() == 1);  // the other one now
  }
  SECTION("CANCEL_WAIT after a late STOP_WAITING: both bytes arrive, in order") {
    REQUIRE(g.feed(1, keys_req(Cmd::wait, {"/late"})).empty());
    auto set = req(Cmd::set);
    set.str("/late").str("v");
    REQUIRE(g.feed(2, set.bytes()).empty());
    REQUIRE(g.feed(1, req(Cmd::cancel_wait).bytes()).empty());
    CHECK(g.replies(1) == std::string("\0\1", 2));
    // A cancelled WAIT is forgotten: a later SET of its key sends nothing.
    REQUIRE(g.feed(1, keys_req(Cmd::wait, {"/other"})).empty());
    REQUIRE(g.feed(1, req(Cmd::cancel_wait).bytes()).empty());
    CHECK(g.replies(1) == std::string(1, '\1'));
    auto set2 = req(Cmd::set);
    set2.str("/other").str("v");
    REQUIRE(g.feed(2, set2.bytes()).empty());
    CHECK(g.replies(1).empty());
  }
  CHECK(g.ok().empty());
  g.e.close(1);
  g.e.close(3);
  CHECK(g.ok().empty());
}

TEST_CASE("tcp_store client: a late STOP_WAITING before WAIT_CANCELED keeps the connection usable",
          "[unit][tcp_store]") {
  const auto reply = GENERATE(std::string("\x00\x01", 2), std::string("\x01", 1));
  FakePeer peer;
  peer.run([&](detail::Fd& fd) {
    answer_handshake(fd);
    const std::string wait = recv_n(fd, 1 + 8 + 8 + 2);  // WAIT ["/k"]
    const std::string cancel = recv_n(fd, 1);            // after the client's timeout
    if (wait[0] == 6 && cancel[0] == 12) raw_send(fd, reply);
    const std::string ping = recv_n(fd, 5);
    raw_send(fd, ping.substr(1));
  });
  auto c = TcpStoreClient::connect(copts(peer.port));
  CHECK_THROWS_AS(c.wait({"k"}, 100ms), timeout_error);
  CHECK(c.connected());
  c.ping(77);
}

// ---- client (audit items 5, 8, 14, 15; 16: the client's reply bounds) ----

TEST_CASE("tcp_store client: multi_get waits for its keys, as torch's does", "[unit][tcp_store]") {
  TcpStoreServer server;
  auto c = TcpStoreClient::connect(copts(server.port()));
  auto setter = TcpStoreClient::connect(copts(server.port()));
  c.set("a", "1");
  std::thread t([&] {
    std::this_thread::sleep_for(150ms);
    setter.set("late", "2");
  });
  CHECK(c.multi_get({"a", "late"}) == std::vector<std::string>{"1", "2"});
  t.join();
  auto o = copts(server.port());
  o.timeout = 200ms;
  auto impatient = TcpStoreClient::connect(o);
  CHECK_THROWS_AS(impatient.multi_get({"a", "never"}), timeout_error);
}

TEST_CASE("tcp_store client: a store that does not answer torch 2.x's handshake is named quickly",
          "[unit][tcp_store]") {
  auto o = copts(0, TcpStoreWire::torch2, 30000ms);  // the overall timeout is long
  o.validate_timeout = 300ms;
  SECTION("a peer that swallows the bytes (a frozen torch < 2.1 store)") {
    FakePeer peer;
    peer.run([](detail::Fd& fd) {
      char b[64];
      const auto d = detail::Deadline::after(1500ms);
      while (!d.expired()) {
        [[maybe_unused]] auto k = ::recv(fd.get(), b, sizeof b, MSG_DONTWAIT);
        std::this_thread::sleep_for(10ms);
      }
    });
    o.port = peer.port;
    const auto t0 = std::chrono::steady_clock::now();
    try {
      (void)TcpStoreClient::connect(o);
      FAIL("connected");
    } catch (const timeout_error& e) {
      const std::string w = e.what();
      CHECK(w.find("did not answer torch 2.x's validation") != std::string::npos);
      CHECK(w.find("torch1_13") != std::string::npos);
      CHECK(w.find(std::to_string(peer.port)) != std::string::npos);
    }
    CHECK(since(t0) < 1500ms);
  }
  SECTION("a peer that resets every connection (torch 1.13's server does)") {
    auto listener = detail::listen_tcp("127.0.0.1", 0);
    o.port = detail::local_port(listener.get());
    std::atomic<bool> stop{false};
    std::thread t([&] {
      while (!stop) {
        auto fd = detail::accept_tcp(listener.get(), detail::Deadline::after(50ms));
        if (!fd) continue;
        try {
          char b[16];
          detail::recv_all(fd.get(), b, 1, detail::Deadline::after(1000ms), "fake", 0);
        } catch (const std::exception&) {
        }
        linger l{1, 0};  // close with RST, as a server that threw does
        ::setsockopt(fd.get(), SOL_SOCKET, SO_LINGER, &l, sizeof l);
      }
    });
    const auto t0 = std::chrono::steady_clock::now();
    std::string error;
    try {
      (void)TcpStoreClient::connect(o);
    } catch (const protocol_error& e) {
      error = e.what();
    } catch (const std::exception& e) {
      error = std::string("unexpected: ") + e.what();
    }
    stop = true;
    t.join();
    INFO(error);
    CHECK(error.find("closed every connection before answering torch 2.x's validation") !=
          std::string::npos);
    CHECK(error.find("torch2_0") != std::string::npos);
    CHECK(since(t0) < 3000ms);
  }
}

TEST_CASE("tcp_store client: connect and validation share one deadline and a reset is retried",
          "[unit][tcp_store]") {
  SECTION("late listener, silent peer: the whole connect takes about the timeout") {
    const int port = ws_test::free_port();
    std::atomic<bool> stop{false};
    std::thread t([&] {
      std::this_thread::sleep_for(600ms);  // refused until then
      auto listener = detail::listen_tcp("127.0.0.1", port);
      auto fd = detail::accept_tcp(listener.get(), detail::Deadline::after(3000ms));
      while (!stop) std::this_thread::sleep_for(10ms);
    });
    auto o = copts(port, TcpStoreWire::torch2, 1000ms);
    o.validate_timeout = 60000ms;
    const auto t0 = std::chrono::steady_clock::now();
    CHECK_THROWS_AS(TcpStoreClient::connect(o), timeout_error);
    CHECK(since(t0) < 1450ms);  // not 600 ms of connecting plus a fresh 1000 ms for PING
    stop = true;
    t.join();
  }
  SECTION("the first connection is reset before the answer (a full backlog), the second works") {
    auto listener = detail::listen_tcp("127.0.0.1", 0);
    const int port = detail::local_port(listener.get());
    std::thread t([&] {
      auto first = detail::accept_tcp(listener.get(), detail::Deadline::after(3000ms));
      linger l{1, 0};
      if (first) ::setsockopt(first.get(), SOL_SOCKET, SO_LINGER, &l, sizeof l);
      first.reset();
      auto second = detail::accept_tcp(listener.get(), detail::Deadline::after(3000ms));
      if (!second) return;
      answer_handshake(second);
      std::this_thread::sleep_for(200ms);
    });
    auto c = TcpStoreClient::connect(copts(port, TcpStoreWire::torch2, 3000ms));
    CHECK(c.connected());
    t.join();
  }
}

TEST_CASE("tcp_store client: queues and LIST", "[unit][tcp_store]") {
  TcpStoreServer server;
  auto c = TcpStoreClient::connect(copts(server.port()));
  auto other = TcpStoreClient::connect(copts(server.port()));
  CHECK(c.queue_len("q") == 0);
  CHECK_FALSE(c.try_queue_pop("q").has_value());  // QUEUE_POP on an empty queue: n = 0, at once
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(c.queue_pop("q", 200ms), timeout_error);
  CHECK(since(t0) >= 190ms);
  CHECK(c.connected());
  c.queue_push("q", "one");
  c.queue_push("q", "");  // empty items are items
  CHECK(c.queue_len("q") == 2);
  CHECK(c.try_queue_pop("q") == std::optional<std::string>("one"));
  CHECK(c.queue_pop("q", 200ms).empty());
  CHECK(c.queue_len("q") == 0);
  std::thread t([&] {
    std::this_thread::sleep_for(100ms);
    other.queue_push("jobs", "job-1");
  });
  CHECK(c.queue_pop("jobs", 5000ms) == "job-1");  // blocks until another client pushes
  t.join();
  c.set("x", "1");
  c.set("y", "2");
  c.add_raw("init/", 1);  // outside the "/" prefix: LIST leaves it out, as torch's list() does
  auto keys = c.list_keys();
  std::sort(keys.begin(), keys.end());
  CHECK(keys == std::vector<std::string>{"x", "y"});
  // The raw reply is int64 n, then n strings (queues are not keys).
  auto fd = raw_connect(server.port());
  raw_send(fd, validate_bytes() + req(Cmd::list).bytes());
  CHECK(recv_n(fd, 8) == i64_bytes(3));
}

TEST_CASE("tcp_store client: replies over its bounds are refused, naming the store",
          "[unit][tcp_store]") {
  const auto what = GENERATE(std::string("GET"), std::string("LIST"), std::string("MULTI_GET"));
  FakePeer peer;
  peer.run([&](detail::Fd& fd) {
    answer_handshake(fd);
    char b[256];
    const auto d = detail::Deadline::after(300ms);  // swallow the request(s)
    while (!d.expired()) {
      [[maybe_unused]] auto k = ::recv(fd.get(), b, sizeof b, MSG_DONTWAIT);
      std::this_thread::sleep_for(5ms);
    }
    if (what == "GET") raw_send(fd, std::string(1, '\0') + i64_bytes(std::int64_t(1) << 40));
    if (what == "LIST") raw_send(fd, i64_bytes(std::int64_t(1) << 40));
    if (what == "MULTI_GET") {  // WAIT answered, then 3 values of 600 bytes, bound 1000
      raw_send(fd, std::string(1, '\0'));
      for (int i = 0; i < 3; ++i) raw_send(fd, str_bytes(std::string(600, 'v')));
    }
    std::this_thread::sleep_for(300ms);
  });
  auto o = copts(peer.port);
  o.limits.max_reply_bytes = 1000;
  auto c = TcpStoreClient::connect(o);
  try {
    if (what == "GET") (void)c.get("k");
    if (what == "LIST") (void)c.list_keys();
    if (what == "MULTI_GET") (void)c.multi_get({"a", "b", "c"});
    FAIL("accepted");
  } catch (const protocol_error& e) {
    CHECK(std::string(e.what()).find(what) != std::string::npos);
  }
  CHECK_FALSE(c.connected());
}

// ---- the engine's bounds (audit items 9, 10, 11, 12, 13) ----

TEST_CASE("tcp_store engine: queues count against the store bound, pops create nothing",
          "[unit][tcp_store]") {
  TcpStoreLimits lim;
  lim.max_store_bytes = 4096;
  Engine g(lim);
  g.open(1);
  for (int i = 0; i < 1000; ++i) {  // QUEUE_POP on keys that were never pushed
    auto pop = req(Cmd::queue_pop);
    pop.str("/missing" + std::to_string(i));
    REQUIRE(g.feed(1, pop.bytes()).empty());
  }
  CHECK(g.replies(1) == [] {
    std::string r;
    for (int i = 0; i < 1000; ++i) r += i64_bytes(0);
    return r;
  }());
  CHECK(g.e.num_queues() == 0);
  CHECK(g.e.stored_bytes() == 0);
  // Empty items are not free: the bound is reached after a bounded number of pushes.
  int pushed = 0;
  std::string why;
  while (why.empty() && pushed < 10000) {
    auto push = req(Cmd::queue_push);
    push.str("/q").str("");
    why = g.feed(1, push.bytes());
    if (why.empty()) ++pushed;
  }
  CHECK(why.find("exceed the store's bound") != std::string::npos);
  CHECK(pushed == static_cast<int>((4096 - (2 + kStoreEntryOverhead)) / kStoreEntryOverhead));
  CHECK(g.ok().empty());
  CHECK(g.e.stored_bytes() <= 4096);
  // Popping everything gives all of it back.
  g.open(2);
  for (int i = 0; i < pushed; ++i) {
    auto pop = req(Cmd::queue_pop);
    pop.str("/q");
    REQUIRE(g.feed(2, pop.bytes()).empty());
  }
  CHECK(g.e.num_queues() == 0);
  CHECK(g.e.stored_bytes() == 0);
  CHECK(g.ok().empty());
}

TEST_CASE("tcp_store engine: a request's total size and a reply's size are bounded",
          "[unit][tcp_store]") {
  TcpStoreLimits lim;
  lim.max_request_bytes = 1 << 20;
  lim.max_reply_bytes = 1 << 20;
  Engine g(lim);
  g.open(1);
  SECTION("MULTI_SET of 3 x 512 KiB") {
    auto ms = req(Cmd::multi_set);
    ms.u64(3);
    for (int i = 0; i < 3; ++i) ms.str("/k" + std::to_string(i)).str(std::string(512 * 1024, 'x'));
    const std::string why = g.feed(1, ms.bytes());
    CHECK(why.find("per request") != std::string::npos);
    CHECK(g.e.num_keys() == 0);  // refused before any of it ran
  }
  SECTION("refused from the announced length, before the bytes arrive") {
    auto ms = req(Cmd::multi_set);
    ms.u64(3).str("/a").str(std::string(600 * 1024, 'x')).str("/b").u64(600 * 1024);
    CHECK(g.feed(1, ms.bytes()).find("per request") != std::string::npos);
  }
  SECTION("MULTI_GET naming one 64 KiB value 100 times") {
    auto set = req(Cmd::set);
    set.str("/big").str(std::string(64 * 1024, 'x'));
    REQUIRE(g.feed(1, set.bytes()).empty());
    const std::string why =
        g.feed(1, keys_req(Cmd::multi_get, std::vector<std::string>(100, "/big")));
    CHECK(why.find("MULTI_GET of 100 keys would answer") != std::string::npos);
    CHECK(g.replies(1).empty());
  }
  SECTION("LIST of many keys") {
    for (int i = 0; i < 150; ++i) {
      auto set = req(Cmd::set);
      set.str("/" + std::string(8000, 'k') + std::to_string(i)).str("");
      REQUIRE(g.feed(1, set.bytes()).empty());
    }
    CHECK(g.feed(1, req(Cmd::list).bytes()).find("LIST of 150 keys") != std::string::npos);
  }
  SECTION("APPEND cannot grow a value past max_value_bytes") {
    TcpStoreLimits small;
    small.max_value_bytes = 100;
    Engine h(small);
    h.open(1);
    auto ap = req(Cmd::append);
    ap.str("/a").str(std::string(60, 'x'));
    REQUIRE(h.feed(1, ap.bytes()).empty());
    CHECK(h.feed(1, ap.bytes()).find("APPEND would grow") != std::string::npos);
    CHECK(h.ok().empty());
  }
  CHECK(g.ok().empty());
}

TEST_CASE("tcp_store engine: a request that throws is not run again", "[unit][tcp_store]") {
  Engine g;
  g.open(1);
  g.open(2);
  int adds = 0;
  g.e.fault_hook = [&](Cmd c) {
    if (c == Cmd::add && ++adds == 2) throw std::bad_alloc();
  };
  auto add = req(Cmd::add);
  add.str("/n").i64(1);
  const std::string why = g.feed(1, add.bytes() + add.bytes() + add.bytes());
  CHECK(why.find("failed on the server") != std::string::npos);
  CHECK(g.replies(1) == i64_bytes(1));
  CHECK_FALSE(g.e.partial(1));  // nothing left to replay
  g.e.fault_hook = nullptr;
  CHECK(g.feed(1, "").empty());  // even if the caller kept feeding, nothing would run again
  auto get = req(Cmd::get);
  get.str("/n");
  REQUIRE(g.feed(2, get.bytes()).empty());
  CHECK(g.replies(2) == str_bytes("1"));
}

TEST_CASE("tcp_store engine: a large request in small pieces is read once, not once per piece",
          "[unit][tcp_store]") {
  Engine g;
  g.open(1);
  auto ms = req(Cmd::multi_set);
  const int n = 4000;
  ms.u64(n);
  for (int i = 0; i < n; ++i) ms.str("/key" + std::to_string(i)).str(std::string(2000, 'v'));
  const std::string& b = ms.bytes();
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t pos = 0; pos < b.size(); pos += 256) {
    const std::string why = g.feed(1, b.substr(pos, 256));
    if (!why.empty()) FAIL(why);
  }
  const auto took = since(t0);
  CHECK(g.e.num_keys() == static_cast<std::size_t>(n));
  INFO("fed " << b.size() << " bytes in 256-byte pieces in " << took.count() << " ms");
  CHECK(took < 2000ms);  // re-parsing (and copying) from the start on every piece: many seconds
  CHECK(g.ok().empty());
}

TEST_CASE("tcp_store engine: the bookkeeping holds after every kind of request",
          "[unit][tcp_store]") {
  TcpStoreLimits lim;
  lim.max_store_bytes = 1 << 16;
  Engine g(lim);
  g.open(1);
  g.open(2);
  std::mt19937 rng(7);
  const std::vector<std::string> names{"/a", "/b", "/c", "/q"};
  for (int i = 0; i < 3000; ++i) {
    const std::string& k = names[rng() % names.size()];
    const int c = 1 + static_cast<int>(rng() % 2);
    detail::c10d::Out o;
    switch (rng() % 9) {
      case 0:
        o = req(Cmd::set);
        o.str(k).str(std::string(rng() % 100, 'v'));
        break;
      case 1:
        o = req(Cmd::delete_key);
        o.str(k);
        break;
      case 2:
        o = req(Cmd::queue_push);
        o.str(k).str("i");
        break;
      case 3:
        o = req(Cmd::queue_pop);
        o.str(k);
        break;
      case 4:
        o.bytes() = keys_req(Cmd::wait, {k, names[rng() % names.size()]});
        break;
      case 5:
        o = req(Cmd::cancel_wait);
        break;
      case 6:
        o = req(Cmd::compare_set);
        o.str(k).str("").str("cs");
        break;
      case 7:
        o = req(Cmd::append);
        o.str(k).str("+");
        break;
      case 8:
        o = req(Cmd::add);
        o.str("/n").i64(1);
        break;
    }
    const std::string why = g.feed(c, o.bytes());
    if (!why.empty()) {  // a second WAIT on a connection: dropped, as in the server
      g.e.close(c);
      g.open(c);
    }
    INFO("step " << i);
    REQUIRE(g.ok().empty());
  }
}

TEST_CASE("tcp_store: max_connections, max_store_bytes and max_pending_output",
          "[unit][tcp_store]") {
  set_quiet();
  SECTION("max_connections") {
    TcpStoreServerOptions so;
    so.limits.max_connections = 2;
    TcpStoreServer server(so);
    auto a = TcpStoreClient::connect(copts(server.port()));
    auto b = std::make_unique<TcpStoreClient>(TcpStoreClient::connect(copts(server.port())));
    a.set("k", "v");
    b->set("k2", "v");  // both are being served
    auto third = raw_connect(server.port());
    CHECK(closed_within(third, 2000ms));
    CHECK(server.refused() == 1);
    b.reset();  // a slot frees up
    std::this_thread::sleep_for(100ms);
    auto c = TcpStoreClient::connect(copts(server.port()));
    CHECK(c.get("k") == "v");
  }
  SECTION("max_store_bytes") {
    TcpStoreServerOptions so;
    so.limits.max_store_bytes = 8192;
    TcpStoreServer server(so);
    auto a = TcpStoreClient::connect(copts(server.port()));
    a.set("small", "v");
    a.set("big", std::string(9000, 'x'));  // dropped by the server
    CHECK(refused_within(server, 1, 2000ms));
    CHECK_THROWS(a.num_keys());
    auto b = TcpStoreClient::connect(copts(server.port()));
    CHECK(b.num_keys() == 1);
    CHECK(b.get("small") == "v");
  }
  SECTION("max_pending_output: a peer that stops reading") {
    TcpStoreServerOptions so;
    so.max_pending_output = 1 << 20;
    TcpStoreServer server(so);
    auto a = TcpStoreClient::connect(copts(server.port()));
    a.set("big", std::string(1 << 20, 'x'));
    REQUIRE(a.get("big").size() == (1u << 20));  // SET has no reply: stored before the GETs
    auto fd = raw_connect(server.port());
    std::string gets = validate_bytes();
    for (int i = 0; i < 64; ++i) {
      auto g = req(Cmd::get);
      g.str("/big");
      gets += g.bytes();
    }
    raw_send(fd, gets);  // 64 MiB of replies, none read
    CHECK(refused_within(server, 1, 5000ms));
    CHECK(a.get("big").size() == (1u << 20));
  }
  set_log_handler(nullptr);
}

}  // namespace ws_test_tcp_store_test
