// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// The c10d TCPStore server over sockets: every command in each dialect, WAIT and its deadline,
// bad input refused while the server keeps serving, and its connection, store and output limits.
#include <weightsync/c10d/client.hpp>
#include <weightsync/c10d/server.hpp>

#include <poll.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "support/catch.hpp"
#include "support/tcp_store_helpers.hpp"

// (a namespace per test source: the sources build as unity translation units)
namespace ws_test_tcp_store_server_test {

using namespace weightsync;
using namespace std::chrono_literals;
using namespace ws_test::tcp_store;

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
    b->set("k2", "v");                        // both are being served
    auto third = raw_connect(server.port());  // refused at once, and told why
    std::string told;
    char buf[512];
    for (pollfd p{third.get(), POLLIN, 0}; ::poll(&p, 1, 2000) > 0;) {
      const ssize_t k = ::recv(third.get(), buf, sizeof buf, 0);
      if (k <= 0) break;
      told.append(buf, static_cast<std::size_t>(k));
    }
    CHECK(told.rfind("TCPStore refused this connection: the store is full", 0) == 0);
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

}  // namespace ws_test_tcp_store_server_test
