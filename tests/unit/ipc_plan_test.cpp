// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// The host-side parts of the IPC transports (no GPU needed): the plan's wire format and what it
// refuses, the merging of copies, names and the registry.
#include <weightsync/config.hpp>

#if WEIGHTSYNC_HAS_CUDA
#include <weightsync/engine.hpp>
#include <weightsync/ipc.hpp>
#include <weightsync/ipc/backend.hpp>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "support/catch.hpp"

// (a namespace per test source: the sources build as unity translation units)
namespace ws_test_ipc_plan_test {

using namespace weightsync;
using weightsync::detail::IpcPlan;
using weightsync::detail::IpcWhere;

namespace {

// Decoding `wire` throws protocol_error whose message contains `part`.
void refuses(const std::string& wire, const std::string& part) {
  try {
    (void)IpcPlan::decode(wire);
    FAIL("decoded without error; expected one containing '" << part << "'");
  } catch (const protocol_error& e) {
    INFO(e.what());
    CHECK(std::string(e.what()).find(part) != std::string::npos);
  }
}

IpcPlan sample_plan() {
  IpcPlan p;
  p.same_gpu = 0;
  p.boot_id = "0f3c8a1e-1111-2222-3333-444455556666";
  p.host = "node-7";
  for (int i = 0; i < 16; ++i) p.uuid[static_cast<std::size_t>(i)] = static_cast<char>(0xA0 + i);
  p.pid = 4242;
  p.digest = 0x1234567890abcdefull;
  p.num_tensors = 3;
  p.total_bytes = 3 << 20;
  p.flags = detail::kIpcPlanChecksum | detail::kIpcPlanVote;
  p.regions.push_back({77, std::string(64, 'h'), 64 << 20});
  p.regions.push_back({78, std::string(64, 's'), 4 << 20});
  p.slot_region = 1;
  p.slot_stride = 2 << 20;
  p.num_slots = 2;
  p.num_chunks = 1;
  p.places = {{IpcWhere::region, 0, 4096}, {IpcWhere::empty, 0, 0}, {IpcWhere::staged, 0, 0}};
  return p;
}

}  // namespace

TEST_CASE("ipc plan: encode and decode round trip", "[ipc]") {
  const IpcPlan p = sample_plan();
  const IpcPlan q = IpcPlan::decode(p.encode());
  CHECK(q.same_gpu == p.same_gpu);
  CHECK(q.boot_id == p.boot_id);
  CHECK(q.host == p.host);
  CHECK(q.uuid == p.uuid);
  CHECK(q.pid == p.pid);
  CHECK(q.digest == p.digest);
  CHECK(q.num_tensors == p.num_tensors);
  CHECK(q.total_bytes == p.total_bytes);
  CHECK(q.error.empty());
  CHECK(q.flags == (detail::kIpcPlanChecksum | detail::kIpcPlanVote));  // checksums, the verdict
  REQUIRE(q.regions.size() == 2);
  CHECK(q.regions[1].buffer_id == 78);
  CHECK(q.regions[1].handle == std::string(64, 's'));
  CHECK(q.regions[0].size == (64u << 20));
  CHECK(q.slot_region == 1);
  CHECK(q.slot_stride == (2u << 20));
  CHECK(q.num_slots == 2);
  CHECK(q.num_chunks == 1);
  REQUIRE(q.places.size() == 3);
  CHECK(q.places[0].where == IpcWhere::region);
  CHECK(q.places[0].offset == 4096);
  CHECK(q.places[2].where == IpcWhere::staged);
  // A flag this side does not know announces a step it would not take: refused, named.
  IpcPlan unknown = sample_plan();
  unknown.flags = static_cast<std::uint8_t>(unknown.flags | 0x80);
  try {
    (void)IpcPlan::decode(unknown.encode());
    FAIL("a plan with an unknown flag was accepted");
  } catch (const protocol_error& e) {
    INFO(e.what());
    CHECK(std::string(e.what()).find("unknown flags 0x80") != std::string::npos);
  }
}

TEST_CASE("ipc plan: every truncation, trailing bytes, wrong magic or version is a protocol_error",
          "[ipc]") {
  const std::string wire = sample_plan().encode();
  for (std::size_t n = 0; n < wire.size(); ++n) {
    INFO("truncated to " << n << " of " << wire.size() << " bytes");
    CHECK_THROWS_AS(IpcPlan::decode(std::string_view(wire).substr(0, n)), protocol_error);
  }
  CHECK_THROWS_AS(IpcPlan::decode(wire + "x"), protocol_error);
  std::string bad = wire;
  bad[0] ^= 0x55;
  refuses(bad, "wrong magic");
  bad = wire;
  bad[4] = 99;  // version
  refuses(bad, "protocol version 99");
}

TEST_CASE("ipc plan: counts the message cannot hold are refused before allocating", "[ipc]") {
  IpcPlan p = sample_plan();
  p.regions.clear();
  p.places.clear();
  const std::string wire = p.encode();
  // With no regions and no placements the wire ends with: region count (8), slot_region (8),
  // slot_stride (8), num_slots (4), num_chunks (8), placement count (8). Little-endian.
  const std::size_t slot_at = wire.size() - (8 + 8 + 4 + 8 + 8);
  const std::size_t count_at = slot_at - 8;
  for (std::uint64_t huge : {std::uint64_t{1} << 19, std::uint64_t{1} << 40, ~std::uint64_t{0}}) {
    std::string w = wire;
    std::memcpy(w.data() + count_at, &huge, 8);
    refuses(w, "regions announced");
  }
  std::string w = wire;
  const std::uint64_t many = std::uint64_t{1} << 30;
  std::memcpy(w.data() + wire.size() - 8, &many, 8);
  refuses(w, "placements announced");
}

TEST_CASE("ipc plan: random corruption never crashes the decoder", "[ipc]") {
  const std::string wire = sample_plan().encode();
  std::mt19937_64 rng(7);
  int refused = 0;
  for (int i = 0; i < 5000; ++i) {
    std::string w = wire;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) w[rng() % w.size()] = static_cast<char>(rng());
    try {
      (void)IpcPlan::decode(w);
    } catch (const protocol_error&) {
      ++refused;
    }
  }
  CHECK(refused > 0);  // anything else escaping (or a crash) fails the test
}

