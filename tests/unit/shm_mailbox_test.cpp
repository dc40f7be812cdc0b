// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// ShmMailbox (ipc/detail/shm_mailbox.hpp): the ipc transport's per-sync messages through shared memory.
// Rounds between processes arrive whole and in order, long messages are announced, a wait is
// bounded and watches its peer, bad names and sizes are refused, and nothing is left in /dev/shm.
#include <weightsync/ipc/detail/shm_mailbox.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <thread>

#include "support/catch.hpp"
#include "support/outcomes.hpp"
#include "support/process.hpp"

// (a namespace per test source: the sources build as unity translation units)
namespace ws_test_shm_mailbox_test {

using namespace weightsync;
using namespace std::chrono_literals;
using detail::Frame;
using detail::ShmMailbox;

namespace {

std::string payload(std::uint64_t round, std::size_t n) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>((round * 131 + i * 7) & 0xff);
  return s;
}

bool in_dev_shm(const std::string& name) {
  struct stat st {};
  return ::stat(("/dev/shm" + name).c_str(), &st) == 0;
}

constexpr int kConsumers = 2;
constexpr std::uint64_t kRounds = 2000;

// Each round: the producer posts a message (every 100th too long to travel inline), every consumer
// checks it and posts its outcome (round 7: a failure with a long text), the producer checks them.
void consumer(const std::string& name, int index) {
  auto box = ShmMailbox::open(name, kConsumers);
  auto watch = [] {};
  for (std::uint64_t round = 1; round <= kRounds; ++round) {
    const auto m = box.receive(round, 10s, watch, "test plan");
    const std::size_t n = round % 100 == 0 ? ShmMailbox::kInlineBytes + 1 : round % 300;
    if (m.bytes != n) throw std::runtime_error("round " + std::to_string(round) + ": size");
    if (m.inline_ != (n <= ShmMailbox::kInlineBytes) || (m.inline_ && m.blob != payload(round, n)))
      throw std::runtime_error("round " + std::to_string(round) + ": bytes differ");
    Frame f(detail::FrameKind::ack, detail::Role::consumer, index + 1, round);
    const std::string text = round == 7 ? std::string(5000, 'x') : "";
    if (round == 7) f.head.code = static_cast<std::uint16_t>(detail::FrameCode::failed);
    box.post_outcome(index, round, f, text);
  }
}

}  // namespace

TEST_CASE("shm mailbox: 2000 rounds between three processes arrive whole and in order",
          "[unit][shm]") {
  auto box = ShmMailbox::create(kConsumers);
  const std::string name = box.name();
  REQUIRE(in_dev_shm(name));
  ws_test::Processes procs;
  for (int i = 0; i < kConsumers; ++i) procs.spawn([=] { consumer(name, i); });
  // The consumers open it before their first receive; the producer unlinks once they did (here:
  // after the first round, which they cannot finish without the segment).
  auto watch = [] {};
  const auto t0 = std::chrono::steady_clock::now();
  for (std::uint64_t round = 1; round <= kRounds; ++round) {
    const std::size_t n = round % 100 == 0 ? ShmMailbox::kInlineBytes + 1 : round % 300;
    box.post(round, payload(round, n));
    for (int i = 0; i < kConsumers; ++i) {
      std::string text;
      const Frame f = box.receive_outcome(i, round, text, 10s, watch, "test outcome");
      REQUIRE(f.head.transfer_id == round);
      REQUIRE(f.head.rank == i + 1);
      REQUIRE(f.ok() == (round != 7));
      REQUIRE(text.size() == (round == 7 ? ShmMailbox::kOutcomeText : 0));
    }
    if (round == 1) {
      box.unlink();
      CHECK_FALSE(in_dev_shm(name));
    }
  }
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                        .count() /
                    kRounds;
  std::printf("[ws-test] shm mailbox: %.1f us per round trip (post, 2 consumers answer)\n", us);
  ws_test::expect_all_ok(procs.wait_all(60s));
}

TEST_CASE("shm mailbox: a wait is bounded and watches its peer", "[unit][shm]") {
  auto box = ShmMailbox::create(1);
  std::string text;
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(box.receive_outcome(0, 1, text, 50ms, [] {}, "outcome"),
                  timeout_error);
  const auto waited = std::chrono::steady_clock::now() - t0;
  CHECK(waited >= 50ms);
  CHECK(waited < 2s);
  int calls = 0;
  CHECK_THROWS_AS(box.receive_outcome(
                      0, 1, text, 10s,
                      [&] {
                        if (++calls == 3) throw peer_error(1, "rank 1 is gone");
                      },
                      "outcome"),
                  peer_error);
  CHECK(calls == 3);
}

TEST_CASE("shm mailbox: bad names and sizes are refused, and nothing is left behind",
          "[unit][shm]") {
  CHECK_THROWS_AS(ShmMailbox::open("/etc/passwd", 1), config_error);
  CHECK_THROWS_AS(ShmMailbox::open("/weightsync-0-missing", 1), config_error);
  CHECK_THROWS_AS(ShmMailbox::create(0), config_error);
  std::string name;
  {
    auto box = ShmMailbox::create(2);
    name = box.name();
    try {
      ShmMailbox::open(name, 3);
      FAIL("a segment for 2 consumers was opened as one for 3");
    } catch (const config_error& e) {
      CHECK(std::string(e.what()).find("3 consumers") != std::string::npos);
    }
    auto ok = ShmMailbox::open(name, 2);
    CHECK(static_cast<bool>(ok));
    CHECK_THROWS_AS(box.post_outcome(2, 1, Frame{}, ""), config_error);
  }
  CHECK_FALSE(in_dev_shm(name));
}

}  // namespace ws_test_shm_mailbox_test
