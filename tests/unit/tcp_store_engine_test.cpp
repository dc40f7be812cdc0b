// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// The c10d TCPStore engine (the server's state machine, driven without sockets): random input,
// WAIT wake-ups, the store and request bounds, and its bookkeeping after every kind of request.
#include <weightsync/c10d/detail/store_engine.hpp>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "support/catch.hpp"
#include "support/tcp_store_helpers.hpp"

// (a namespace per test source: the sources build as unity translation units)
namespace ws_test_tcp_store_engine_test {

using namespace weightsync;
using namespace std::chrono_literals;
using namespace ws_test::tcp_store;

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

}  // namespace ws_test_tcp_store_engine_test
