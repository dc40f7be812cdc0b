// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Checksums and votes over the ipc transport: one producer and two consumers, all on GPU 0.
// Checksums (TransferOptions::checksum): the producer digests its sources on the device beside
// the pulls and sends one digest per tensor after them; each consumer digests every tensor where
// it ended up and compares before reporting its outcome. Votes (all_or_nothing with the
// producer's Acknowledge::each_transfer): the producer sends every consumer the verdict after the
// outcomes, so that a failure on one consumer fails the others in the same call.
#include <weightsync/cuda/device_buffer.hpp>
#include <weightsync/cuda/stream.hpp>
#include <weightsync/ipc.hpp>
#include <weightsync/ipc/sharded.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
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
using ws_test::Mode;

namespace ws_test_ipc_checksum {

struct Outcome {
  std::string what;
  int peer = -1;
  bool remote = false;
  unsigned long long wrong = 0;
};

TransferOptions options(bool checksum) {
  TransferOptions o;
  o.checksum = checksum;
  o.acknowledge = Acknowledge::each_transfer;
  o.all_or_nothing = true;
  o.buffer_size_bytes = std::size_t{8} << 20;
  o.timeout = 30s;
  return o;
}

}  // namespace ws_test_ipc_checksum

using namespace ws_test_ipc_checksum;

TEST_CASE("ipc checksums and votes: 1 producer -> 2 consumers on one GPU - a corrupted or failed "
          "consumer fails every rank, the next round is bit-exact",
          "[gpu][ipc][checksum]") {
  if (ws_test::ran_as_parent_reporting(1, 240s, 3)) return;
  const auto& role = ws_test::role();
  detail::check(cudaSetDevice(0), "cudaSetDevice");
  IpcOptions io;
  io.same_gpu = true;
  IpcTransport t(ws_test::peer_rendezvous(), 0, io, 30s);
  CudaStream stream(0);
  const cudaStream_t s = stream.get();
  const auto metas = ws_test::mixed_layout();
  ws_test::DeviceModel model(metas, 0, 4096);
  const std::size_t victim = 3;  // "q": 2 MiB of float16
  // Rounds: 1 clean; 2 rank 2 sees a byte change after the producer's digest (checksums);
  // 3 staged, clean; 4 rank 2's load_weights throws (the vote, no checksums); 5 clean.
  for (std::uint64_t round = 1; round <= 5; ++round) {
    const bool checksum = round != 4;
    t.options().export_sources = round != 3;
    Outcome o;
    try {
      if (role.rank == 0) {
        ws_test::send_round(metas, model, options(checksum), s, round,
                            [&](const auto& items, const auto& opt) { t.send(metas, items, opt); });
      } else {
        const Mode mode = role.rank == 1 ? Mode::zero_copy : Mode::views;
        o.wrong = ws_test::receive_round(
            metas, model, options(checksum), s, round, mode, [&](const auto& opt, auto load) {
              t.receive(metas, opt, [&](std::span<const TensorView> batch, cudaStream_t st) {
                load(batch, st);
                if (role.rank != 2) return;
                if (round == 4) throw std::runtime_error("disk full");
                if (round != 2) return;
                for (const auto& v : batch)
                  if (v.meta == &metas[victim]) {
                    // The producer's digest was enqueued before its plan was sent: long done
                    // after this pause. The view is the producer's memory: change one byte of it
                    // behind this side's copy, before this side's digest (stream order).
                    std::this_thread::sleep_for(300ms);
                    ws_pattern::flip(v.data, 0x40, st);
                  }
              });
            });
      }
    } catch (const protocol_error& e) {
      o.what = e.what();
      o.peer = e.peer();
    } catch (const remote_error& e) {
      o.what = e.what();
      o.peer = e.peer();
      o.remote = true;
    } catch (const std::runtime_error& e) {
      o.what = e.what();
    }
    INFO("round " << round << ", rank " << role.rank << ": '" << o.what << "'");
    if (round == 2 || round == 4)
      ws_test::say("[ws-test] round " + std::to_string(round) + ", rank " +
                   std::to_string(role.rank) + ": " + o.what.substr(0, 300));
    if (round == 2) {
      REQUIRE(!o.what.empty());  // every rank fails
      if (role.rank == 2) {
        CHECK(o.what.find("checksum mismatch") != std::string::npos);
        CHECK(o.what.find("'" + metas[victim].name + "'") != std::string::npos);
        CHECK(o.peer == 0);
      } else {
        // rank 1 may have pulled the byte before or after it changed: its own mismatch, or rank
        // 2's through the verdict; the producer names a consumer
        CHECK(o.peer >= (role.rank == 0 ? 1 : 0));
      }
    } else if (round == 4) {
      REQUIRE(!o.what.empty());
      if (role.rank == 2) {
        CHECK(o.what.find("disk full") != std::string::npos);
      } else {
        CHECK(o.remote);
        CHECK(o.peer == 2);
        if (role.rank == 1) CHECK(o.what.find("all_or_nothing") != std::string::npos);
      }
    } else {
      CHECK(o.what.empty());
      CHECK(o.wrong == 0);
    }
    REQUIRE(t.healthy());
  }
  ws_test::say("[ws-test] ipc checksums and votes: rounds 2 and 4 failed on every rank, 1, 3 and 5 bit-exact");
}

