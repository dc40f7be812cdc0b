// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// The sharded API over NCCL on two GPUs: M = 1 trainer rank holding several pieces per tensor
// (dim-0, dim-1 and dim-2 splits, uneven sizes), N = 1 worker. Exercises the sharded plan, the
// sharded handshake, per-step status frames and the strided (2-D) landing of pieces on the
// device, bit-exact against the full tensors; and M = 2 trainer ranks -> N = 2 workers as four
// processes (on fewer GPUs, the ranks share them: support/gpu_peers.hpp).
#include <weightsync/cuda/device_buffer.hpp>
#include <weightsync/cuda/stream.hpp>
#include <weightsync/nccl/communicator.hpp>
#include <weightsync/sharded_broadcast.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "support/catch.hpp"
#include "support/gpu_peers.hpp"
#include "support/process.hpp"
#include "support/role.hpp"
#include "support/shard_model.hpp"
#include "support/spawn.hpp"

using namespace weightsync;
using namespace std::chrono_literals;

namespace {

int gpus() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

void layout(std::vector<TensorMeta>& metas, std::vector<ShardSpec>& specs) {
  metas = {{"w", DType::bfloat16, {64, 96}},       {"e", DType::float32, {33, 16}},
           {"x", DType::float16, {4, 6, 10}},      {"n", DType::float32, {128}},
           {"big", DType::bfloat16, {4096, 1024}}, {"empty", DType::float32, {0, 8}}};
  specs = {{1, {40, 56}, {0, 0}},     {0, {10, 23}, {0, 0}},
           {2, {3, 3, 4}, {0, 0, 0}}, {},
           {1, {512, 512}, {0, 0}},   {0, {}, {}}};
}

std::vector<std::byte> full_tensor(const TensorMeta& t, std::size_t i, int round) {
  std::vector<std::byte> v(t.nbytes());
  for (std::size_t b = 0; b < v.size(); ++b)
    v[b] = static_cast<std::byte>((b * 31 + i * 977 + static_cast<std::size_t>(round) * 13) >> 1);
  return v;
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

}  // namespace

TEST_CASE("nccl sharded API: M=1 trainer rank with several pieces per tensor, N=1 worker",
          "[gpu][nccl][multi_gpu][sharded]") {
  const auto& role = ws_test::role();
  if (!role.is_peer()) {
    ws_test::run_peers_expect_ok(ws_test::current_test_name(), 2, 300s);
    return;
  }
  const int device = role.rank % gpus();
  check(cudaSetDevice(device), "cudaSetDevice");
  RendezvousOptions o;
  o.address = "127.0.0.1";
  o.port = role.port;
  o.rank = role.rank;
  o.world_size = 2;
  o.timeout = 60s;
  NcclOptions n;
  n.device = device;
  n.timeout = 60s;
  auto comm = NcclCommunicator::connect(o, n);
  workspace_for<NcclCommunicator> ws{CudaPolicy(device)};
  std::vector<TensorMeta> metas;
  std::vector<ShardSpec> specs;
  layout(metas, specs);
  for (int round = 0; round < 6; ++round) {
    TransferOptions opt;
    opt.packed = round != 5;
    opt.buffer_size_bytes = round < 2 ? (std::size_t{4} << 10) : (std::size_t{1} << 20);
    opt.num_buffers = 1 + round % 3;
    opt.timeout = 60s;
    if (role.rank == 0) {
      std::vector<DeviceBuffer> local;
      std::vector<SourceTensorRef> items;
      for (std::size_t i = 0; i < metas.size(); ++i) {
        const auto full = full_tensor(metas[i], i, round);
        for (const auto& p : ws_test::test_pieces(metas[i], specs[i], 1)) {
          const auto piece = ws_test::cut(metas[i], full, specs[i].dim, p.begin, p.end);
          local.emplace_back(piece.size(), device);
          if (!piece.empty())
            check(
                cudaMemcpy(local.back().data(), piece.data(), piece.size(), cudaMemcpyHostToDevice),
                "cudaMemcpy");
          items.push_back({&metas[i], local.back().data()});
        }
      }
      sharded_broadcast_producer(metas, specs, items, comm, 1, opt, ws);
      continue;
    }
    // Worker: destinations for even tensors (poisoned), views copied out for the others.
    std::vector<DeviceBuffer> dest;
    std::vector<std::vector<std::byte>> got;
    for (const auto& t : metas) {
      dest.emplace_back(t.nbytes(), device);
      if (t.nbytes()) check(cudaMemset(dest.back().data(), 0xCD, t.nbytes()), "cudaMemset");
      got.emplace_back(t.nbytes());
    }
    opt.destination = [&](const TensorMeta& t) -> void* {
      const auto i = static_cast<std::size_t>(&t - metas.data());
      return i % 2 == 0 && t.nbytes() ? dest[i].data() : nullptr;
    };
    sharded_broadcast_consumer(
        metas, specs, comm, 1,
        [&](std::span<const TensorView> batch, cudaStream_t s) {
          for (const auto& v : batch) {
            const auto i = static_cast<std::size_t>(v.meta - metas.data());
            if (v.nbytes)
              check(cudaMemcpyAsync(dest[i].data(), v.data, v.nbytes, cudaMemcpyDeviceToDevice, s),
                    "cudaMemcpyAsync");
          }
        },
        opt, ws);
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    for (std::size_t i = 0; i < metas.size(); ++i) {
      if (got[i].empty()) continue;
      check(cudaMemcpy(got[i].data(), dest[i].data(), got[i].size(), cudaMemcpyDeviceToHost),
            "cudaMemcpy");
      INFO("round " << round << " tensor " << metas[i].name);
      REQUIRE(got[i] == full_tensor(metas[i], i, round));
    }
  }
  if (role.rank == 1) std::printf("sharded API: 6 rounds verified bit-exact\n");
}

TEST_CASE("nccl sharded: M=2 trainer ranks -> N=2 workers as four processes, bit-exact",
          "[gpu][nccl][multi_gpu][sharded]") {
  const auto& role = ws_test::role();
  if (!role.is_peer()) {
    ws_test::run_peers_expect_ok(ws_test::current_test_name(), 4, 300s, 4);
    return;
  }
  constexpr int kTrainers = 2;
  const int device = role.rank % gpus();
  check(cudaSetDevice(device), "cudaSetDevice");
  RendezvousOptions o;
  o.address = "127.0.0.1";
  o.port = role.port;
  o.rank = role.rank;
  o.world_size = 4;
  o.timeout = 60s;
  NcclOptions n;
  n.device = device;
  n.timeout = 60s;
  auto comm = NcclCommunicator::connect(o, n);
  workspace_for<NcclCommunicator> ws{CudaPolicy(device)};
  for (int round = 0; round < 4; ++round) {
    // Each rank cuts its own pieces from the same deterministic full model (support/shard_model).
    const ws_test::ShardedModel m(kTrainers, role.rank, 42, round);
    const auto& metas = m.metas;
    TransferOptions opt;
    opt.packed = round != 3;
    opt.buffer_size_bytes = round < 2 ? (std::size_t{4} << 10) : (std::size_t{1} << 20);
    opt.num_buffers = 1 + round % 3;
    opt.timeout = 60s;
    if (role.rank < kTrainers) {
      std::vector<DeviceBuffer> local;
      std::vector<SourceTensorRef> items;
      for (std::size_t i = 0; i < m.local.size(); ++i) {
        local.emplace_back(m.local[i].size(), device);
        if (!m.local[i].empty())
          check(cudaMemcpy(local.back().data(), m.local[i].data(), m.local[i].size(),
                           cudaMemcpyHostToDevice),
                "cudaMemcpy");
        items.push_back({m.local_meta[i], local.back().data()});
      }
      sharded_broadcast_producer(metas, m.specs, items, comm, kTrainers, opt, ws);
      continue;
    }
    // Worker: destinations for even tensors (poisoned), views copied out for the others.
    std::vector<DeviceBuffer> dest;
    for (const auto& t : metas) {
      dest.emplace_back(t.nbytes(), device);
      if (t.nbytes()) check(cudaMemset(dest.back().data(), 0xCD, t.nbytes()), "cudaMemset");
    }
    opt.destination = [&](const TensorMeta& t) -> void* {
      const auto i = static_cast<std::size_t>(&t - metas.data());
      return i % 2 == 0 && t.nbytes() ? dest[i].data() : nullptr;
    };
    sharded_broadcast_consumer(
        metas, m.specs, comm, kTrainers,
        [&](std::span<const TensorView> batch, cudaStream_t s) {
          for (const auto& v : batch) {
            const auto i = static_cast<std::size_t>(v.meta - metas.data());
            if (v.nbytes)
              check(cudaMemcpyAsync(dest[i].data(), v.data, v.nbytes, cudaMemcpyDeviceToDevice, s),
                    "cudaMemcpyAsync");
          }
        },
        opt, ws);
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    for (std::size_t i = 0; i < metas.size(); ++i) {
      std::vector<std::byte> got(metas[i].nbytes());
      if (!got.empty())
        check(cudaMemcpy(got.data(), dest[i].data(), got.size(), cudaMemcpyDeviceToHost),
              "cudaMemcpy");
      INFO("round " << round << " tensor " << metas[i].name);
      REQUIRE(got == m.full[i]);
    }
  }
  if (role.rank >= kTrainers)
    std::printf("worker rank %d: M=2 -> N=2, 4 rounds verified bit-exact\n", role.rank);
}
