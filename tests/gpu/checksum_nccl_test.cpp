// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Per-chunk checksums (TransferOptions::checksum) on the GPU over NCCL, three processes (on one
// GPU they share it through NCCL's socket transport: support/gpu_peers.hpp). The roots digest
// their chunks on the device into their status frames; the consumers digest where the bytes
// landed and compare before the acknowledgement. A byte flipped on the wire (after NCCL wrote
// it, on the receiving rank's stream) fails every rank before the commit (all_or_nothing), and
// the next round works, bit-exact: whole tensors (1 producer -> 2 consumers, views and zero-copy)
// and sharded (M = 2 trainer ranks -> 1 worker).
#include <weightsync/cuda/device_buffer.hpp>
#include <weightsync/cuda/stream.hpp>
#include <weightsync/nccl/communicator.hpp>
#include <weightsync/packed_broadcast.hpp>
#include <weightsync/sharded_broadcast.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "support/catch.hpp"
#include "support/cuda_pattern.hpp"
#include "support/gpu_model.hpp"
#include "support/gpu_peers.hpp"
#include "support/gpu_round.hpp"
#include "support/role.hpp"
#include "support/shard_model.hpp"

using namespace weightsync;
using namespace std::chrono_literals;

namespace ws_test_checksum_nccl {

// An NcclCommunicator that can flip one byte in the middle of the next weights buffer it
// receives (not a frame, not a handshake block), after NCCL wrote it, as a faulty link would.
struct FlipComm {
  using stream_type = cudaStream_t;
  NcclCommunicator& c;
  bool corrupt_next = false;
  int depth = 0;
  std::vector<std::tuple<void*, std::size_t, cudaStream_t>> group;

  int rank() const { return c.rank(); }
  int size() const { return c.size(); }
  int device() const { return c.device(); }
  void broadcast(void* buf, std::size_t bytes, int root, cudaStream_t s) {
    c.broadcast(buf, bytes, root, s);
    if (root == c.rank()) return;
    if (depth > 0)
      group.emplace_back(buf, bytes, s);
    else
      maybe_flip(buf, bytes, s);
  }
  void group_start() {
    c.group_start();
    ++depth;
  }
  void group_end() {
    c.group_end();
    if (--depth > 0) return;
    for (auto [buf, bytes, s] : group) maybe_flip(buf, bytes, s);
    group.clear();
  }
  void check() { c.check(); }
  void abort(const std::string& why) noexcept { c.abort(why); }
  void maybe_flip(void* buf, std::size_t bytes, cudaStream_t s) {
    if (!corrupt_next || bytes == detail::kFrameBytes || bytes == 0 ||
        bytes == detail::handshake_block_bytes(static_cast<std::size_t>(c.size())))
      return;
    ws_pattern::flip(static_cast<unsigned char*>(buf) + bytes / 2, 0x10, s);
    corrupt_next = false;
  }
};
static_assert(GroupedCommunicator<FlipComm> && MonitoredCommunicator<FlipComm>);

TransferOptions options() {
  TransferOptions o;
  o.checksum = true;
  o.acknowledge = Acknowledge::each_transfer;
  o.all_or_nothing = true;
  o.buffer_size_bytes = std::size_t{8} << 20;
  o.direct_threshold_bytes = std::size_t{4} << 20;  // embed, lm_head, q travel as direct pieces
  o.timeout = 60s;
  return o;
}

// What a round threw ("" when nothing) and the peer it named.
struct Outcome {
  std::string what;
  int peer = -1;
  unsigned long long wrong = 0;
};
template <class F>
Outcome attempt(F&& f) {
  Outcome o;
  try {
    o.wrong = f();
  } catch (const protocol_error& e) {
    o.what = e.what();
    o.peer = e.peer();
  } catch (const remote_error& e) {
    o.what = e.what();
    o.peer = e.peer();
  }
  return o;
}

// A corrupted round: the corrupting rank names the root it checked against (`root`), every other
// rank names the corrupting rank; everyone says "checksum mismatch".
void expect_failed(const Outcome& o, int rank, int corrupter, int root) {
  INFO("rank " << rank << ": '" << o.what << "'");
  CHECK(o.what.find("checksum mismatch") != std::string::npos);
  CHECK(o.peer == (rank == corrupter ? root : corrupter));
}

}  // namespace ws_test_checksum_nccl

using namespace ws_test_checksum_nccl;