TEST_CASE("ipc plan: 'same plan as round N' round trips, is told from a plan, refuses damage",
          "[ipc]") {
  const std::string plan = sample_plan().encode();
  CHECK_FALSE(detail::decode_same_plan(plan).has_value());  // a full plan is not one
  const std::string same = detail::encode_same_plan(7, detail::plan_hash(plan));
  const auto got = detail::decode_same_plan(same);
  REQUIRE(got.has_value());
  CHECK(got->round == 7);
  CHECK(got->hash == detail::plan_hash(plan));
  CHECK(detail::plan_hash(plan) != detail::plan_hash(plan + "x"));
  for (std::size_t n = 4; n < same.size(); ++n)  // magic intact, the rest cut short
    CHECK_THROWS_AS(detail::decode_same_plan(same.substr(0, n)), protocol_error);
  CHECK_THROWS_AS(detail::decode_same_plan(same + "x"), protocol_error);  // trailing bytes
  std::string other_version = same;
  other_version[4] = static_cast<char>(other_version[4] + 1);
  CHECK_THROWS_AS(detail::decode_same_plan(other_version), protocol_error);
}

TEST_CASE("ipc verdict: round trips, and a rank outside the consumers or a short one is refused",
          "[ipc]") {
  using detail::IpcVerdict;
  IpcVerdict v;
  v.first = 2;
  v.text = std::string(5000, 'x');
  const std::string wire = v.encode();
  CHECK(wire.size() == 4 + 4000);  // the text is cut at 4000 bytes
  const IpcVerdict back = IpcVerdict::decode(wire, 3);
  CHECK(back.first == 2);
  CHECK(back.text == std::string(4000, 'x'));
  CHECK(IpcVerdict::decode(IpcVerdict{}.encode(), 3).first == -1);  // no consumer failed
  for (const std::int32_t bad : {0, 3, 7, -2, -1000}) {  // rank 0 is the producer; 3 of 3
    IpcVerdict b;
    b.first = bad;
    INFO("first = " << bad);
    CHECK_THROWS_AS(IpcVerdict::decode(b.encode(), 3), protocol_error);
  }
  CHECK_THROWS_AS(IpcVerdict::decode(std::string(3, '\0'), 3), protocol_error);
}

