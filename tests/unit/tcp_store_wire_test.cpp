// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// torch's TCPStore wire: the QueryType byte values of each dialect, an unknown query byte, a WAIT
// of many keys, and torch 2.0's dialect (no handshake).
#include <weightsync/c10d/client.hpp>
#include <weightsync/c10d/detail/store_engine.hpp>
#include <weightsync/c10d/server.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "support/catch.hpp"
#include "support/tcp_store_helpers.hpp"

// (a namespace per test source: the sources build as unity translation units)
namespace ws_test_tcp_store_wire_test {

using namespace weightsync;
using namespace std::chrono_literals;
using namespace ws_test::tcp_store;

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

}  // namespace ws_test_tcp_store_wire_test
