// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// packed_broadcast_producer / packed_broadcast_consumer over the host transport, across real
// processes: round trips, random layouts, faults, handshake mismatches, ring reuse.
#include <cstdint>
#include <weightsync/host/communicator.hpp>
#include <weightsync/packed_broadcast.hpp>

#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "support/catch.hpp"
#include "support/host_world.hpp"
#include "support/outcomes.hpp"
#include "support/process.hpp"

// (a namespace per test source: the sources build as unity translation units)
namespace ws_test_pipeline_test {

using namespace weightsync;
using namespace std::chrono_literals;
using ws_test::Outcome;

namespace {

HostCommunicator connect(int port, int rank, int world,
                         std::chrono::milliseconds op_timeout = 5000ms) {
  return ws_test::connect_host(port, rank, world, 10000ms, op_timeout);
}

// Deterministic contents of tensor i in round r.
void fill(std::vector<std::byte>& v, std::uint64_t seed, std::size_t i, int round) {
  std::mt19937_64 rng(seed * 1000003 + i * 7919 + static_cast<std::uint64_t>(round));
  for (auto& b : v) b = static_cast<std::byte>(rng());
}

struct Model {
  std::vector<TensorMeta> metas;
  std::vector<std::vector<std::byte>> data;

  Model(std::vector<TensorMeta> m, std::uint64_t seed, int round) : metas(std::move(m)) {
    for (std::size_t i = 0; i < metas.size(); ++i) {
      data.emplace_back(metas[i].nbytes());
      fill(data.back(), seed, i, round);
    }
  }
  std::vector<SourceTensorRef> items() const {
    std::vector<SourceTensorRef> v;
    for (std::size_t i = 0; i < metas.size(); ++i) v.push_back({&metas[i], data[i].data()});
    return v;
  }
};

// A consumer-side copy of the model: poisoned before every round, checked bit-exactly after.
struct Received {
  std::vector<std::vector<std::byte>> data;
  std::vector<int> loads;  // how many times each tensor arrived

