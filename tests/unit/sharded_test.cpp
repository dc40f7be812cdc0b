// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// sharded_broadcast_producer / sharded_broadcast_consumer over the host transport, across real
// processes: M = 2, 3 trainer ranks x N = 1, 2, 4 workers, bit-exact against the full tensors;
// spec mismatches, wrong items, a trainer killed mid-sync.
#include <weightsync/host/communicator.hpp>
#include <weightsync/sharded_broadcast.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/catch.hpp"
#include "support/process.hpp"
#include "support/shard_model.hpp"

// (a namespace per test source: the sources build as unity translation units)
namespace ws_test_sharded_test {

using namespace weightsync;
using namespace std::chrono_literals;
using ws_test::Outcome;
using ws_test::ShardedModel;

namespace {

HostCommunicator connect(int port, int rank, int world,
                         std::chrono::milliseconds op_timeout = 10000ms) {
  RendezvousOptions o;
  o.port = port;
  o.rank = rank;
  o.world_size = world;
  o.timeout = 20000ms;
  return HostCommunicator::connect(o, op_timeout);
}

// One worker round: poison, receive (destinations for every `dest_every`-th tensor, views for the
// rest), check every tensor bit-exactly and that each arrived exactly once.
TransferStats receive_and_check(HostCommunicator& comm, int m, const TransferOptions& base,
                                workspace_for<HostCommunicator>& ws, std::uint64_t seed, int round,
                                int dest_every, std::size_t keep = static_cast<std::size_t>(-1)) {
  const ShardedModel want(m, -1, seed, round, keep);
  const auto& metas = want.metas;
  std::vector<std::vector<std::byte>> got;
  for (const auto& t : metas) got.emplace_back(t.nbytes(), std::byte{0xCD});
  std::vector<int> loads(metas.size(), 0);
  TransferOptions opt = base;
  if (dest_every > 0)
    opt.destination = [&](const TensorMeta& t) -> void* {
      const auto i = static_cast<std::size_t>(&t - metas.data());
      if (i % static_cast<std::size_t>(dest_every) != 0 || got[i].empty()) return nullptr;
      loads[i]++;
      return got[i].data();
    };
  const TransferStats st = sharded_broadcast_consumer(
      metas, want.specs, comm, m,
      [&](std::span<const TensorView> batch, HostStream) {
        for (const auto& v : batch) {
          const auto i = static_cast<std::size_t>(v.meta - metas.data());
          if (v.nbytes != metas[i].nbytes()) throw std::runtime_error("view of the wrong size");
          if (v.nbytes) std::memcpy(got[i].data(), v.data, v.nbytes);
          loads[i]++;
        }
      },
      opt, ws);
  for (std::size_t i = 0; i < metas.size(); ++i) {
    if (got[i] != want.full[i])
      throw std::runtime_error("tensor '" + metas[i].name + "' differs from the full tensor");
    if (loads[i] != 1 && !got[i].empty())
      throw std::runtime_error("tensor '" + metas[i].name + "' arrived " +
                               std::to_string(loads[i]) + " times");
  }
  return st;
}

void run_round_trips(int m, int n) {
  ws_test::Processes procs;
  const int port = ws_test::free_port();
  const int world = m + n;
  for (int rank = 0; rank < world; ++rank)
    procs.spawn([=] {
      auto comm = connect(port, rank, world);
      workspace_for<HostCommunicator> ws;
      int round = 0;
      for (const bool packed : {true, false})
        for (const std::size_t b : {std::size_t{1}, std::size_t{100}, std::size_t{1} << 20})
          for (const int k : {1, 2, 3}) {
            if (!packed && (b != 1 || k == 3)) continue;
            TransferOptions opt;
            opt.packed = packed;
            opt.buffer_size_bytes = b;
            opt.num_buffers = k;
            opt.timeout = 20s;
            ++round;
            if (rank < m) {
              const ShardedModel model(m, rank, 11, round);
              sharded_broadcast_producer(model.metas, model.specs, model.items(), comm, m, opt, ws);
            } else {
              receive_and_check(comm, m, opt, ws, 11, round, round % 3);
            }
          }
    });
  const auto res = procs.wait_all(120s);
  for (std::size_t r = 0; r < res.size(); ++r) {
    INFO("M=" << m << " N=" << n << " rank " << r << ": " << ws_test::outcome_name(res[r].outcome)
              << ": " << res[r].message);
    CHECK(res[r].outcome == Outcome::ok);
  }
}

}  // namespace

TEST_CASE("sharded: M = 2, 3 trainer ranks x N = 1, 2, 4 workers, bit-exact", "[unit][sharded]") {
  for (const int m : {2, 3})
    for (const int n : {1, 2, 4}) run_round_trips(m, n);
}

// One schedule serves whole-tensor and sharded transfers (pipeline/detail/schedule.hpp), so the
// features first built for whole tensors serve sharded ones too: direct pieces (some of them
// strided: dim-1 splits) and launch splits, host checksums, progress, and the eager handshake.
TEST_CASE("sharded: direct pieces, launch splits, checksums, progress and eager syncs, bit-exact",
          "[unit][sharded]") {
  ws_test::Processes procs;
  const int port = ws_test::free_port();
  constexpr int m = 2, world = 4;
  constexpr std::size_t small = 3;  // embed, q, norm: 776 bytes, eager for every root
  for (int rank = 0; rank < world; ++rank)
    procs.spawn([=] {
      auto comm = connect(port, rank, world);
      int round = 0;
      for (const std::size_t b : {std::size_t{100}, std::size_t{1} << 20})
        for (const bool tiny : {false, true}) {
          TransferOptions opt;
          opt.buffer_size_bytes = b;
          opt.num_buffers = 2;
          opt.timeout = 20s;
          opt.direct_threshold_bytes = tiny ? 0 : 64;
          opt.split_min_region_bytes = 32;
          opt.checksum = !tiny;  // (checksums are never eager)
          opt.acknowledge = Acknowledge::each_transfer;
          ++round;
          const std::size_t keep = tiny ? small : static_cast<std::size_t>(-1);
          workspace_for<HostCommunicator> ws;  // fresh: a slot shows the data phase ran
          if (rank < m) {
            const ShardedModel model(m, rank, 23, round, keep);
            sharded_broadcast_producer(model.metas, model.specs, model.items(), comm, m, opt, ws);
            continue;
          }
          int calls = 0;
          TransferProgress last;
          opt.progress = [&](const TransferProgress& p) {
            ++calls;
            last = p;
          };
          const auto st = receive_and_check(comm, m, opt, ws, 23, round, 2, keep);
          if (calls < 2 || !last.done() || last.bytes_total != st.bytes)
            throw std::runtime_error("progress: " + std::to_string(calls) + " calls, done " +
                                     std::to_string(last.done()));
          // Eager: the bytes came with the handshake, no slot was needed; else views need one.
          if (tiny != (ws.slot_bytes() == 0))
            throw std::runtime_error("round " + std::to_string(round) + ": slot of " +
                                     std::to_string(ws.slot_bytes()) + " bytes, eager expected " +
                                     std::to_string(tiny));
        }
    });
  const auto res = procs.wait_all(120s);
  for (std::size_t r = 0; r < res.size(); ++r) {
    INFO("rank " << r << ": " << ws_test::outcome_name(res[r].outcome) << ": " << res[r].message);
    CHECK(res[r].outcome == Outcome::ok);
  }
}

TEST_CASE("sharded: the plan interleaves roots and fits every step in one slot",
          "[unit][sharded]") {
  std::vector<TensorMeta> metas;
  std::vector<ShardSpec> specs;
  ws_test::sharded_layout(3, metas, specs);
  TransferOptions opt;
  opt.buffer_size_bytes = 100;
  const detail::PiecePlan plan(metas, specs, 3, opt);
  std::size_t bytes = 0;
  for (const auto& p : plan.pieces) bytes += p.bytes();
  CHECK(bytes == plan.total_bytes);
  for (int r = 0; r < 3; ++r) CHECK(!plan.chunks[static_cast<std::size_t>(r)].empty());
  // Interleaved: step s carries chunk s of EVERY root that has one, so there are as many steps as
  // the longest root has chunks (not the sum), and step 0 holds a chunk of each of the 3 roots.
  std::size_t longest = 0, fewest = plan.total_chunks;
  for (const auto& c : plan.chunks) {
    longest = std::max(longest, c.size());
    fewest = std::min(fewest, c.size());
  }
  CHECK(plan.steps == longest);
  CHECK(plan.steps < plan.total_chunks);
  REQUIRE(fewest >= 2);  // the layout gives every root several chunks at B = 100
  for (std::size_t s = 0; s < plan.steps; ++s) {
    std::size_t step = 0;
    int roots = 0;
    for (int r = 0; r < 3; ++r)
      if (const auto* c = plan.chunk(r, s)) {
        step += c->bytes;
        ++roots;
        // Root r's chunk s is what carries its pieces at step s, in the slot's region of r.
        for (std::size_t p = c->begin; p < c->end; ++p) {
          const auto idx = plan.owned[static_cast<std::size_t>(r)][p];
          CHECK(plan.piece_step[idx] == s);
          CHECK(plan.piece_slot[idx] >= plan.offset(s, r));
        }
      }
    CHECK(step <= plan.slot_bytes);
    INFO("step " << s);
    if (s < fewest) CHECK(roots == 3);
  }
  // A different split is a different digest; the same pieces spelled differently are not.
  auto specs2 = specs;
  specs2[0].sizes = {13, 13, 11};  // torch.chunk's split of 37 rows over 3, spelled out
  CHECK(detail::PiecePlan(metas, specs2, 3, opt).digest == plan.digest);
  specs2[0].sizes = {12, 13, 12};
  CHECK(detail::PiecePlan(metas, specs2, 3, opt).digest != plan.digest);
  CHECK_THROWS_AS(detail::PiecePlan(metas, specs, 0, opt), config_error);
  specs2.pop_back();
  CHECK_THROWS_AS(detail::PiecePlan(metas, specs2, 3, opt), config_error);
}

TEST_CASE("sharded handshake: differing shard specs fail every rank before any byte moves",
          "[unit][sharded]") {
  ws_test::Processes procs;
  const int port = ws_test::free_port();
  constexpr int m = 2, world = 4;
  for (int rank = 0; rank < world; ++rank)
    procs.spawn([=] {
      auto comm = connect(port, rank, world);
      ShardedModel model(m, rank, 3, 0);
      if (rank == 3) model.specs[0].sizes = {30, 7};  // worker 3 disagrees on embed's split
      TransferOptions opt;
      opt.buffer_size_bytes = 64;
      if (rank < m) {
        sharded_broadcast_producer(model.metas, model.specs, model.items(), comm, m, opt);
      } else {
        sharded_broadcast_consumer(
            model.metas, model.specs, comm, m,
            [](std::span<const TensorView>, HostStream) {
              throw std::runtime_error("loaded after a mismatch");
            },
            opt);
      }
    });
  const auto res = procs.wait_all(30s);
  for (std::size_t r = 0; r < res.size(); ++r) {
    INFO(r << ": " << ws_test::outcome_name(res[r].outcome) << ": " << res[r].message);
    CHECK(res[r].outcome == Outcome::protocol);
    CHECK(res[r].message.find("shard specs differ") != std::string::npos);
  }
}

TEST_CASE("sharded: a trainer's wrong item fails it and every other rank cleanly",
          "[unit][sharded]") {
  ws_test::Processes procs;
  const int port = ws_test::free_port();
  constexpr int m = 3, world = 5;
  for (int rank = 0; rank < world; ++rank)
    procs.spawn([=] {
      auto comm = connect(port, rank, world);
      workspace_for<HostCommunicator> ws;
      TransferOptions opt;
      opt.buffer_size_bytes = 64;
      const ShardedModel model(m, rank, 5, 0);
      if (rank < m) {
        auto items = model.items();
        TensorMeta liar;
        if (rank == 1) {
          liar = *items[2].meta_;
          liar.dtype = DType::int32;
          items[2].meta_ = &liar;
        }
        sharded_broadcast_producer(model.metas, model.specs, items, comm, m, opt, ws);
      } else {
        sharded_broadcast_consumer(
            model.metas, model.specs, comm, m, [](std::span<const TensorView>, HostStream) {}, opt,
            ws);
      }
      // The communicator stays usable: a good round follows.
      const ShardedModel next(m, rank, 5, 1);
      if (rank < m)
        sharded_broadcast_producer(next.metas, next.specs, next.items(), comm, m, opt, ws);
      else
        receive_and_check(comm, m, opt, ws, 5, 1, 2);
    });
  const auto res = procs.wait_all(60s);
  for (std::size_t r = 0; r < res.size(); ++r) {
    INFO(r << ": " << ws_test::outcome_name(res[r].outcome) << ": " << res[r].message);
    CHECK(res[r].outcome == (r == 1 ? Outcome::config : Outcome::remote));
    CHECK(res[r].message.find("int32") != std::string::npos);
  }
}

TEST_CASE("sharded: a trainer rank killed mid-sync fails every other rank within the deadline",
          "[unit][sharded]") {
  ws_test::Processes procs;
  const int port = ws_test::free_port();
  constexpr int m = 2, world = 4;
  const std::vector<TensorMeta> metas = {{"big", DType::float32, {4 << 20}},
                                         {"big2", DType::float32, {2 << 20, 2}}};
  const std::vector<ShardSpec> specs = {{0, {}, {}}, {1, {}, {}}};
  ws_test::SharedCounters rounds(world);  // rounds each rank has completed
  const auto t0 = std::chrono::steady_clock::now();
  for (int rank = 0; rank < world; ++rank)
    procs.spawn([=, &rounds] {
      auto comm = connect(port, rank, world, 2000ms);
      workspace_for<HostCommunicator> ws;
      std::vector<std::vector<std::byte>> shard;
      std::vector<SourceTensorRef> items;
      for (std::size_t i = 0; i < metas.size(); ++i) shard.emplace_back(metas[i].nbytes() / 2);
      for (std::size_t i = 0; i < metas.size(); ++i) items.push_back({&metas[i], shard[i].data()});
      TransferOptions opt;
      opt.buffer_size_bytes = 1 << 20;
      opt.timeout = 2000ms;
      for (int round = 0; round < 100000; ++round) {
        if (rank < m)
          sharded_broadcast_producer(metas, specs, items, comm, m, opt, ws);
        else
          sharded_broadcast_consumer(
              metas, specs, comm, m, [](std::span<const TensorView>, HostStream) {}, opt, ws);
        rounds[static_cast<std::size_t>(rank)]++;
      }
    });
  // The kill lands once every rank has completed a round (mid-sync, not in the rendezvous).
  (void)rounds.wait_all_at_least(1, 20s);
  const long rounds_before_kill = rounds.min();
  const double killed_at =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  procs.kill(1);
  const auto res = procs.wait_all(15s);
  CHECK(rounds_before_kill >= 1);
  for (int rank : {0, 2, 3}) {
    INFO(rank << ": " << ws_test::outcome_name(res[rank].outcome) << ": " << res[rank].message);
    CHECK((res[rank].outcome == Outcome::peer || res[rank].outcome == Outcome::timeout ||
           res[rank].outcome == Outcome::state));
    CHECK(res[rank].seconds < killed_at + 2.0 + 2.0 + 1.0);
  }
}

TEST_CASE("sharded: workspace places of split tensors are reused, never while still live",
          "[unit][sharded]") {
  std::vector<TensorMeta> metas;
  std::vector<ShardSpec> specs;
  std::size_t total = 0;
  for (int i = 0; i < 40; ++i) {
    metas.push_back({"t" + std::to_string(i), DType::float32, {70 + i % 5, 30 + i % 4}});
    specs.push_back({i % 2, {}, {}});
    total += metas.back().nbytes();
  }
  for (const std::size_t b : {std::size_t{1}, std::size_t{4096}, std::size_t{30000}}) {
    TransferOptions opt;
    opt.buffer_size_bytes = b;
    const detail::PiecePlan plan(metas, specs, 3, opt);
    std::vector<std::byte*> dest(metas.size(), nullptr);
    std::vector<std::size_t> off;
    const std::size_t need = detail::place_assembly(plan, metas, dest, off);
    std::size_t padded = 0;  // every place apart (256-byte aligned)
    for (const auto& t : metas) padded += (t.nbytes() + 255) / 256 * 256;
    INFO("B " << b << ": " << need << " of " << total << " bytes");
    CHECK(need <= padded);
    if (b == 1) CHECK(need * 4 < total);  // pieces one step apart: few tensors live at once
    auto first = [&](std::size_t i) {
      std::size_t f = plan.complete_step[i];
      for (std::size_t p = plan.first_piece[i]; p < plan.first_piece[i + 1]; ++p)
        f = std::min(f, plan.piece_step[p]);
      return f;
    };
    for (std::size_t i = 0; i < metas.size(); ++i)
      for (std::size_t j = i + 1; j < metas.size(); ++j) {
        const bool live_together =
            first(i) <= plan.complete_step[j] && first(j) <= plan.complete_step[i];
        const bool bytes_overlap =
            off[i] < off[j] + metas[j].nbytes() && off[j] < off[i] + metas[i].nbytes();
        CHECK_FALSE((live_together && bytes_overlap));
      }
  }
}

}  // namespace ws_test_sharded_test
