// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0

// exchange_probe: what the wire shapes of a small sync cost on NCCL, with no library protocol
// around them, so that the bench's tiny504 row can be taken apart. Each case is one enqueue on one
// stream, then a synchronize; per iteration every rank starts together (a shared-memory barrier)
// and the iteration's time is the slowest rank's (host clock). Reports the median and the p10/p90.
//
//   exchange_probe --rank R --np N --port P [--iters 100] [--warmup 10]
//
// Launch one process per rank. On one GPU give each its own NCCL_HOSTID (NCCL_SOCKET_IFNAME=lo,
// NCCL_IB_DISABLE=1): the ranks then share the GPU over NCCL's socket transport.
//
// The cases (bytes of a 2-rank sync of 504 x 64 B, as the handshake lays them out):
//   bcast-dev        one broadcast of 32256 B from rank 0, device memory (the bench's raw row)
//   bcast-host       the same, in pinned host memory
//   hs-host          the handshake: grouped broadcasts, rank 0's wide block (33024 B) and each
//                    other rank's base block (4352 B), in pinned host memory
//   hs-host-frames   the same with frame-only blocks for the other ranks (256 B)
//   hs-dev           the handshake in device memory
//   hs-host+copy     hs-host, then the consumer's copy out: one batched-copy launch of 504 x 64 B
//                    from the pinned block to device memory, on the same stream (no host wait
//                    between)
//   pack+hs-host+copy  the producer's pack first (504 x 64 B at a 256-byte stride into its eager
//                    bytes, one launch), then hs-host+copy: an eager sync's GPU work, no protocol
//   pack+hs-dev+copy   the same with the blocks on the device
//   pack1+hs-host+copy1  one 32256-byte copy on each side instead of 504 pieces
// Then, on rank 0 alone, one launch of the batched copy of 504 x 64 B by each of its paths (the
// parameter block by value, the descriptor table, and 16 pieces in the small block), from device
// memory and (-h) from the pinned block: the host time of the launch call, and launch to done.

#include <weightsync/cuda/batched_copy.hpp>
#include <weightsync/cuda/check.hpp>
#include <weightsync/nccl/communicator.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "shm_barrier.hpp"

namespace ws = weightsync;

namespace {

struct Args {
  int rank = -1, np = 2, port = 0, iters = 100, warmup = 10;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "exchange_probe: %s needs a value\n", k.c_str());
      std::exit(2);
    }
    const int v = std::atoi(argv[++i]);
    if (k == "--rank") a.rank = v;
    else if (k == "--np") a.np = v;
    else if (k == "--port") a.port = v;
    else if (k == "--iters") a.iters = v;
    else if (k == "--warmup") a.warmup = v;
    else {
      std::fprintf(stderr, "exchange_probe: unknown option %s\n", k.c_str());
      std::exit(2);
    }
  }
  if (a.rank < 0 || a.rank >= a.np || a.port <= 0 || a.iters <= 0) {
    std::fprintf(stderr, "usage: exchange_probe --rank R --np N --port P [--iters N] [--warmup N]\n");
    std::exit(2);
  }
  return a;
}

}  // namespace

