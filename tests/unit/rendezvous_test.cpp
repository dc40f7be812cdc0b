// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Rendezvous across real processes on 127.0.0.1.
#include <cstdint>
#include <weightsync/host/rendezvous.hpp>

#include <chrono>
#include <string>
#include <thread>

#include "support/catch.hpp"
#include "support/host_world.hpp"
#include "support/outcomes.hpp"
#include "support/process.hpp"

// (a namespace per test source: the sources build as unity translation units)
namespace ws_test_rendezvous_test {

using namespace weightsync;
using namespace std::chrono_literals;
using ws_test::Outcome;

namespace {
RendezvousOptions opts(int port, int rank, int world, std::chrono::milliseconds timeout = 5000ms) {
  RendezvousOptions o = ws_test::loopback_rendezvous(port, rank, world, timeout);
  o.hello_timeout = 500ms;
  return o;
}

// Runs one rank: meets the others and checks that every blob arrived intact.
void join_and_check(int port, int rank, int world, std::chrono::milliseconds delay) {
  std::this_thread::sleep_for(delay);
  auto r = rendezvous(opts(port, rank, world), "blob-of-" + std::to_string(rank));
  if (r.rank != rank || r.world_size != world || static_cast<int>(r.blobs.size()) != world)
    throw std::runtime_error("bad rendezvous result");
  for (int i = 0; i < world; ++i)
    if (r.blobs[static_cast<std::size_t>(i)] != "blob-of-" + std::to_string(i))
      throw std::runtime_error("blob " + std::to_string(i) + " is wrong");
}

// Opens a raw connection to 127.0.0.1:port (retrying until the listener is up).
detail::Fd raw_connect(int port) {
  return detail::connect_tcp("127.0.0.1", port, detail::Deadline::after(5000ms), "test", 0);
}
void raw_send(const detail::Fd& fd, const std::string& bytes) {
  detail::send_all(fd.get(), bytes.data(), bytes.size(), detail::Deadline::after(1000ms), "test", 0);
}
std::string hello(int rank, int world, const std::string& token = "", std::uint16_t version =
                  detail::kProtocolVersion) {
  detail::Writer w;
  w.i32(rank);
  w.i32(world);
  w.str(token);
  w.str("x");
  auto msg = detail::Writer::message(detail::MsgType::hello, w.bytes());
  msg[4] = static_cast<char>(version & 0xff);
  msg[5] = static_cast<char>(version >> 8);
  return msg;
}
// Reads the answer of rank 0 to a raw connection: the message type, or 0 when it just closed.
int answer_type(const detail::Fd& fd) {
  char hdr[detail::kMsgHeaderBytes];
  try {
    detail::recv_all(fd.get(), hdr, sizeof hdr, detail::Deadline::after(2000ms), "test", 0);
  } catch (const error&) {
    return 0;
  }
  return detail::parse_header(hdr).type;
}
}  // namespace

TEST_CASE("rendezvous: every world size, ranks start in any order", "[unit][rendezvous]") {
  const int world = GENERATE(2, 3, 5);
  const int order = GENERATE(0, 1);  // 0: rank 0 first; 1: rank 0 last
  ws_test::Processes procs;
  const int port = ws_test::free_port();
  for (int r = 0; r < world; ++r) {
    const int rank = order == 0 ? r : world - 1 - r;
    const auto delay = std::chrono::milliseconds(40 * r);
    procs.spawn([=] { join_and_check(port, rank, world, delay); });
  }
  ws_test::expect_all_ok(procs.wait_all(10s));
}

TEST_CASE("rendezvous: a peer with another world size is rejected", "[unit][rendezvous]") {
  ws_test::Processes procs;
  const int port = ws_test::free_port();
  procs.spawn([=] { (void)rendezvous(opts(port, 0, 2, 1500ms)); });
  procs.spawn([=] { (void)rendezvous(opts(port, 1, 3, 1500ms)); });
  const auto res = procs.wait_all(6s);
  CHECK(res[0].outcome == Outcome::timeout);  // the right peer never came
  CHECK(res[0].message.find("rank(s) 1 of 2 never joined") != std::string::npos);
  CHECK(res[0].message.find("world_size 3") != std::string::npos);  // says why it rejected
  CHECK(res[1].outcome == Outcome::protocol);
  CHECK(res[1].message.find("world_size 3, rank 0 has 2") != std::string::npos);
  for (const auto& r : res) CHECK(r.seconds < 3.0);
}

TEST_CASE("rendezvous: the master port is already taken", "[unit][rendezvous]") {
  auto taken = detail::listen_tcp("127.0.0.1", 0);
  const int port = detail::local_port(taken.get());
  try {
    (void)rendezvous(opts(port, 0, 2, 1000ms));
    FAIL("rank 0 listened on a taken port");
  } catch (const config_error& e) {
    CHECK(e.field() == "master_port");
    CHECK(std::string(e.what()).find("already in use") != std::string::npos);
  }
}

TEST_CASE("rendezvous: garbage, oversized prefixes and strangers do not take rank 0 down",
          "[unit][rendezvous]") {
  ws_test::Processes procs;
  const int port = ws_test::free_port();
  procs.spawn([=] {
    auto o = opts(port, 0, 3, 8000ms);
    o.token = "secret";
    auto r = rendezvous(o, "root");
    if (r.blobs[1] != "x1" || r.blobs[2] != "x2") throw std::runtime_error("bad blobs");
  });
  {
    // Plain garbage: dropped without an answer.
    auto g = raw_connect(port);
    raw_send(g, "GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK(answer_type(g) == 0);
    // A valid magic with an absurd length prefix: dropped before reading it.
    auto big = raw_connect(port);
    std::string hdr = detail::Writer::message(detail::MsgType::hello, "");
    hdr[8] = hdr[9] = hdr[10] = hdr[11] = '\xff';
    raw_send(big, hdr);
    CHECK(answer_type(big) == 0);
    // A well-formed hello of another protocol version: rejected with a reason.
    auto ver = raw_connect(port);
    raw_send(ver, hello(1, 3, "secret", 99));
    CHECK(answer_type(ver) == static_cast<int>(detail::MsgType::reject));
    // Ranks outside the world, a wrong token: rejected.
    for (auto msg : {hello(0, 3, "secret"), hello(3, 3, "secret"), hello(-1, 3, "secret"),
                     hello(1, 3, "wrong"), hello(1, 3, "")}) {
      auto c = raw_connect(port);
      raw_send(c, msg);
      CHECK(answer_type(c) == static_cast<int>(detail::MsgType::reject));
    }
    // A truncated hello that then goes silent: dropped after hello_timeout.
    auto silent = raw_connect(port);
    raw_send(silent, hello(1, 3, "secret").substr(0, 15));
    CHECK(answer_type(silent) == 0);
  }
  // The real ranks still get in; a duplicate of rank 1 is rejected.
  procs.spawn([=] {
    auto o = opts(port, 1, 3, 8000ms);
    o.token = "secret";
    (void)rendezvous(o, "x1");
  });
  std::this_thread::sleep_for(200ms);
  auto dup = raw_connect(port);
  raw_send(dup, hello(1, 3, "secret"));
  CHECK(answer_type(dup) == static_cast<int>(detail::MsgType::reject));
  procs.spawn([=] {
    auto o = opts(port, 2, 3, 8000ms);
    o.token = "secret";
    (void)rendezvous(o, "x2");
  });
  ws_test::expect_all_ok(procs.wait_all(10s));
}

TEST_CASE("rendezvous: a peer without the token is refused", "[unit][rendezvous]") {
  ws_test::Processes procs;
  const int port = ws_test::free_port();
  procs.spawn([=] {
    auto o = opts(port, 0, 2, 1500ms);
    o.token = "secret";
    (void)rendezvous(o);
  });
  procs.spawn([=] { (void)rendezvous(opts(port, 1, 2, 1500ms)); });
  const auto res = procs.wait_all(6s);
  CHECK(res[0].outcome == Outcome::timeout);
  CHECK(res[1].outcome == Outcome::protocol);
  CHECK(res[1].message.find("wrong token") != std::string::npos);
}

TEST_CASE("rendezvous: nobody listening is a timeout naming the address", "[unit][rendezvous]") {
  const int port = ws_test::free_port();
  const auto t0 = std::chrono::steady_clock::now();
  try {
    (void)rendezvous(opts(port, 1, 2, 600ms));
    FAIL("joined nobody");
  } catch (const timeout_error& e) {
    CHECK(e.phase() == "rendezvous");
    CHECK(std::string(e.what()).find("127.0.0.1:" + std::to_string(port)) != std::string::npos);
  }
  CHECK(std::chrono::steady_clock::now() - t0 < 2s);
}

TEST_CASE("rendezvous: the control channel reports a peer that dies", "[unit][rendezvous]") {
  ws_test::Processes procs;
  const int port = ws_test::free_port();
  procs.spawn([=] {
    auto r = rendezvous(opts(port, 0, 3));
    const auto until = std::chrono::steady_clock::now() + 5s;
    while (std::chrono::steady_clock::now() < until) {
      r.control.check();  // throws once rank 2 is gone
      std::this_thread::sleep_for(5ms);
    }
  });
  procs.spawn([=] {
    auto r = rendezvous(opts(port, 1, 3));
    std::this_thread::sleep_for(3s);
  });
  const auto killed = procs.spawn([=] {
    auto r = rendezvous(opts(port, 2, 3));
    std::this_thread::sleep_for(300ms);
    ::kill(::getpid(), SIGKILL);
  });
  const auto res = procs.wait_all(10s);
  CHECK(res[killed].outcome == Outcome::killed);
  CHECK(res[0].outcome == Outcome::peer);
  CHECK(res[0].message.find("rank 2 is gone") != std::string::npos);
  CHECK(res[0].seconds < 2.0);
}

}  // namespace ws_test_rendezvous_test
