// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Rendezvous under abuse: hundreds of hostile or silent connections while a real round waits. The
// round still succeeds within its deadline; every bad connection is dropped with a logged reason
// (a silent one by the hello deadline), and rank 0 keeps none of them open.
#include <weightsync/host/rendezvous.hpp>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "support/catch.hpp"
#include "support/process.hpp"

// (a namespace per test source: the sources build as unity translation units)
namespace ws_test_rendezvous_abuse_test {

using namespace std::chrono_literals;
using namespace weightsync;
using ws_test::Outcome;

namespace {

RendezvousOptions flood_opts(int port, int rank) {
  RendezvousOptions o;
  o.port = port;
  o.rank = rank;
  o.world_size = 3;
  o.token = "secret";
  o.timeout = 20s;
  o.hello_timeout = 1500ms;
  return o;
}

std::string hello_bytes(int rank, int world, const std::string& token) {
  detail::Writer w;
  w.i32(rank);
  w.i32(world);
  w.str(token);
  w.str("x");
  return detail::Writer::message(detail::MsgType::hello, w.bytes());
}

// Sends what it can (a stranger that stops reading must not block the test).
void try_send(const detail::Fd& fd, const std::string& bytes) {
  try {
    detail::send_all(fd.get(), bytes.data(), bytes.size(), detail::Deadline::after(200ms), "test", 0);
  } catch (const error&) {
  }
}

// How many sockets this process holds open (its /proc/self/fd entries that are sockets).
int open_sockets() {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const auto target = std::filesystem::read_symlink(e.path(), ec);
    if (!ec && target.string().rfind("socket:", 0) == 0) ++n;
  }
  return n;
}

// True when rank 0 has closed (or answered and closed) the connection by `deadline`.
bool dropped_by(const detail::Fd& fd, detail::Deadline deadline) {
  char buf[4096];
  while (true) {
    pollfd p{fd.get(), POLLIN, 0};
    if (::poll(&p, 1, deadline.poll_ms()) <= 0) return false;
    const ssize_t k = ::recv(fd.get(), buf, sizeof buf, 0);
    if (k == 0 || (k < 0 && errno != EINTR && errno != EAGAIN)) return true;
  }
}

}  // namespace

