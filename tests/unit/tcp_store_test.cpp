// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// The c10d TCPStore server and client: every command in both dialects, bad input, deadlines, and
// the server surviving misbehaving connections.
#include <weightsync/host/tcp_store_client.hpp>
#include <weightsync/host/tcp_store_engine.hpp>
#include <weightsync/host/tcp_store_server.hpp>
#include <weightsync/host/torch_store_group.hpp>

#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "support/catch.hpp"
#include "support/process.hpp"

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
}  // namespace

TEST_CASE("tcp_store: every command, torch 2.x and torch 1.13 dialects", "[unit][tcp_store]") {
  const auto wire = GENERATE(TcpStoreWire::torch2, TcpStoreWire::torch1_13);
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
  CHECK(c.compare_set("cs", "", "first") == "first");       // missing + empty expected: sets
  CHECK(c.compare_set("cs", "wrong", "second") == "first");  // mismatch: unchanged
  CHECK(c.compare_set("cs", "first", "second") == "second");
  CHECK(c.compare_set("absent", "x", "y") == "x");  // torch's answer for a missing key
  if (wire == TcpStoreWire::torch2) {
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
  if (wire == TcpStoreWire::torch1_13) CHECK_THROWS_AS(c.ping(1), state_error);
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

TEST_CASE("tcp_store: BARRIER and queues", "[unit][tcp_store]") {
  TcpStoreServer server;
  auto a = TcpStoreClient::connect(copts(server.port()));
  auto b = TcpStoreClient::connect(copts(server.port()));
  auto raw = [](detail::c10d::Cmd c) { return static_cast<std::uint8_t>(detail::c10d::byte_of(c, TcpStoreWire::torch2)); };
  detail::Fd fa = raw_connect(server.port());
  detail::Fd fb = raw_connect(server.port());
  detail::c10d::Out q;
  q.u8(raw(detail::c10d::Cmd::barrier)).str("/bar").i64(2);
  raw_send(fa, validate_bytes() + q.bytes());
  std::this_thread::sleep_for(50ms);
  std::uint8_t r = 9;
  CHECK_THROWS_AS(detail::recv_all(fa.get(), &r, 1, detail::Deadline::after(100ms), "t", 0), timeout_error);
  raw_send(fb, validate_bytes() + q.bytes());
  detail::recv_all(fb.get(), &r, 1, detail::Deadline::after(1000ms), "t", 0);
  CHECK(r == 0);
  r = 9;
  detail::recv_all(fa.get(), &r, 1, detail::Deadline::after(1000ms), "t", 0);
  CHECK(r == 0);
  // QUEUE_PUSH / QUEUE_LEN / QUEUE_POP
  detail::c10d::Out p;
  p.u8(raw(detail::c10d::Cmd::queue_push)).str("/q").str("item");
  p.u8(raw(detail::c10d::Cmd::queue_len)).str("/q");
  p.u8(raw(detail::c10d::Cmd::queue_pop)).str("/q");
  raw_send(fa, p.bytes());
  std::int64_t len = 0, n = 0;
  std::uint64_t sz = 0;
  detail::recv_all(fa.get(), &len, 8, detail::Deadline::after(1000ms), "t", 0);
  detail::recv_all(fa.get(), &n, 8, detail::Deadline::after(1000ms), "t", 0);
  detail::recv_all(fa.get(), &sz, 8, detail::Deadline::after(1000ms), "t", 0);
  std::string item(sz, '\0');
  detail::recv_all(fa.get(), item.data(), sz, detail::Deadline::after(1000ms), "t", 0);
  CHECK(len == 1);
  CHECK(n == 1);
  CHECK(item == "item");
  (void)a;
  (void)b;
}

TEST_CASE("tcp_store: garbage, oversized, truncated and unknown requests are refused, the server "
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
    CHECK_THROWS_AS(TcpStoreClient::connect(copts(port, TcpStoreWire::torch2, 300ms)), timeout_error);
    CHECK(std::chrono::steady_clock::now() - t0 < 2000ms);
    t.join();
  }
  SECTION("garbage answer: protocol error") {
    std::thread t([&] {
      auto fd = detail::accept_tcp(listener.get(), detail::Deadline::after(2000ms));
      raw_send(fd, "HTTP/1.1 400 Bad Request\r\n\r\n");
      std::this_thread::sleep_for(300ms);
    });
    CHECK_THROWS_AS(TcpStoreClient::connect(copts(port, TcpStoreWire::torch2, 1000ms)), protocol_error);
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
    INFO("input " << i << ": " << why);
    CHECK(detail::store_fuzz_one(buf.data(), buf.size(), &why) == 0);
  }
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

TEST_CASE("store group: rank 0 names a rank that never joins, a rank > 0 refuses a value that is "
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