int main(int argc, char** argv) try {
  const Args a = parse(argc, argv);
  int ndev = 0;
  ws::detail::check(cudaGetDeviceCount(&ndev), "cudaGetDeviceCount");
  const int dev = a.rank % ndev;
  ws::detail::check(cudaSetDevice(dev), "cudaSetDevice");
  ws::RendezvousOptions o;
  o.address = "127.0.0.1";
  o.port = a.port;
  o.rank = a.rank;
  o.world_size = a.np;
  ws::NcclOptions n;
  n.device = dev;
  n.connect_all = true;
  auto comm = ws::NcclCommunicator::connect(o, n);
  cudaStream_t s = nullptr;
  ws::detail::check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");

  constexpr std::size_t kTensors = 504, kTensorBytes = 64, kBytes = kTensors * kTensorBytes;
  constexpr std::size_t kWide = 256 + (32u << 10), kBase = 256 + 4096, kFrame = 256;
  const std::size_t area = kWide + static_cast<std::size_t>(a.np) * kBase;
  std::byte* dev_area = nullptr;
  std::byte* host_area = nullptr;
  std::byte* dest = nullptr;
  ws::detail::check(cudaMalloc(reinterpret_cast<void**>(&dev_area), area), "cudaMalloc");
  ws::detail::check(cudaMalloc(reinterpret_cast<void**>(&dest), kBytes), "cudaMalloc");
  ws::detail::check(cudaHostAlloc(reinterpret_cast<void**>(&host_area), area, cudaHostAllocDefault),
                    "cudaHostAlloc");
  std::memset(host_area, a.rank + 1, area);
  ws::detail::check(cudaMemset(dev_area, a.rank + 1, area), "cudaMemset");
  std::vector<void*> dst(kTensors);
  std::vector<const void*> src(kTensors);
  std::vector<std::size_t> len(kTensors, kTensorBytes);
  for (std::size_t t = 0; t < kTensors; ++t) {
    src[t] = host_area + kFrame + t * kTensorBytes;
    dst[t] = dest + t * kTensorBytes;
  }
  // The producer's pack: 504 tensors of 64 B at a 256-byte stride (as the bench's arena lays them
  // out) into its eager bytes, in the pinned block or on the device.
  std::byte* sources = nullptr;
  ws::detail::check(cudaMalloc(reinterpret_cast<void**>(&sources), kTensors * 256), "cudaMalloc");
  std::vector<void*> pack_dst(kTensors), pack_dst_dev(kTensors);
  std::vector<const void*> pack_src(kTensors), src_dev(kTensors);
  for (std::size_t t = 0; t < kTensors; ++t) {
    pack_src[t] = sources + t * 256;
    pack_dst[t] = host_area + kFrame + t * kTensorBytes;
    pack_dst_dev[t] = dev_area + kFrame + t * kTensorBytes;
    src_dev[t] = dev_area + kFrame + t * kTensorBytes;
  }
  ws::detail::CopyTableSlot tables;
  const auto* copy = ws::detail::BatchedCopyKernel::instance();
  if (copy != nullptr) tables.get(dev).reserve(kTensors);
  int sms = 0;
  ws::detail::check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "attr");

  ws_bench::ShmBarrier barrier("/ws_exchange_probe_" + std::to_string(a.port), a.np, a.rank,
                               std::chrono::seconds(60), [&] {
                                 comm.all_reduce(dev_area, dev_area, 1, ncclFloat32, ncclSum, s);
                                 comm.synchronize(s);
                               });
  double* slowest = nullptr;  // (device) per iteration, the max over ranks
  ws::detail::check(cudaMalloc(reinterpret_cast<void**>(&slowest), sizeof(double) * a.iters),
                    "cudaMalloc");

  // The handshake's grouped broadcasts: rank 0's block of `wide` bytes, every other rank's of
  // `other` bytes, in `base`.
  const auto handshake = [&](std::byte* base, std::size_t wide, std::size_t other) {
    comm.group_start();
    comm.broadcast(base, wide, 0, s);
    for (int r = 1; r < a.np; ++r)
      comm.broadcast(base + kWide + static_cast<std::size_t>(r - 1) * kBase, other, r, s);
    comm.group_end();
  };
  struct Case {
    const char* name;
    std::function<void()> enqueue;
  };
  const std::vector<Case> cases = {
      {"bcast-dev", [&] { comm.broadcast(dev_area, kBytes, 0, s); }},
      {"bcast-host", [&] { comm.broadcast(host_area, kBytes, 0, s); }},
      {"hs-host", [&] { handshake(host_area, kWide, kBase); }},
      {"hs-host-frames", [&] { handshake(host_area, kWide, kFrame); }},
      {"hs-dev", [&] { handshake(dev_area, kWide, kBase); }},
      {"hs-host+copy",
       [&] {
         handshake(host_area, kWide, kBase);
         if (a.rank != 0 && copy != nullptr)
           copy->launch(dst.data(), src.data(), len.data(), kTensors, s, sms);
       }},
      {"pack+hs-host+copy",
       [&] {
         if (a.rank == 0 && copy != nullptr)
           copy->launch(pack_dst.data(), pack_src.data(), len.data(), kTensors, s, sms, &tables);
         handshake(host_area, kWide, kBase);
         if (a.rank != 0 && copy != nullptr)
           copy->launch(dst.data(), src.data(), len.data(), kTensors, s, sms, &tables);
       }},
      {"pack+hs-dev+copy",
       [&] {
         if (a.rank == 0 && copy != nullptr)
           copy->launch(pack_dst_dev.data(), pack_src.data(), len.data(), kTensors, s, sms, &tables);
         handshake(dev_area, kWide, kBase);
         if (a.rank != 0 && copy != nullptr)
           copy->launch(dst.data(), src_dev.data(), len.data(), kTensors, s, sms, &tables);
       }},
      {"pack1+hs-host+copy1",
       [&] {
         if (a.rank == 0) ws::detail::check(cudaMemcpyAsync(host_area + kFrame, dest, kBytes, cudaMemcpyDefault, s), "cudaMemcpyAsync");
         handshake(host_area, kWide, kBase);
         if (a.rank != 0) ws::detail::check(cudaMemcpyAsync(dest, host_area + kFrame, kBytes, cudaMemcpyDefault, s), "cudaMemcpyAsync");
       }},
  };
  if (a.rank == 0)
    std::printf("# exchange_probe: %d ranks, %d iterations (+%d warm-up), slowest rank per "
                "iteration, host clock; us\n# %-16s %9s %9s %9s\n",
                a.np, a.iters, a.warmup, "case", "p10", "median", "p90");
  for (const Case& c : cases) {
    std::vector<double> t;
    for (int i = 0; i < a.warmup + a.iters; ++i) {
      barrier.wait();
      const auto t0 = std::chrono::steady_clock::now();
      c.enqueue();
      comm.synchronize(s);
      const double us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      if (i >= a.warmup) t.push_back(us);
    }
    ws::detail::check(cudaMemcpy(slowest, t.data(), sizeof(double) * t.size(), cudaMemcpyHostToDevice),
                      "cudaMemcpy");
    comm.all_reduce(slowest, slowest, t.size(), ncclFloat64, ncclMax, s);
    comm.synchronize(s);
    ws::detail::check(cudaMemcpy(t.data(), slowest, sizeof(double) * t.size(), cudaMemcpyDeviceToHost),
                      "cudaMemcpy");
    std::sort(t.begin(), t.end());
    const auto at = [&](double q) { return t[static_cast<std::size_t>(q * double(t.size() - 1))]; };
    if (a.rank == 0) std::printf("  %-16s %9.1f %9.1f %9.1f\n", c.name, at(0.1), at(0.5), at(0.9));
    std::fflush(stdout);
  }
  // The consumer's copy out alone (no exchange), on rank 0: the host time of one launch of 504
  // pieces by each path of the batched copy kernel, and launch-to-done.
  if (a.rank == 0 && copy != nullptr) {
    std::vector<void*> dd(kTensors);
    std::vector<const void*> ss(kTensors);
    for (std::size_t t = 0; t < kTensors; ++t) {
      ss[t] = dev_area + kFrame + t * kTensorBytes;
      dd[t] = dest + t * kTensorBytes;
    }
    struct Launch {
      const char* name;
      std::size_t count;
      const ws::detail::CopyTableSlot* tables;
      const void* const* src;
    };
    const Launch launches[] = {{"copy504-value", kTensors, nullptr, ss.data()},
                               {"copy504-table", kTensors, &tables, ss.data()},
                               {"copy16-small", 16, nullptr, ss.data()},
                               {"copy504-value-h", kTensors, nullptr, src.data()},
                               {"copy504-table-h", kTensors, &tables, src.data()}};
    std::printf("# launch of the batched copy (rank 0 alone): host us of the launch call, and "
                "launch to done\n# %-16s %9s %9s\n", "case", "launch", "done");
    for (const Launch& l : launches) {
      std::vector<double> host, done;
      for (int i = 0; i < a.warmup + a.iters; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        copy->launch(dd.data(), l.src, len.data(), l.count, s, sms, l.tables);
        const auto t1 = std::chrono::steady_clock::now();
        ws::detail::check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
        const auto t2 = std::chrono::steady_clock::now();
        if (i < a.warmup) continue;
        host.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
        done.push_back(std::chrono::duration<double, std::micro>(t2 - t0).count());
      }
      std::sort(host.begin(), host.end());
      std::sort(done.begin(), done.end());
      std::printf("  %-16s %9.1f %9.1f\n", l.name, host[host.size() / 2], done[done.size() / 2]);
    }
    const auto c = tables.existing() ? tables.existing()->counts() : ws::detail::CopyTable::Counts{};
    std::printf("# table: %llu uploaded, %llu reused, %llu found none free\n",
                static_cast<unsigned long long>(c.uploaded), static_cast<unsigned long long>(c.reused),
                static_cast<unsigned long long>(c.full));
    std::fflush(stdout);
  }
  cudaFree(slowest);
  cudaFree(sources);
  cudaFree(dest);
  cudaFree(dev_area);
  cudaFreeHost(host_area);
  cudaStreamDestroy(s);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "exchange_probe: %s\n", e.what());
  return 1;
}