TEST_CASE("rendezvous abuse: 500 hostile connections while a round waits: the round still succeeds",
          "[unit][rendezvous][abuse]") {
  ws_test::Processes procs;
  const int port = ws_test::free_port();
  const auto t0 = std::chrono::steady_clock::now();
  procs.spawn([=] {
    // Rank 0 counts the reasons it logs for dropping connections.
    auto counts = std::make_shared<std::map<std::string, int>>();
    auto mu = std::make_shared<std::mutex>();
    set_log_handler([counts, mu](LogLevel level, std::string_view msg) {
      if (level < LogLevel::warning) return;
      std::lock_guard lock(*mu);
      for (const char* why : {"bad magic", "exceeds the limit", "no complete hello within",
                              "connections awaiting their hello", "wrong token",
                              "connection closed before", "rendezvous already complete",
                              "message is truncated"})
        if (msg.find(why) != std::string_view::npos) ++(*counts)[why];
    });
    const int sockets_before = open_sockets();
    {
      auto r = rendezvous(flood_opts(port, 0), "root");
      set_log_handler(nullptr);
      if (r.blobs[1] != "one" || r.blobs[2] != "two") throw std::runtime_error("bad blobs");
      // Of ~500 connections, rank 0 holds only its control connections to ranks 1 and 2: every
      // stranger was closed (a leaked one would still be open here).
      const int held = open_sockets() - sockets_before;
      if (held != 2)
        throw std::runtime_error(detail::cat("rank 0 holds ", held,
                                             " sockets after the round, expected its 2 control "
                                             "connections"));
    }
    if (const int left = open_sockets() - sockets_before; left != 0)
      throw std::runtime_error(detail::cat(left, " sockets left open after the round's end"));
    std::string seen;
    int total = 0;
    for (const auto& [why, n] : *counts) {
      seen += detail::cat(why, ": ", n, "; ");
      total += n;
    }
    // Every stranger that spoke or went silent was dropped with a reason (some, still pending when
    // the round completed, as "rendezvous already complete"); the late silent ones by the hello
    // deadline.
    for (const char* why : {"bad magic", "exceeds the limit", "wrong token",
                            "connections awaiting their hello", "no complete hello within"})
      if (!counts->count(why)) throw std::runtime_error(std::string("no '") + why + "' logged: " + seen);
    if (total < 300) throw std::runtime_error("only " + std::to_string(total) + " drops logged: " + seen);
  });

  std::vector<detail::Fd> strangers;
  auto connect = [&] {
    strangers.push_back(detail::connect_tcp("127.0.0.1", port, detail::Deadline::after(5s), "test", 0));
    return strangers.back().get();
  };
  std::string huge = detail::Writer::message(detail::MsgType::hello, "");
  huge[8] = huge[9] = huge[10] = huge[11] = '\xff';
  for (int i = 0; i < 100; ++i) {
    (void)connect();  // silent
    (void)connect();
    try_send(strangers.back(), "GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    (void)connect();
    try_send(strangers.back(), huge);
  }
  for (int i = 0; i < 50; ++i) {
    (void)connect();
    try_send(strangers.back(), hello_bytes(1, 3, "wrong"));
    (void)connect();
    try_send(strangers.back(), hello_bytes(2, 3, "secret").substr(0, 20));  // then silence
  }
  // The real ranks arrive while the flood is still held open.
  procs.spawn([=] { (void)rendezvous(flood_opts(port, 1), "one"); });
  for (int i = 0; i < 100; ++i) (void)connect();  // more silent ones, after rank 1
  // The newest silent connections (no later one pushes them out of the 64 pending) are dropped by
  // the hello deadline while the round still waits for rank 2: not before, and not much after.
  const auto hello_timeout = flood_opts(port, 0).hello_timeout;
  const auto t_late = std::chrono::steady_clock::now();
  std::vector<detail::Fd> late;
  for (int i = 0; i < 5; ++i)
    late.push_back(detail::connect_tcp("127.0.0.1", port, detail::Deadline::after(5s), "test", 0));
  for (const auto& fd : late) {
    const bool dropped = dropped_by(fd, detail::Deadline::after(hello_timeout + 3s));
    const auto after = std::chrono::steady_clock::now() - t_late;
    INFO("late silent connection: dropped " << dropped << " after "
                                            << std::chrono::duration<double>(after).count()
                                            << " s");
    CHECK(dropped);
    CHECK(after >= hello_timeout - 100ms);
    CHECK(after < hello_timeout + 3s);
  }
  procs.spawn([=] { (void)rendezvous(flood_opts(port, 2), "two"); });
  for (const auto& r : procs.wait_all(30s)) {
    INFO(r.message);
    CHECK(r.outcome == Outcome::ok);
  }
  const auto took = std::chrono::steady_clock::now() - t0;
  CHECK(took < 20s);
  CHECK(strangers.size() >= 400);
}

TEST_CASE("rendezvous abuse: hello and welcome decoders refuse lies about lengths",
          "[unit][rendezvous][abuse]") {
  const std::string ok = hello_bytes(1, 3, "t").substr(detail::kMsgHeaderBytes);
  const auto h = detail::parse_hello(ok, 64);
  CHECK(h.rank == 1);
  CHECK(h.world_size == 3);
  CHECK(h.token == "t");
  CHECK(h.blob == "x");
  // A token length of 4 GiB, a blob over the limit, a truncated field, trailing bytes.
  std::string lie = ok;
  lie[8] = lie[9] = lie[10] = lie[11] = '\xff';
  CHECK_THROWS_AS(detail::parse_hello(lie, 64), protocol_error);
  CHECK_THROWS_AS(detail::parse_hello(ok, 0), protocol_error);
  for (std::size_t n = 0; n < ok.size(); ++n)
    CHECK_THROWS_AS(detail::parse_hello(ok.substr(0, n), 64), protocol_error);
  CHECK_THROWS_AS(detail::parse_hello(ok + "z", 64), protocol_error);

  detail::Writer w;
  w.i32(2);
  w.u64(7);
  for (const char* s : {"boot", "b1", "127.0.0.1", "127.0.0.1"}) w.str(s);
  const auto welcome = detail::parse_welcome(w.bytes(), 2, 64);
  CHECK(welcome.session == 7);
  CHECK(welcome.blobs == std::vector<std::string>{"boot", "b1"});
  CHECK_THROWS_AS(detail::parse_welcome(w.bytes(), 3, 64), protocol_error);  // other world size
  CHECK_THROWS_AS(detail::parse_welcome(w.bytes(), 2, 3), protocol_error);   // blob over the limit
  for (std::size_t n = 0; n < w.bytes().size(); ++n)
    CHECK_THROWS_AS(detail::parse_welcome(w.bytes().substr(0, n), 2, 64), protocol_error);
}

}  // namespace ws_test_rendezvous_abuse_test