TEST_CASE("ipc sharded votes: 2 trainer ranks -> 2 workers on one GPU - a failed load_weights on "
          "one worker fails the other (all_or_nothing), the next round is bit-exact",
          "[gpu][ipc][sharded]") {
  if (ws_test::ran_as_parent(1, 240s, 4)) return;
  constexpr int kTrainers = 2;
  const auto& role = ws_test::role();
  detail::check(cudaSetDevice(0), "cudaSetDevice");
  IpcOptions io;
  io.same_gpu = true;
  IpcTransport t(ws_test::peer_rendezvous(), 0, io, 30s);
  for (int round = 1; round <= 3; ++round) {
    const ws_test::ShardedModel m(kTrainers, role.rank, 11, round);
    TransferOptions opt = options(false);
    Outcome o;
    try {
      if (role.rank < kTrainers) {
        std::vector<DeviceBuffer> local;
        std::vector<SourceTensorRef> items;
        for (std::size_t i = 0; i < m.local.size(); ++i) {
          local.emplace_back(std::max<std::size_t>(m.local[i].size(), 256), 0);
          if (!m.local[i].empty())
            detail::check(cudaMemcpy(local.back().data(), m.local[i].data(), m.local[i].size(),
                                     cudaMemcpyHostToDevice),
                          "cudaMemcpy");
          items.push_back({m.local_meta[i], local.back().data()});
        }
        send_shards(t, m.metas, m.specs, kTrainers, items, opt);
      } else {
        std::vector<DeviceBuffer> dest;
        for (const auto& x : m.metas) dest.emplace_back(std::max<std::size_t>(x.nbytes(), 256), 0);
        receive_shards(t, m.metas, m.specs, kTrainers, opt,
                       [&](std::span<const TensorView> batch, cudaStream_t st) {
                         if (round == 2 && role.rank == 3) throw std::runtime_error("disk full");
                         for (const auto& v : batch) {
                           const auto i = static_cast<std::size_t>(v.meta - m.metas.data());
                           if (v.nbytes)
                             detail::check(cudaMemcpyAsync(dest[i].data(), v.data, v.nbytes,
                                                           cudaMemcpyDeviceToDevice, st),
                                           "cudaMemcpyAsync");
                         }
                       });
        detail::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
        for (std::size_t i = 0; i < m.metas.size(); ++i) {
          std::vector<std::byte> got(m.metas[i].nbytes());
          if (!got.empty())
            detail::check(cudaMemcpy(got.data(), dest[i].data(), got.size(), cudaMemcpyDeviceToHost),
                          "cudaMemcpy");
          for (std::size_t b = 0; b < got.size(); ++b) o.wrong += got[b] != m.full[i][b];
        }
      }
    } catch (const remote_error& e) {
      o.what = e.what();
      o.peer = e.peer();
      o.remote = true;
    } catch (const std::runtime_error& e) {
      o.what = e.what();
    }
    INFO("round " << round << ", rank " << role.rank << ": '" << o.what << "'");
    if (round == 2) {
      REQUIRE(!o.what.empty());  // every rank fails
      if (role.rank == 3) {
        CHECK(o.what.find("disk full") != std::string::npos);
      } else {
        CHECK(o.remote);
        CHECK(o.peer == 3);
        if (role.rank == 2) CHECK(o.what.find("all_or_nothing") != std::string::npos);
      }
    } else {
      CHECK(o.what.empty());
      CHECK(o.wrong == 0);
    }
    REQUIRE(t.healthy());
  }
}