TEST_CASE("ipc copies: a piece continuing the previous one on both ends is merged", "[ipc]") {
  std::vector<std::byte> a(1000), b(1000);
  std::vector<detail::CopyPiece> v;
  detail::add_piece(v, b.data(), a.data(), 100);
  detail::add_piece(v, b.data() + 100, a.data() + 100, 50);  // continues both: merged
  detail::add_piece(v, b.data() + 150, a.data() + 160, 10);  // source jumps: new piece
  detail::add_piece(v, b.data() + 170, a.data() + 170, 10);  // destination jumps: new piece
  detail::add_piece(v, b.data() + 180, a.data() + 180, 0);   // empty: ignored
  REQUIRE(v.size() == 3);
  CHECK(v[0].bytes == 150);
  CHECK(v[1].bytes == 10);
  CHECK(v[2].src == a.data() + 170);
}

TEST_CASE("ipc names: GPU UUIDs print as nvidia-smi does and the registry has ipc and p2p",
          "[ipc]") {
  std::array<char, 16> u{};
  for (int i = 0; i < 16; ++i) u[static_cast<std::size_t>(i)] = static_cast<char>(i * 17);
  CHECK(detail::ProcessLocation::uuid_string(u) == "GPU-00112233-4455-6677-8899-aabbccddeeff");
  const auto names = BackendRegistry::global().names();
  CHECK(std::count(names.begin(), names.end(), "ipc") == 1);
  CHECK(std::count(names.begin(), names.end(), "p2p") == 1);
  CHECK(BackendRegistry::global().make("ipc")->name() == "ipc");
  CHECK(BackendRegistry::global().make("p2p")->name() == "p2p");
  CHECK(!BackendRegistry::global().make("p2p")->initialized());
}
TEST_CASE("ipc handshake: placement refusals name what differs", "[ipc]") {
  detail::ProcessLocation here;
  here.boot_id = "boot-a";
  here.host = "node-1";
  here.uuid.fill('\x11');
  IpcPlan plan = sample_plan();
  plan.boot_id = here.boot_id;
  plan.host = here.host;
  plan.uuid = here.uuid;
  auto refused = [&](const IpcPlan& p, bool same_gpu, const std::string& part) {
    try {
      detail::check_placement(p, here, same_gpu, 0);
      FAIL("accepted; expected a refusal containing '" << part << "'");
    } catch (const protocol_error& e) {
      INFO(e.what());
      CHECK(std::string(e.what()).find(part) != std::string::npos);
    }
  };
  plan.same_gpu = 1;
  CHECK_NOTHROW(detail::check_placement(plan, here, true, 0));  // colocated: accepted
  refused(plan, false, "the producer uses the ipc backend, this consumer p2p");
  plan.same_gpu = 0;
  refused(plan, true, "the producer uses the p2p backend, this consumer ipc");
  CHECK_NOTHROW(detail::check_placement(plan, here, false, 0));  // p2p on one GPU: accepted
  IpcPlan other = plan;
  other.boot_id = "boot-b";
  refused(other, false, "runs on another node");
  other = plan;
  other.host = "node-2";
  refused(other, false, "CUDA IPC needs one node");
  other = plan;
  other.uuid.fill('\x22');
  refused(other, false, "is not visible to this process");  // no GPU here has that UUID
  other.same_gpu = 1;
  refused(other, true, "the ipc backend needs one GPU");
}
TEST_CASE("ipc and p2p backends refuse init info they cannot use, before touching a GPU", "[ipc]") {
  GroupInfo info;
  info.nccl_unique_id.emplace();
  info.nccl_unique_id->fill(std::byte{7});  // vLLM's mode: no TCP rendezvous to meet at
  info.world_size = 2;
  EngineOptions eo;
  for (const char* name : {"ipc", "p2p"}) {
    auto b = BackendRegistry::global().make(name);
    try {
      b->init(info, 1, eo);
      FAIL(name << " accepted init info without master_address");
    } catch (const config_error& e) {
      CHECK(std::string(e.what()).find(std::string("the ") + name + " backend needs master_address") !=
            std::string::npos);
    }
    GroupInfo tcp;
    tcp.master_address = "127.0.0.1";
    tcp.master_port = 29555;
    tcp.world_size = 2;
    EngineOptions vllm_wire;
    vllm_wire.protocol = Protocol::vllm;
    CHECK_THROWS_AS(b->init(tcp, 1, vllm_wire), config_error);  // vLLM's wire is NCCL's
    CHECK_THROWS_AS(b->init(tcp, 2, eo), config_error);          // rank outside the world
    CHECK(!b->initialized());
  }
}
}  // namespace ws_test_ipc_plan_test

#endif
