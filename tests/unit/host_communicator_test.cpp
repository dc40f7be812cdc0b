// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// HostCommunicator across real processes on 127.0.0.1.
#include <weightsync/host/communicator.hpp>

#include <signal.h>

#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "support/catch.hpp"
#include "support/host_world.hpp"
#include "support/outcomes.hpp"
#include "support/process.hpp"

// (a namespace per test source: the sources build as unity translation units)
namespace ws_test_host_communicator_test {

using namespace weightsync;
using namespace std::chrono_literals;
using ws_test::Outcome;

namespace {
HostCommunicator connect(int port, int rank, int world,
                         std::chrono::milliseconds op_timeout = 3000ms) {
  return ws_test::connect_host(port, rank, world, 8000ms, op_timeout);
}

std::vector<unsigned char> pattern(std::size_t n, unsigned seed) {
  std::vector<unsigned char> v(n);
  std::mt19937 rng(seed);
  for (auto& b : v) b = static_cast<unsigned char>(rng());
  return v;
}
}  // namespace

TEST_CASE("host broadcast: every root, several sizes, bit-exact", "[unit][host]") {
  const int world = GENERATE(2, 3, 5);
  ws_test::Processes procs;
  const int port = ws_test::free_port();
  procs.spawn_ranks(world, [=](int rank) {
    auto comm = connect(port, rank, world);
    for (int root = 0; root < world; ++root)
      for (std::size_t n :
           {std::size_t{0}, std::size_t{1}, std::size_t{4097}, (std::size_t{3} << 20) + 5}) {
        const auto want = pattern(n, static_cast<unsigned>(root * 7919 + n));
        std::vector<unsigned char> buf = rank == root ? want : std::vector<unsigned char>(n, 0xAB);
        comm.broadcast(buf.data(), n, root);
        if (buf != want)
          throw std::runtime_error("rank " + std::to_string(rank) + " got wrong bytes from root " +
                                   std::to_string(root) + ", n=" + std::to_string(n));
      }
  });
  ws_test::expect_all_ok(procs.wait_all(30s));
}

TEST_CASE("host broadcast: a peer killed mid-transfer fails every other rank in time",
          "[unit][host]") {
  const int world = GENERATE(3, 5);
  ws_test::Processes procs;
  const int port = ws_test::free_port();
  const int victim = 1;
  procs.spawn_ranks(world, [=](int rank) {
    auto comm = connect(port, rank, world, 2000ms);
    std::vector<unsigned char> buf(std::size_t{32} << 20, 1);
    for (int i = 0; i < 100000; ++i) comm.broadcast(buf.data(), buf.size(), 0);
  });
  std::this_thread::sleep_for(700ms);  // rendezvous done, broadcasts flowing
  procs.kill(victim);
  const auto res = procs.wait_all(10s);
  CHECK(res[victim].outcome == Outcome::killed);
  ws_test::expect_survivors_failed(res, victim, 0.7 + 2.0 + 2.0);  // kill time + deadline + slack
}

TEST_CASE("host broadcast: a stopped peer is a timeout, not a hang", "[unit][host]") {
  ws_test::Processes procs;
  const int port = ws_test::free_port();
  procs.spawn_ranks(2, [=](int rank) {
    auto comm = connect(port, rank, 2, 800ms);
    std::vector<unsigned char> buf(std::size_t{64} << 20, 1);
    for (int i = 0; i < 100000; ++i) comm.broadcast(buf.data(), buf.size(), 0);
  });
  std::this_thread::sleep_for(500ms);
  procs.kill(1, SIGSTOP);
  const auto res = procs.wait_all(4s);
  CHECK(res[0].outcome == Outcome::timeout);
  CHECK(res[0].message.find("stopped reading") != std::string::npos);
  CHECK(res[1].outcome == Outcome::hung);  // it was stopped; the harness killed it
}

TEST_CASE("host broadcast: ranks that disagree on the operation get a protocol error",
          "[unit][host]") {
  ws_test::Processes procs;
  const int port = ws_test::free_port();
  procs.spawn_ranks(3, [=](int rank) {
    auto comm = connect(port, rank, 3);
    std::vector<unsigned char> buf(100);
    comm.broadcast(buf.data(), rank == 2 ? 50 : 100, 0);  // rank 2 expects another size
  });
  const auto res = procs.wait_all(8s);
  CHECK(res[0].outcome == Outcome::ok);  // rank 0 has sent everything before rank 2 notices
  CHECK(res[1].outcome == Outcome::ok);
  CHECK(res[2].outcome == Outcome::protocol);
  CHECK(res[2].message.find("expects root 0 and 50 bytes") != std::string::npos);
}

TEST_CASE("host grouped broadcasts: one from every rank runs as a ring allgather, bit-exact",
          "[unit][host]") {
  const int world = GENERATE(2, 3, 4);
  ws_test::Processes procs;
  const int port = ws_test::free_port();
  procs.spawn_ranks(world, [=](int rank) {
    auto comm = connect(port, rank, world);
    for (std::size_t n :
         {std::size_t{0}, std::size_t{1}, std::size_t{256}, (std::size_t{2} << 20) + 3}) {
      std::vector<std::vector<unsigned char>> blocks(static_cast<std::size_t>(world));
      for (int r = 0; r < world; ++r)
        blocks[static_cast<std::size_t>(r)] = r == rank
                                                  ? pattern(n, static_cast<unsigned>(r * 31 + n))
                                                  : std::vector<unsigned char>(n, 0xCD);
      comm.group_start();
      for (int r = 0; r < world; ++r)
        comm.broadcast(blocks[static_cast<std::size_t>(r)].data(), n, r);
      comm.group_end();
      for (int r = 0; r < world; ++r)
        if (blocks[static_cast<std::size_t>(r)] != pattern(n, static_cast<unsigned>(r * 31 + n)))
          throw std::runtime_error("rank " + std::to_string(rank) + ": block of rank " +
                                   std::to_string(r) + " wrong, n=" + std::to_string(n));
      // A group that is not an allgather (two roots of different sizes) runs in order, and a
      // plain broadcast after it still lines up.
      std::vector<unsigned char> a =
          rank == 0 ? pattern(n + 5, 1) : std::vector<unsigned char>(n + 5, 0);
      std::vector<unsigned char> b =
          rank == world - 1 ? pattern(7, 2) : std::vector<unsigned char>(7, 0);
      comm.group_start();
      comm.broadcast(a.data(), a.size(), 0);
      comm.broadcast(b.data(), b.size(), world - 1);
      comm.group_end();
      std::vector<unsigned char> c = rank == 1 ? pattern(99, 3) : std::vector<unsigned char>(99, 0);
      comm.broadcast(c.data(), c.size(), 1);
      if (a != pattern(n + 5, 1) || b != pattern(7, 2) || c != pattern(99, 3))
        throw std::runtime_error("rank " + std::to_string(rank) + ": mixed group wrong");
    }
  });
  ws_test::expect_all_ok(procs.wait_all(30s));
}

TEST_CASE("host grouped broadcasts: ranks that disagree (allgather vs broadcasts) fail, no hang",
          "[unit][host]") {
  ws_test::Processes procs;
  const int port = ws_test::free_port();
  procs.spawn_ranks(2, [=](int rank) {
    auto comm = connect(port, rank, 2, 1500ms);
    std::vector<unsigned char> x(64, 1), y(64, 2);
    if (rank == 0) {
      comm.group_start();
      comm.broadcast(x.data(), 64, 0);
      comm.broadcast(y.data(), 64, 1);
      comm.group_end();
    } else {
      comm.broadcast(x.data(), 64, 0);
      comm.broadcast(y.data(), 64, 1);
    }
  });
  const auto res = procs.wait_all(10s);
  for (const auto& r : res) CHECK(r.outcome != Outcome::ok);
  for (const auto& r : res) CHECK(r.outcome != Outcome::hung);
}

}  // namespace ws_test_host_communicator_test
