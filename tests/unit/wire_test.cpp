// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// The explicit wire of protocol 4 and later (detail/frame.hpp): a frame is a header plus one body per kind;
// the agreed settings travel at full width, and every field of Agreement is compared, by one
// handshake for whole-tensor and sharded transfers. Frames built by hand for the comparison, and
// real processes for what protocol 3 let through (thresholds above 4 GiB - 1 compared equal; a
// sharded transfer did not compare its thresholds).
#include <weightsync/host/communicator.hpp>
#include <weightsync/packed_broadcast.hpp>
#include <weightsync/sharded_broadcast.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/catch.hpp"
#include "support/host_world.hpp"
#include "support/outcomes.hpp"
#include "support/process.hpp"
#include "support/shard_model.hpp"

// (a namespace per test source: the sources build as unity translation units)
namespace ws_test_wire_test {

using namespace weightsync;
using namespace std::chrono_literals;
using detail::Agreement;
using detail::Frame;
using detail::FrameKind;
using detail::Role;

namespace {

Agreement base_agreement() {
  Agreement a{};
  a.buffer_size_bytes = 1 << 20;
  a.direct_threshold_bytes = std::uint64_t{5} << 30;
  a.split_min_region_bytes = 64 << 20;
  a.num_tensors = 3;
  a.total_bytes = 4096;
  a.metadata_digest = 0x1234;
  a.num_buffers = 2;
  a.packed = 1;
  return a;
}

std::vector<Frame> frames(const Agreement& producer, const Agreement& consumer) {
  std::vector<Frame> all;
  all.emplace_back(FrameKind::handshake, Role::producer, 0, 77);
  all.emplace_back(FrameKind::handshake, Role::consumer, 1);
  all[0].handshake.agreed = producer;
  all[1].handshake.agreed = consumer;
  return all;
}

// What rank 0 (the reference) reports when rank 1 has `consumer`.
std::string differences(const Agreement& producer, const Agreement& consumer, int& first_bad) {
  return detail::handshake_differences(frames(producer, consumer), 0, producer, first_bad);
}

}  // namespace

TEST_CASE("wire: a frame is a 24-byte header and one 232-byte body per kind", "[unit][wire]") {
  STATIC_REQUIRE(sizeof(Frame) == detail::kFrameBytes);
  STATIC_REQUIRE(sizeof(detail::FrameHeader) == 24);
  const Frame blank;
  CHECK(blank.head.magic == detail::kFrameMagic);
  CHECK(blank.head.version == detail::kProtocolVersion);
  CHECK(blank.head.rank == -1);
  for (std::byte b : blank.raw) REQUIRE(b == std::byte{0});
  // Each kind's text lives in its own body, cut to what the body holds.
  const std::string long_text(1000, 'x');
  for (FrameKind k : {FrameKind::handshake, FrameKind::status, FrameKind::ack}) {
    Frame f(k, Role::consumer, 3, 9);
    CHECK(f.ok());
    CHECK(f.text().empty());
    f.fail(detail::FrameCode::failed, "disk full");
    CHECK_FALSE(f.ok());
    CHECK(f.text() == "disk full");
    f.fail(detail::FrameCode::failed, long_text);
    CHECK(f.text().size() < detail::kFrameBodyBytes);
    CHECK(f.text() == long_text.substr(0, f.text().size()));
    CHECK(f.head.rank == 3);
    CHECK(f.head.transfer_id == 9);
  }
  // The agreed settings do not overlap the failure text.
  Frame h(FrameKind::handshake, Role::producer, 0);
  h.handshake.agreed = base_agreement();
  h.fail(detail::FrameCode::failed, long_text);
  CHECK(h.handshake.agreed == base_agreement());
}

TEST_CASE("wire: every agreed setting that differs is named, at full width", "[unit][wire]") {
  struct Case {
    const char* want;
    std::function<void(Agreement&)> change;
  };
  const std::vector<Case> cases = {
      {"packed differs: rank 0 has true, rank 1 has false", [](Agreement& a) { a.packed = 0; }},
      {"acknowledge differs: rank 0 has next_transfer, rank 1 has each_transfer",
       [](Agreement& a) { a.acknowledge = static_cast<std::uint8_t>(Acknowledge::each_transfer); }},
      {"checksum differs: rank 0 has off, rank 1 has on", [](Agreement& a) { a.checksum = 1; }},
      {"packed_buffer_size_bytes differs: rank 0 has 1048576, rank 1 has 8",
       [](Agreement& a) { a.buffer_size_bytes = 8; }},
      {"packed_num_buffers differs: rank 0 has 2, rank 1 has 3",
       [](Agreement& a) { a.num_buffers = 3; }},
      // Protocol 3 clamped this threshold to 32 bits: 5 GiB and 5 GiB + 1 compared equal.
      {"direct_threshold_bytes differs: rank 0 has 5368709120, rank 1 has 5368709121",
       [](Agreement& a) { a.direct_threshold_bytes = (std::uint64_t{5} << 30) + 1; }},
      {"split_min_region_bytes differs: rank 0 has 67108864, rank 1 has 6442450944",
       [](Agreement& a) { a.split_min_region_bytes = std::uint64_t{6} << 30; }},
      {"tensor count differs: rank 0 has 3, rank 1 has 4", [](Agreement& a) { a.num_tensors = 4; }},
      {"total bytes differs: rank 0 has 4096, rank 1 has 4097",
       [](Agreement& a) { a.total_bytes = 4097; }},
      {"metadata (names, dtypes, shapes) differs: rank 0 digest 0x1234, rank 1 digest 0x1235",
       [](Agreement& a) { a.metadata_digest = 0x1235; }},
      {"shard specs differ", [](Agreement& a) { a.pieces_digest = 0x99; }},
      {"rank 1 runs a sharded transfer (M=2); this rank an unsharded one",
       [](Agreement& a) { a.trainers = 2; }},
  };
  // One case per compared field: a field added to Agreement needs a case here too.
  std::size_t fields = 0;
  detail::visit_agreement(Agreement{}, Agreement{},
                          [&](const char*, const auto&, const auto&, detail::Shown) { ++fields; });
  CHECK(cases.size() == fields);
  const Agreement a = base_agreement();
  for (const auto& c : cases) {
    Agreement b = a;
    c.change(b);
    int first_bad = -2;
    const std::string d = differences(a, b, first_bad);
    INFO(c.want << " -> '" << d << "'");
    CHECK(d.find(c.want) != std::string::npos);
    CHECK(first_bad == 1);
  }
  int first_bad = -2;
  CHECK(differences(a, a, first_bad).empty());
  CHECK(first_bad == -1);
  // B is not compared when one side does not pack (vLLM ignores it there), packed is.
  Agreement b = a;
  b.packed = 0;
  b.buffer_size_bytes = 8;
  const std::string d = differences(a, b, first_bad);
  CHECK(d.find("packed differs") != std::string::npos);
  CHECK(d.find("packed_buffer_size_bytes") == std::string::npos);
}

TEST_CASE("wire: roles, sharding and a peer of another protocol version", "[unit][wire]") {
  const Agreement a = base_agreement();
  int first_bad = -2;
  SECTION("a consumer where the producer should be") {
    auto all = frames(a, a);
    all[0].head.role = static_cast<std::uint8_t>(Role::consumer);
    const std::string d = detail::handshake_differences(all, 0, a, first_bad);
    CHECK(d.find("rank 0 runs as consumer but the root is rank 0") != std::string::npos);
    CHECK(first_bad == 0);
  }
  SECTION("sharded: ranks 0..M-1 are the trainers, the message says sharded") {
    Agreement s = a;
    s.trainers = 2;
    auto all = frames(s, s);
    all[1].head.role = static_cast<std::uint8_t>(Role::producer);
    all.emplace_back(FrameKind::handshake, Role::consumer, 2);
    all[2].handshake.agreed = s;
    all[2].handshake.agreed.split_min_region_bytes = 1;  // protocol 3 did not compare it sharded
    const std::string d = detail::handshake_differences(all, 0, s, first_bad);
    CHECK(d.rfind("(sharded) ", 0) == 0);
    CHECK(d.find("split_min_region_bytes differs: rank 0 has 67108864, rank 2 has 1") !=
          std::string::npos);
    CHECK(first_bad == 2);
    all[1].head.role = static_cast<std::uint8_t>(Role::consumer);
    CHECK(detail::handshake_differences(all, 0, s, first_bad).find(
              "rank 1 runs as consumer but ranks 0..1 are the trainers") != std::string::npos);
    // An unsharded rank among sharded ones, and a trainer count that differs.
    all[2].handshake.agreed = a;
    CHECK(detail::handshake_differences(all, 0, s, first_bad).find(
              "rank 2 runs an unsharded transfer; this rank a sharded one (M=2)") !=
          std::string::npos);
    all[2].handshake.agreed.trainers = 3;
    CHECK(detail::handshake_differences(all, 0, s, first_bad).find(
              "trainer count differs: rank 2 has M=3, this rank M=2") != std::string::npos);
  }
  SECTION("another protocol version: named, and its body is not read") {
    auto all = frames(a, a);
    all[1].head.version = 3;
    for (auto& b : all[1].raw) b = std::byte{0xee};
    const std::string d = detail::handshake_differences(all, 0, a, first_bad);
    CHECK(d == "protocol version differs: rank 1 speaks 3, this rank " +
                   std::to_string(detail::kProtocolVersion));
    CHECK(first_bad == 1);
  }
}

namespace {

// Two ranks: rank 0 sends one 4 KiB tensor; `tweak` changes rank 1's options. Returns each rank's
// outcome; when `refused`, the consumer must load nothing, else it checks the bytes.
std::vector<ws_test::Result> whole_pair(const std::function<void(TransferOptions&)>& tweak,
                                        bool refused) {
  ws_test::Processes procs;
  const int port = ws_test::free_port();
  procs.spawn_ranks(2, [&](int rank) {
    auto comm = ws_test::connect_host(port, rank, 2, 15s, 5s);
    const std::vector<TensorMeta> metas = {{"w", DType::float32, {1024}}};
    std::vector<float> data(1024, 1.5f);
    TransferOptions opt;
    opt.direct_threshold_bytes = std::size_t{5} << 30;
    if (rank == 1) tweak(opt);
    if (rank == 0) {
      std::vector<SourceTensorRef> items = {{&metas[0], data.data()}};
      packed_broadcast_producer(metas, items, comm, 0, opt);
    } else {
      packed_broadcast_consumer(
          metas, comm, 0,
          [&](std::span<const TensorView> views, HostStream) {
            if (refused) throw std::runtime_error("loaded after a refused handshake");
            for (const auto& v : views)
              if (v.nbytes != 4096 || std::memcmp(v.data, data.data(), v.nbytes) != 0)
                throw std::runtime_error("wrong bytes");
          },
          opt);
    }
  });
  return procs.wait_all(20s);
}

}  // namespace

TEST_CASE("wire: direct thresholds above 4 GiB that differ are refused on every rank",
          "[unit][wire][handshake]") {
  const auto res = whole_pair(
      [](TransferOptions& o) { o.direct_threshold_bytes = (std::size_t{5} << 30) + 1; }, true);
  for (const auto& r : res) {
    INFO(ws_test::outcome_name(r.outcome) << ": " << r.message);
    CHECK(r.outcome == ws_test::Outcome::protocol);
    CHECK(r.message.find("direct_threshold_bytes differs: rank 0 has 5368709120, rank 1 has "
                         "5368709121") != std::string::npos);
  }
  // The same thresholds agree (the refusal above is the difference, not the width).
  ws_test::expect_all_ok(whole_pair([](TransferOptions&) {}, false));
}

TEST_CASE("wire: a sharded transfer compares the direct and split thresholds too",
          "[unit][wire][sharded][handshake]") {
  // 0: direct threshold; 1: split threshold
  const int kind = GENERATE(0, 1);
  ws_test::Processes procs;
  const int port = ws_test::free_port();
  constexpr int m = 2, world = 3;
  procs.spawn_ranks(world, [=](int rank) {
    auto comm = ws_test::connect_host(port, rank, world, 15s, 5s);
    ws_test::ShardedModel model(m, rank, 3, 0);
    TransferOptions opt;
    opt.buffer_size_bytes = 64;
    if (rank == 2) {
      if (kind == 0) opt.direct_threshold_bytes = 1;
      if (kind == 1) opt.split_min_region_bytes = 1;
    }
    if (rank < m) {
      sharded_broadcast_producer(model.metas, model.specs, model.items(), comm, m, opt);
    } else {
      sharded_broadcast_consumer(
          model.metas, model.specs, comm, m,
          [](std::span<const TensorView>, HostStream) {
            throw std::runtime_error("loaded after a refused handshake");
          },
          opt);
    }
  });
  const char* want[] = {"direct_threshold_bytes differs: rank 0 has 0, rank 2 has 1",
                        "split_min_region_bytes differs: rank 0 has 67108864, rank 2 has 1"};
  for (const auto& r : procs.wait_all(20s)) {
    INFO(ws_test::outcome_name(r.outcome) << ": " << r.message);
    CHECK(r.outcome == ws_test::Outcome::protocol);
    CHECK(r.message.find(want[kind]) != std::string::npos);
    CHECK(r.message.find("(sharded)") != std::string::npos);
  }
}

}  // namespace ws_test_wire_test