  explicit Received(const std::vector<TensorMeta>& metas) {
    for (const auto& m : metas) data.emplace_back(m.nbytes());
    loads.assign(metas.size(), 0);
  }
  void poison() {
    for (auto& d : data)
      if (!d.empty()) std::memset(d.data(), 0xCD, d.size());  // (memset(nullptr, .., 0) is UB)
    std::fill(loads.begin(), loads.end(), 0);
  }
  std::size_t index_of(const std::vector<TensorMeta>& metas, const TensorMeta* m) const {
    return static_cast<std::size_t>(m - metas.data());
  }
  void check(const Model& want, bool every_tensor_loaded_once) const {
    for (std::size_t i = 0; i < data.size(); ++i) {
      if (data[i] != want.data[i])
        throw std::runtime_error("tensor " + std::to_string(i) + " ('" + want.metas[i].name +
                                 "') differs from what the producer sent");
      if (every_tensor_loaded_once && loads[i] != 1)
        throw std::runtime_error("tensor " + std::to_string(i) + " was loaded " +
                                 std::to_string(loads[i]) + " times");
    }
  }
};

std::vector<TensorMeta> mixed_layout() {
  return {
      {"embed", DType::bfloat16, {64, 32}},     // 4096
      {"scalar", DType::float32, {}},           // 4 (0-dim)
      {"empty", DType::bfloat16, {0, 16}},      // 0 (zero-size)
      {"q", DType::float16, {16, 16}},          // 512
      {"bias", DType::float64, {3}},            // 24
      {"mask", DType::bool_, {7}},              // 7 (odd size)
      {"idx", DType::int64, {5}},               // 40
      {"f8", DType::float8_e4m3fn, {33}},       // 33
      {"f8b", DType::float8_e5m2, {2, 3}},      // 6
      {"i8", DType::int8, {9}},                 // 9
      {"u8", DType::uint8, {1}},                // 1
      {"i16", DType::int16, {4}},               // 8
      {"i32", DType::int32, {4, 1}},            // 16
      {"empty2", DType::float32, {0}},          // 0
      {"lm_head", DType::bfloat16, {128, 32}},  // 8192
  };
}

std::vector<TensorMeta> random_layout(std::mt19937_64& rng) {
  std::vector<TensorMeta> m;
  const std::size_t n = rng() % 30;
  const auto dts = all_dtypes();
  for (std::size_t i = 0; i < n; ++i) {
    TensorMeta t;
    t.name = "t" + std::to_string(i);
    t.dtype = dts[rng() % dts.size()];
    const std::size_t nd = rng() % 4;
    for (std::size_t d = 0; d < nd; ++d)
      t.shape.push_back(static_cast<std::int64_t>(rng() % (rng() % 5 == 0 ? 1 : 40)));
    m.push_back(std::move(t));
  }
  return m;
}

// One consumer round: poison, receive (views copied out by load_weights, or destinations for
// every `dest_every`-th tensor), check.
TransferStats consume_round(HostCommunicator& comm, const std::vector<TensorMeta>& metas,
                            const TransferOptions& base, workspace_for<HostCommunicator>& ws,
                            std::uint64_t seed, int round, int dest_every) {
  Received got(metas);
  got.poison();
  TransferOptions opt = base;
  if (dest_every > 0)
    opt.destination = [&](const TensorMeta& m) -> void* {
      const auto i = got.index_of(metas, &m);
      // nullptr asks for a view; so does an empty vector's data(), which may be null.
      if (i % static_cast<std::size_t>(dest_every) != 0 || got.data[i].empty()) return nullptr;
      got.loads[i]++;
      return got.data[i].data();
    };
  auto stats = packed_broadcast_consumer(
      metas, comm, 0,
      [&](std::span<const TensorView> batch, HostStream) {
        for (const auto& v : batch) {
          const auto i = got.index_of(metas, v.meta);
          if (v.nbytes != metas[i].nbytes()) throw std::runtime_error("view of the wrong size");
          if (v.nbytes) std::memcpy(got.data[i].data(), v.data, v.nbytes);
          got.loads[i]++;
        }
      },
      opt, ws);
  got.check(Model(metas, seed, round), true);
  return stats;
}

// One round on every rank: rank 0 sends the model of (seed, round); the others receive it and
// check it.
void one_round(int rank, HostCommunicator& comm, const std::vector<TensorMeta>& metas,
               const TransferOptions& opt, workspace_for<HostCommunicator>& ws, std::uint64_t seed,
               int round, int dest_every = 0) {
  if (rank == 0) {
    Model m(metas, seed, round);
    packed_broadcast_producer(metas, m.items(), comm, 0, opt, ws);
  } else {
    consume_round(comm, metas, opt, ws, seed, round, dest_every);
  }
}

// A consumer whose load_weights throws "disk full" on its `fail_at`-th call: returns what the
// consumer threw; `calls` gets the number of load_weights calls.
std::string consume_failing(HostCommunicator& comm, const std::vector<TensorMeta>& metas,
                            const TransferOptions& opt, workspace_for<HostCommunicator>& ws,
                            int fail_at, int& calls) {
  calls = 0;
  try {
    packed_broadcast_consumer(
        metas, comm, 0,
        [&](std::span<const TensorView>, HostStream) {
          if (++calls == fail_at) throw std::runtime_error("disk full");
        },
        opt, ws);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

// A transfer the handshake must refuse: rank 0 offers `sent`, the consumers expect `expected`;
// no consumer may write a destination or load anything. A consumer may ask where its tensors go
// before the handshake (TransferOptions::destination: asking writes nothing): every tensor's
// destination is a poisoned place of its own, checked afterwards. Returns what the E thrown said.
template <class E>
std::string refused_round(int rank, HostCommunicator& comm, const std::vector<TensorMeta>& sent,
                          const std::vector<TensorMeta>& expected, TransferOptions opt,
                          workspace_for<HostCommunicator>& ws, std::uint64_t seed) {
  std::vector<std::vector<std::byte>> places;
  for (const auto& m : expected) places.emplace_back(m.nbytes(), std::byte{0xcd});
  std::string what;
  try {
    if (rank == 0) {
      Model m(sent, seed, 0);
      packed_broadcast_producer(sent, m.items(), comm, 0, opt, ws);
    } else {
      opt.destination = [&](const TensorMeta& m) -> void* {
        return places[static_cast<std::size_t>(&m - expected.data())].data();
      };
      packed_broadcast_consumer(
          expected, comm, 0,
          [](std::span<const TensorView>, HostStream) {
            throw std::runtime_error("loaded after a refused handshake");
          },
          opt, ws);
    }
  } catch (const E& e) {
    what = e.what();
  }
  for (const auto& p : places)
    for (const std::byte b : p)
      if (b != std::byte{0xcd})
        throw std::runtime_error("a destination was written after a refused handshake");
  return what;
}

struct Config {
  bool packed;
  int k;
  std::size_t b;
  int dest_every;
  std::size_t direct = 0;
  std::size_t split = std::size_t{64} << 20;
};

std::vector<Config> configs() {
  std::vector<Config> out;
  for (bool packed : {true, false})
    for (int k : {1, 2, 3})
      for (std::size_t b :
           {std::size_t{1}, std::size_t{100}, std::size_t{4096}, std::size_t{1} << 30})
        for (int dest_every : {0, 2}) {
          if (!packed && b != 1) continue;  // B does not matter unpacked
          out.push_back({packed, k, b, dest_every});
          if (packed && b >= 4096) {
            out.push_back({packed, k, b, dest_every, 30});     // direct >= 30 B
            out.push_back({packed, k, b, dest_every, 30, 1});  // ... and split launches
          }
        }
  return out;
}

}  // namespace

TEST_CASE(
    "pipeline: round trips with 1, 2 and 4 consumers, packed and unpacked, K=1..3, B=1..>model",
    "[unit][pipeline]") {
  const int world = GENERATE(2, 3, 5);
  ws_test::Processes procs;
  const int port = ws_test::free_port();
  const auto metas = mixed_layout();
  procs.spawn_ranks(world, [=](int rank) {
    auto comm = connect(port, rank, world);
    workspace_for<HostCommunicator> ws;
    int round = 0;
    for (const auto& c : configs()) {
      TransferOptions opt;
      opt.packed = c.packed;
      opt.num_buffers = c.k;
      opt.buffer_size_bytes = c.b;
      opt.direct_threshold_bytes = c.direct;
      opt.split_min_region_bytes = c.split;
      ++round;
      if (rank == 0) {
        Model m(metas, 1, round);
        auto st = packed_broadcast_producer(metas, m.items(), comm, 0, opt, ws);
        if (st.bytes != 4096 + 4 + 512 + 24 + 7 + 40 + 33 + 6 + 9 + 1 + 8 + 16 + 8192)
          throw std::runtime_error("producer counted the wrong byte total");
      } else {
        consume_round(comm, metas, opt, ws, 1, round, c.dest_every);
      }
    }
  });
  ws_test::expect_all_ok(procs.wait_all(60s));
}

TEST_CASE("pipeline property: random layouts, options and destinations", "[unit][pipeline]") {
  ws_test::Processes procs;
  const int port = ws_test::free_port();
  constexpr int world = 3;
  constexpr int layouts = 150;
  procs.spawn_ranks(world, [=](int rank) {
    auto comm = connect(port, rank, world);
    std::mt19937_64 rng(777);  // same sequence on every rank
    for (int round = 0; round < layouts; ++round) {
      const auto metas = random_layout(rng);
      TransferOptions opt;
      opt.packed = rng() % 4 != 0;
      opt.num_buffers = 1 + static_cast<int>(rng() % 3);
      opt.buffer_size_bytes = 1 + rng() % 2000;
      if (rng() % 3 == 0) opt.direct_threshold_bytes = 1 + rng() % 200;
      if (rng() % 2 == 0) opt.split_min_region_bytes = 1 + rng() % 100;
      const int dest_every = static_cast<int>(rng() % 3);
      workspace_for<HostCommunicator> ws;  // also exercises fresh rings
      one_round(rank, comm, metas, opt, ws, 2, round, dest_every);
    }
  });
  ws_test::expect_all_ok(procs.wait_all(60s));
}

TEST_CASE("pipeline: an item that does not match its metadata fails every rank cleanly",
          "[unit][pipeline]") {
  // kind 0: wrong dtype; 1: wrong shape; 2: wrong name; 3: too few items; 4: too many items
  const int kind = GENERATE(0, 1, 2, 3, 4);
  ws_test::Processes procs;
  const int port = ws_test::free_port();
  constexpr int world = 3;
  const auto metas = mixed_layout();
  procs.spawn_ranks(world, [=](int rank) {
    auto comm = connect(port, rank, world);
    workspace_for<HostCommunicator> ws;
    TransferOptions opt;
    opt.buffer_size_bytes = 600;  // several chunks
    // Same-call reports everywhere (an extra item is only found after the last chunk).
    opt.acknowledge = Acknowledge::each_transfer;
    std::string failure;
    if (rank == 0) {
      Model m(metas, 3, 0);
      auto items = m.items();
      std::vector<TensorMeta> lie = metas;
      if (kind == 0) lie[6].dtype = DType::int32;
      if (kind == 1) lie[6].shape = {4, 10};
      if (kind == 2) lie[6].name = "idx_renamed";
      if (kind <= 2) items[6].meta_ = &lie[6];
      if (kind == 3) items.resize(9);
      if (kind == 4) items.push_back(items[0]);
      try {
        packed_broadcast_producer(metas, items, comm, 0, opt, ws);
      } catch (const config_error& e) {
        failure = e.what();
      }
      if (failure.empty()) throw std::runtime_error("the producer did not fail");
    } else {
      try {
        consume_round(comm, metas, opt, ws, 3, 0, 0);
      } catch (const remote_error& e) {
        failure = e.what();
      }
      if (failure.find("the producer (rank 0) failed") == std::string::npos)
        throw std::runtime_error("consumer did not report the producer's failure: " + failure);
    }
    const char* want[] = {"dtype int32 where int64 was declared", "shape (4, 10) where (5,)",
                          "name 'idx_renamed' where 'idx'", "ended after 9 tensors",
                          "yields more than the 15"};
    if (failure.find(want[kind]) == std::string::npos)
      throw std::runtime_error("message does not say what was wrong: " + failure);
    // The communicator is still healthy: a good round follows.
    one_round(rank, comm, metas, opt, ws, 3, 1);
  });
  ws_test::expect_all_ok(procs.wait_all(30s));
}

// The consumer asks where its tensors go before the handshake, while it waits for the producer
// (TransferOptions::destination allows it): once per tensor in a transfer that goes through, as
// many times in one the handshake refuses (and nothing is written), and a destination that
// throws fails that consumer's transfer after the handshake, with its own error, and the
// producer's with an error of ours, within the deadline.
TEST_CASE("pipeline: destinations are asked once, before the handshake, and a throw fails after it",
          "[unit][pipeline][handshake]") {
  ws_test::Processes procs;
  const int port = ws_test::free_port();
  const auto metas = mixed_layout();
  procs.spawn_ranks(2, [=](int rank) {
    auto comm = connect(port, rank, 2, 3000ms);
    workspace_for<HostCommunicator> ws;
    TransferOptions opt;
    opt.buffer_size_bytes = 600;
    opt.timeout = 10s;
    auto changed = metas;
    changed[3].shape = {16, 17};
    const std::vector<TensorMeta>& mine = rank == 0 ? metas : changed;
    std::vector<std::vector<std::byte>> places;
    for (const auto& m : changed) places.emplace_back(m.nbytes(), std::byte{0xcd});
    std::size_t asked = 0;
    // 1. Refused: asked once per tensor (before the handshake), nothing written.
    try {
      if (rank == 0) {
        Model m(metas, 3, 0);
        packed_broadcast_producer(metas, m.items(), comm, 0, opt, ws);
      } else {
        TransferOptions o = opt;
        o.destination = [&](const TensorMeta& m) -> void* {
          ++asked;
          return places[static_cast<std::size_t>(&m - mine.data())].data();
        };
        packed_broadcast_consumer(
            mine, comm, 0, [](std::span<const TensorView>, HostStream) {}, o, ws);
      }
      throw std::runtime_error("the changed shape was not refused");
    } catch (const protocol_error&) {
    }
    if (rank == 1 && asked != changed.size())
      throw std::runtime_error("asked " + std::to_string(asked) + " times, want " +
                               std::to_string(changed.size()));
    for (const auto& p : places)
      for (const std::byte b : p)
        if (b != std::byte{0xcd}) throw std::runtime_error("a refused transfer wrote a place");
    // 2. Accepted: each tensor asked once (consume_round counts every ask as a load).
    one_round(rank, comm, metas, opt, ws, 3, 1, 1);
    // 3. A destination that throws: that consumer's own error, after the handshake; the
    // producer fails too, within the deadline.
    std::string what;
    opt.acknowledge = Acknowledge::each_transfer;  // (the producer learns it in the same call)
    try {
      if (rank == 0) {
        Model m(metas, 3, 2);
        packed_broadcast_producer(metas, m.items(), comm, 0, opt, ws);
      } else {
        TransferOptions o = opt;
        o.destination = [&](const TensorMeta& m) -> void* {
          if (m.name == metas[2].name) throw std::runtime_error("no place for " + m.name);
          return nullptr;
        };
        packed_broadcast_consumer(
            metas, comm, 0, [](std::span<const TensorView>, HostStream) {}, o, ws);
      }
    } catch (const std::exception& e) {
      what = e.what();
    }
    if (rank == 1 && what != "no place for " + metas[2].name)
      throw std::runtime_error("consumer got: '" + what + "'");
    if (rank == 0 && what.find("weightsync") == std::string::npos)
      throw std::runtime_error("producer got: '" + what + "'");
  });
  ws_test::expect_all_ok(procs.wait_all(30s));
}

TEST_CASE("pipeline: a load_weights that throws ends that consumer and fails the producer",
          "[unit][pipeline]") {
  ws_test::Processes procs;
  const int port = ws_test::free_port();
  constexpr int world = 3;
  const auto metas = mixed_layout();
  procs.spawn_ranks(world, [=](int rank) {
    auto comm = connect(port, rank, world);
    workspace_for<HostCommunicator> ws;
    TransferOptions opt;
    opt.buffer_size_bytes = 600;
    opt.acknowledge = Acknowledge::each_transfer;  // the producer learns it in the same call
    std::string failure;
    if (rank == 0) {
      Model m(metas, 4, 0);
      try {
        packed_broadcast_producer(metas, m.items(), comm, 0, opt, ws);
      } catch (const remote_error& e) {
        failure = e.what();
        if (e.peer() != 1) throw std::runtime_error("wrong peer in the remote error");
      }
      if (failure.find("rank 1 failed to receive the weights: load_weights failed on chunk 2: "
                       "disk full") == std::string::npos)
        throw std::runtime_error("producer message: " + failure);
    } else if (rank == 1) {
      int calls = 0;
      failure = consume_failing(comm, metas, opt, ws, 3, calls);
      if (failure != "disk full") throw std::runtime_error("consumer 1 got: " + failure);
      if (calls != 3) throw std::runtime_error("load_weights was called after it failed");
    } else {
      consume_round(comm, metas, opt, ws, 4, 0, 0);  // the other consumer is unaffected
    }
    // The next round works on the same communicator.
    one_round(rank, comm, metas, opt, ws, 4, 1);
  });
  ws_test::expect_all_ok(procs.wait_all(30s));
}

TEST_CASE(
    "pipeline: with the acknowledgement in the next transfer, a consumer's failure fails "
    "the next transfer on every rank before any byte moves",
    "[unit][pipeline]") {
  ws_test::Processes procs;
  const int port = ws_test::free_port();
  constexpr int world = 3;
  const auto metas = mixed_layout();
  procs.spawn_ranks(world, [=](int rank) {
    auto comm = connect(port, rank, world);
    workspace_for<HostCommunicator> ws;
    TransferOptions opt;  // Acknowledge::next_transfer, the default
    opt.buffer_size_bytes = 600;
    // 1. Consumer 1's load_weights throws: only consumer 1 knows; the others return.
    if (rank == 0) {
      Model m(metas, 4, 0);
      packed_broadcast_producer(metas, m.items(), comm, 0, opt, ws);
    } else if (rank == 1) {
      int calls = 0;
      const std::string failure = consume_failing(comm, metas, opt, ws, 2, calls);
      if (failure != "disk full") throw std::runtime_error("consumer 1 got: " + failure);
    } else {
      consume_round(comm, metas, opt, ws, 4, 0, 0);
    }
    // 2. The next transfer is refused on every rank with a remote_error naming rank 1, and moves
    // nothing: no load, no destination asked for.
    const std::string refused = refused_round<remote_error>(rank, comm, metas, metas, opt, ws, 4);
    if (refused.find("rank 1 failed an earlier transfer: load_weights failed on chunk ") ==
            std::string::npos ||
        refused.find("disk full") == std::string::npos)
      throw std::runtime_error("rank " + std::to_string(rank) + " got: '" + refused + "'");
    // 3. Reported once: the transfer after that works.
    one_round(rank, comm, metas, opt, ws, 4, 2);
    // 4. A producer's own failure seen only after the data (one item too many) is its caller's:
    // the consumers got every declared tensor, and the next transfer is not refused.
    if (rank == 0) {
      Model m(metas, 4, 3);
      auto items = m.items();
      items.push_back(items[0]);
      bool threw = false;
      try {
        packed_broadcast_producer(metas, items, comm, 0, opt, ws);
      } catch (const config_error& e) {
        threw = std::string(e.what()).find("yields more than") != std::string::npos;
      }
      if (!threw) throw std::runtime_error("the producer did not report the extra item");
    } else {
      consume_round(comm, metas, opt, ws, 4, 3, 0);
    }
    one_round(rank, comm, metas, opt, ws, 4, 4);
  });
  ws_test::expect_all_ok(procs.wait_all(30s));
}

TEST_CASE(
    "pipeline steady state: a change between transfers is refused on every rank before any "
    "weight is loaded, and the group stays usable",
    "[unit][pipeline][handshake]") {
  // 0: a shape; 1: a name; 2: B; 3: K; 4: acknowledge
  const int kind = GENERATE(0, 1, 2, 3, 4);
  ws_test::Processes procs;
  const int port = ws_test::free_port();
  constexpr int world = 3;
  procs.spawn_ranks(world, [=](int rank) {
    auto comm = connect(port, rank, world, 3000ms);
    workspace_for<HostCommunicator> ws;
    const auto metas = mixed_layout();
    TransferOptions opt;
    opt.buffer_size_bytes = 1000;
    for (int round = 0; round < 3; ++round) one_round(rank, comm, metas, opt, ws, 8, round, 2);
    // One consumer's view changes; everyone else repeats the transfer of the rounds before.
    auto changed = metas;
    TransferOptions o = opt;
    if (rank == 2) {
      if (kind == 0) changed[3].shape = {16, 17};
      if (kind == 1) changed[0].name = "embed_tokens";
      if (kind == 2) o.buffer_size_bytes = 8;
      if (kind == 3) o.num_buffers = 3;
      if (kind == 4) o.acknowledge = Acknowledge::each_transfer;
    }
    const std::string refused = refused_round<protocol_error>(rank, comm, metas, changed, o, ws, 8);
    const char* want[] = {
        "total bytes differs", "metadata (names, dtypes, shapes) differs",
        "packed_buffer_size_bytes differs", "packed_num_buffers differs",
        "acknowledge differs: rank 0 has next_transfer, rank 2 has each_transfer"};
    if (refused.find(want[kind]) == std::string::npos)
      throw std::runtime_error("rank " + std::to_string(rank) + " got: '" + refused + "'");
    // The group is still usable, and the steady state resumes.
    for (int round = 4; round < 6; ++round) one_round(rank, comm, metas, opt, ws, 8, round, 2);
  });
  ws_test::expect_all_ok(procs.wait_all(30s));
}

TEST_CASE("pipeline handshake: a mismatch of B, K, packed or metadata fails every rank",
          "[unit][pipeline][handshake]") {
  // 0: B differs; 1: K differs; 2: a shape differs; 3: packed differs; 4: a name differs
  const int kind = GENERATE(0, 1, 2, 3, 4);
  ws_test::Processes procs;
  const int port = ws_test::free_port();
  constexpr int world = 3;
  procs.spawn_ranks(world, [=](int rank) {
    auto comm = connect(port, rank, world, 3000ms);
    auto metas = mixed_layout();
    TransferOptions opt;
    opt.buffer_size_bytes = 1000;
    if (rank == 2) {
      if (kind == 0) opt.buffer_size_bytes = 8;
      if (kind == 1) opt.num_buffers = 3;
      if (kind == 2) metas[3].shape = {16, 17};
      if (kind == 3) opt.packed = false;
      if (kind == 4) metas[0].name = "embed_tokens";
    }
    Model m(metas, 5, 0);
    Received got(metas);
    if (rank == 0)
      packed_broadcast_producer(metas, m.items(), comm, 0, opt);
    else
      packed_broadcast_consumer(
          metas, comm, 0,
          [](std::span<const TensorView>, HostStream) {
            throw std::runtime_error("nothing may be loaded after a failed handshake");
          },
          opt);
  });
  const char* want[] = {"packed_buffer_size_bytes differs: rank 0 has 1000, rank 2 has 8",
                        "packed_num_buffers differs: rank 0 has 2, rank 2 has 3",
                        "total bytes differs", "packed differs: rank 0 has true, rank 2 has false",
                        "metadata (names, dtypes, shapes) differs"};
  for (const auto& r : procs.wait_all(15s)) {
    INFO(ws_test::outcome_name(r.outcome) << ": " << r.message);
    CHECK(r.outcome == Outcome::protocol);
    CHECK(r.message.find(want[kind]) != std::string::npos);
    CHECK(r.seconds < 5.0);
  }
}

TEST_CASE("pipeline: the ring is allocated once and reused for 100 rounds", "[unit][pipeline]") {
  ws_test::Processes procs;
  const int port = ws_test::free_port();
  constexpr int world = 3;
  const auto metas = mixed_layout();
  procs.spawn_ranks(world, [=](int rank) {
    auto comm = connect(port, rank, world);
    workspace_for<HostCommunicator> ws;
    TransferOptions opt;
    opt.buffer_size_bytes = 700;
    opt.num_buffers = 3;
    Model m(metas, 6, 0);
    auto items = m.items();
    Received got(metas);
    auto load = [&](std::span<const TensorView> batch, HostStream) {
      for (const auto& v : batch)
        if (v.nbytes) std::memcpy(got.data[got.index_of(metas, v.meta)].data(), v.data, v.nbytes);
    };
    std::size_t after_first = 0;
    for (int round = 0; round < 100; ++round) {
      TransferStats st;
      if (rank == 0) {
        st = packed_broadcast_producer(metas, items, comm, 0, opt, ws);
      } else {
        got.poison();
        st = packed_broadcast_consumer(metas, comm, 0, load, opt, ws);
        got.check(m, false);
      }
      if (round == 0) after_first = HostPolicy::allocations();
      if (round > 0 && !st.reused_ring) throw std::runtime_error("ring not reused");
    }
    if (HostPolicy::allocations() != after_first)
      throw std::runtime_error(std::to_string(HostPolicy::allocations() - after_first) +
                               " allocations after the first round");
    if (ws.num_slots() != 3) throw std::runtime_error("wrong slot count");
  });
  ws_test::expect_all_ok(procs.wait_all(60s));
}

TEST_CASE("pipeline: a consumer killed mid-transfer fails the others within the deadline",
          "[unit][pipeline]") {
  ws_test::Processes procs;
  const int port = ws_test::free_port();
  constexpr int world = 3;
  // 2 x 32 MiB, or 2 x 1 MiB with WEIGHTSYNC_TEST_SMALL=1 (scripts/sanitize.sh tsan sets it):
  // under TSan, making the 64 MiB model alone took longer than the deadlines below.
  const std::int64_t numel = ws_test::small_models() ? (256 << 10) : (8 << 20);
  const std::vector<TensorMeta> metas = {{"big", DType::float32, {numel}},
                                         {"big2", DType::float32, {numel}}};
  procs.spawn_ranks(world, [=](int rank) {
    auto comm = connect(port, rank, world, 2000ms);
    workspace_for<HostCommunicator> ws;
    Model m(metas, 7, 0);
    for (int round = 0; round < 100000; ++round) {
      if (rank == 0)
        packed_broadcast_producer(metas, m.items(), comm, 0, {}, ws);
      else
        packed_broadcast_consumer(
            metas, comm, 0, [](std::span<const TensorView>, HostStream) {}, {}, ws);
    }
  });
  std::this_thread::sleep_for(800ms);
  procs.kill(2);
  ws_test::expect_survivors_failed(procs.wait_all(10s), 2, 0.8 + 2.0 + 2.0);
}

TEST_CASE("pipeline: contiguous sources and destinations skip packing and unpacking",
          "[unit][pipeline]") {
  ws_test::Processes procs;
  const int port = ws_test::free_port();
  const auto metas = mixed_layout();
  procs.spawn_ranks(2, [=](int rank) {
    auto comm = connect(port, rank, 2);
    workspace_for<HostCommunicator> ws;
    Model m(metas, 8, 0);
    // One flat buffer per side, tensors back to back in the declared order.
    std::vector<std::size_t> off;
    std::size_t total = 0;
    for (const auto& t : metas) {
      off.push_back(total);
      total += t.nbytes();
    }
    std::vector<std::byte> flat(total);
    for (std::size_t i = 0; i < metas.size(); ++i)
      if (!m.data[i].empty()) std::memcpy(flat.data() + off[i], m.data[i].data(), m.data[i].size());
    for (std::size_t b : {std::size_t{64}, std::size_t{1} << 20}) {
      TransferOptions opt;
      opt.buffer_size_bytes = b;
      if (rank == 0) {
        std::vector<SourceTensorRef> items;
        for (std::size_t i = 0; i < metas.size(); ++i)
          items.push_back({&metas[i], flat.data() + off[i]});
        const auto before =
            packed_broadcast_producer(metas, items, comm, 0, opt, ws).contiguous_regions;
        if (before == 0) throw std::runtime_error("no region was sent in place");
      } else {
        std::vector<std::byte> got(total, std::byte{0xCD});
        opt.destination = [&](const TensorMeta& t) -> void* {
          return got.data() + off[static_cast<std::size_t>(&t - metas.data())];
        };
        int calls = 0;
        packed_broadcast_consumer(
            metas, comm, 0,
            [&](std::span<const TensorView> v, HostStream) {
              for (const auto& x : v)
                if (x.nbytes) ++calls;
            },
            opt, ws);
        if (calls != 0)
          throw std::runtime_error("a tensor with a destination was handed as a view");
        if (got != flat) throw std::runtime_error("contiguous destinations differ");
      }
    }
  });
  ws_test::expect_all_ok(procs.wait_all(30s));
}

}  // namespace ws_test_pipeline_test
