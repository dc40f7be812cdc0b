// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Per-chunk checksums (TransferOptions::checksum) over the host transport: a byte flipped on the
// wire fails the receiving rank (and, with all_or_nothing, every rank) before anything is loaded.
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
namespace ws_test_checksum_test {

using namespace weightsync;
using namespace std::chrono_literals;

namespace {

// A HostCommunicator that can flip the first byte of the next weights buffer it receives (any
// broadcast that is not a frame or a handshake block), as a faulty link would.
struct CorruptingComm {
  using stream_type = HostStream;
  explicit CorruptingComm(HostCommunicator& comm) : c(comm) {}
  HostCommunicator& c;
  bool corrupt_next = false;
  std::vector<std::pair<void*, std::size_t>> group;
  int depth = 0;

  int rank() const { return c.rank(); }
  int size() const { return c.size(); }
  void broadcast(void* buf, std::size_t bytes, int root, HostStream s) {
    c.broadcast(buf, bytes, root, s);
    if (root == c.rank()) return;
    if (depth > 0)
      group.emplace_back(buf, bytes);
    else
      maybe_corrupt(buf, bytes);
  }
  void group_start() {
    c.group_start();
    ++depth;
  }
  void group_end() {
    c.group_end();
    if (--depth > 0) return;
    for (auto [buf, bytes] : group) maybe_corrupt(buf, bytes);
    group.clear();
  }
  void check() { c.check(); }
  void abort(const std::string& why) noexcept { c.abort(why); }
  void maybe_corrupt(void* buf, std::size_t bytes) {
    if (!corrupt_next || bytes == detail::kFrameBytes || bytes == 0 ||
        bytes == detail::handshake_block_bytes(static_cast<std::size_t>(c.size())))
      return;
    static_cast<unsigned char*>(buf)[0] ^= 0x01;
    corrupt_next = false;
  }
};
static_assert(GroupedCommunicator<CorruptingComm> && MonitoredCommunicator<CorruptingComm>);

std::vector<TensorMeta> layout() {
  return {{"embed", DType::bfloat16, {64, 32}},   {"scalar", DType::float32, {}},
          {"empty", DType::bfloat16, {0, 16}},    {"q", DType::float16, {16, 16}},
          {"bias", DType::float64, {3}},          {"mask", DType::bool_, {7}},
          {"lm_head", DType::bfloat16, {128, 32}}};
}

std::vector<std::vector<std::byte>> model(const std::vector<TensorMeta>& metas, int round) {
  std::vector<std::vector<std::byte>> d;
  for (std::size_t i = 0; i < metas.size(); ++i) {
    d.emplace_back(metas[i].nbytes());
    std::mt19937 rng(static_cast<unsigned>(round * 1000 + static_cast<int>(i)));
    for (auto& b : d.back()) b = std::byte(rng());
  }
  return d;
}

TransferOptions options(bool checksum) {
  TransferOptions o;
  o.buffer_size_bytes = 600;
  o.num_buffers = 2;
  o.direct_threshold_bytes = 4096;  // embed and lm_head travel as direct tensors
  o.acknowledge = Acknowledge::each_transfer;
  o.all_or_nothing = true;
  o.checksum = checksum;
  o.timeout = 15s;
  return o;
}

// Rounds: 1 clean, 2 corrupted on rank 2, 3 clean, 4 checksum off on rank 1 only (refused).
void run_rank(int port, int rank) {
  auto host = ws_test::connect_host(port, rank, 3, 15s, 15s);
  CorruptingComm comm{host};
  const auto metas = layout();
  workspace_for<CorruptingComm> ws;
  for (int round = 1; round <= 4; ++round) {
    const bool corrupt = round == 2;
    const bool checksum = !(round == 4 && rank == 1);
    auto want = model(metas, round);
    std::string what;
    int peer = -1;
    try {
      if (rank == 0) {
        std::vector<SourceTensorRef> items;
        for (std::size_t i = 0; i < metas.size(); ++i) items.push_back({&metas[i], want[i].data()});
        packed_broadcast_producer(metas, items, comm, 0, options(checksum), ws);
      } else {
        comm.corrupt_next = corrupt && rank == 2;
        auto got = model(metas, 0);
        TransferOptions o = options(checksum);
        // q and bias land in place; the rest comes as views.
        o.destination = [&](const TensorMeta& m) -> void* {
          const auto i = static_cast<std::size_t>(&m - metas.data());
          return m.name == "q" || m.name == "bias" ? got[i].data() : nullptr;
        };
        packed_broadcast_consumer(
            metas, comm, 0,
            [&](std::span<const TensorView> batch, HostStream) {
              for (const auto& v : batch) {
                const auto i = static_cast<std::size_t>(v.meta - metas.data());
                if (v.nbytes) std::memcpy(got[i].data(), v.data, v.nbytes);
              }
            },
            o, ws);
        if (got != want) throw std::runtime_error("round " + std::to_string(round) + " differs");
      }
    } catch (const protocol_error& e) {
      what = e.what();
      peer = e.peer();
    } catch (const remote_error& e) {
      what = e.what();
      peer = e.peer();
    }
    if (round == 1 || round == 3) {
      if (!what.empty()) throw std::runtime_error("round " + std::to_string(round) + ": " + what);
    } else if (round == 2) {
      // rank 2 names the producer and the chunk; the others name rank 2.
      const bool named = rank == 2
                             ? peer == 0 && what.find("checksum mismatch") != std::string::npos
                             : peer == 2 && what.find("checksum mismatch") != std::string::npos;
      if (!named)
        throw std::runtime_error("round 2 on rank " + std::to_string(rank) + ": '" + what + "'");
    } else if (what.find("checksum differs") == std::string::npos) {
      throw std::runtime_error("round 4 was not refused: '" + what + "'");
    }
  }
}

}  // namespace

TEST_CASE("checksum: a flipped byte fails every rank before the commit and the next round works",
          "[unit][checksum]") {
  ws_test::Processes procs;
  const int port = ws_test::free_port();
  for (int rank = 0; rank < 3; ++rank) procs.spawn([=] { run_rank(port, rank); });
  ws_test::expect_all_ok(procs.wait_all(60s));
}

}  // namespace ws_test_checksum_test
