// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// The c10d TCPStore client: peers that are no TCPStore or do not answer the handshake, one deadline
// for connect and validation, waits, queues and LIST, and replies over the client's bounds.
#include <weightsync/c10d/client.hpp>
#include <weightsync/c10d/server.hpp>

#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "support/catch.hpp"
#include "support/process.hpp"
#include "support/tcp_store_helpers.hpp"

// (a namespace per test source: the sources build as unity translation units)
namespace ws_test_tcp_store_client_test {

using namespace weightsync;
using namespace std::chrono_literals;
using namespace ws_test::tcp_store;

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

}  // namespace ws_test_tcp_store_client_test