TEST_CASE("checksum over nccl: a flipped byte fails every rank before the commit, the next round "
          "works (whole and sharded)",
          "[gpu][nccl][multi_gpu][checksum]") {
  if (ws_test::ran_as_parent_reporting(3, 300s, 3)) return;
  const auto& role = ws_test::role();
  const int device = role.rank % ws_test::device_count();
  detail::check(cudaSetDevice(device), "cudaSetDevice");
  NcclOptions n;
  n.device = device;
  n.timeout = 60s;
  auto nccl = NcclCommunicator::connect(ws_test::peer_rendezvous(), n);
  FlipComm comm{nccl, false, 0, {}};
  CudaStream stream(device);
  const cudaStream_t s = stream.get();
  workspace_for<FlipComm> ws{CudaPolicy(device)};

  // Whole tensors: rank 0 -> ranks 1, 2. Round 2 is corrupted on rank 2.
  const auto metas = ws_test::mixed_layout();
  ws_test::DeviceModel model(metas, device);
  for (std::uint64_t round = 1; round <= 4; ++round) {
    const auto mode = round % 2 ? ws_test::Mode::views : ws_test::Mode::zero_copy;
    comm.corrupt_next = round == 2 && role.rank == 2;
    const Outcome o = attempt([&]() -> unsigned long long {
      if (role.rank == 0) {
        ws_test::send_round(metas, model, options(), s, round, [&](const auto& items, const auto& opt) {
          packed_broadcast_producer(metas, items, comm, 0, opt, ws);
        });
        return 0;
      }
      return ws_test::receive_round(metas, model, options(), s, round, mode,
                                    [&](const auto& opt, auto load) {
                                      packed_broadcast_consumer(metas, comm, 0, load, opt, ws);
                                    });
    });
    INFO("whole, round " << round << ", rank " << role.rank);
    if (round == 2)
      ws_test::say("[ws-test] whole, corrupted round, rank " + std::to_string(role.rank) + ": " +
                   o.what.substr(0, 300));
    if (round == 2) {
      expect_failed(o, role.rank, 2, 0);
    } else {
      CHECK(o.what.empty());
      CHECK(o.wrong == 0);
    }
  }
  REQUIRE(nccl.healthy());

  // Sharded: trainer ranks 0 and 1 -> worker rank 2. Round 2 is corrupted on rank 2.
  constexpr int kTrainers = 2;
  for (int round = 1; round <= 3; ++round) {
    const ws_test::ShardedModel m(kTrainers, role.rank, 7, round);
    comm.corrupt_next = round == 2 && role.rank == 2;
    TransferOptions opt = options();
    opt.buffer_size_bytes = 256;  // several steps
    opt.direct_threshold_bytes = 512;
    const Outcome o = attempt([&]() -> unsigned long long {
      if (role.rank < kTrainers) {
        std::vector<DeviceBuffer> local;
        std::vector<SourceTensorRef> items;
        for (std::size_t i = 0; i < m.local.size(); ++i) {
          local.emplace_back(m.local[i].size(), device);
          if (!m.local[i].empty())
            detail::check(cudaMemcpy(local.back().data(), m.local[i].data(), m.local[i].size(),
                                     cudaMemcpyHostToDevice),
                          "cudaMemcpy");
          items.push_back({m.local_meta[i], local.back().data()});
        }
        sharded_broadcast_producer(m.metas, m.specs, items, comm, kTrainers, opt, ws);
        return 0;
      }
      std::vector<DeviceBuffer> dest;
      for (const auto& t : m.metas) {
        dest.emplace_back(t.nbytes(), device);
        if (t.nbytes()) detail::check(cudaMemset(dest.back().data(), 0xCD, t.nbytes()), "memset");
      }
      opt.destination = [&](const TensorMeta& t) -> void* {
        const auto i = static_cast<std::size_t>(&t - m.metas.data());
        return i % 2 == 0 && t.nbytes() ? dest[i].data() : nullptr;
      };
      sharded_broadcast_consumer(
          m.metas, m.specs, comm, kTrainers,
          [&](std::span<const TensorView> batch, cudaStream_t st) {
            for (const auto& v : batch) {
              const auto i = static_cast<std::size_t>(v.meta - m.metas.data());
              if (v.nbytes)
                detail::check(cudaMemcpyAsync(dest[i].data(), v.data, v.nbytes,
                                              cudaMemcpyDeviceToDevice, st),
                              "cudaMemcpyAsync");
            }
          },
          opt, ws);
      detail::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      unsigned long long wrong = 0;
      for (std::size_t i = 0; i < m.metas.size(); ++i) {
        std::vector<std::byte> got(m.metas[i].nbytes());
        if (!got.empty())
          detail::check(cudaMemcpy(got.data(), dest[i].data(), got.size(), cudaMemcpyDeviceToHost),
                        "cudaMemcpy");
        for (std::size_t b = 0; b < got.size(); ++b) wrong += got[b] != m.full[i][b];
      }
      return wrong;
    });
    INFO("sharded, round " << round << ", rank " << role.rank);
    if (round == 2)
      ws_test::say("[ws-test] sharded, corrupted round, rank " + std::to_string(role.rank) + ": " +
                   o.what.substr(0, 300));
    if (round == 2) {
      // the worker names the trainer rank whose chunk it checked first
      CHECK(o.what.find("checksum mismatch") != std::string::npos);
      if (role.rank < kTrainers) CHECK(o.peer == 2);
    } else {
      CHECK(o.what.empty());
      CHECK(o.wrong == 0);
    }
  }
  REQUIRE(nccl.healthy());
  ws_test::say("[ws-test] checksums: whole and sharded, corrupted rounds failed on every rank, the others "
               "bit-exact");
}
