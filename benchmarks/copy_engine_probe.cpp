// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// copy_engine_probe: what the copy engines can do between two GPUs of one node, in one process,
// to choose how the p2p backend moves bytes. For each direction (pull: the copy is issued on the
// receiving GPU and reads the peer; push: issued on the sending GPU and writes the peer), number
// of streams, piece size and source working set (a fresh sweep over the whole buffer, or a
// small ring reused), copies TOTAL bytes and prints the median of 5 timed runs after one warm-up.
// Every destination is poisoned first and checked against the source afterwards.
//   copy_engine_probe [TOTAL_GIB=16]
#include <weightsync/cuda/check.hpp>
#include <weightsync/cuda/device_buffer.hpp>
#include <weightsync/cuda/event.hpp>
#include <weightsync/cuda/stream.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace ws = weightsync;
using ws::detail::check;

int main(int argc, char** argv) try {
  int n = 0;
  check(cudaGetDeviceCount(&n), "cudaGetDeviceCount");
  if (n < 2) {
    std::printf("copy_engine_probe: needs 2 GPUs, found %d\n", n);
    return 0;
  }
  const std::size_t total = (argc > 1 ? std::stoull(argv[1]) : 16) << 30;
  const std::size_t ring = std::size_t{2} << 30;
  for (int d : {0, 1}) {
    ws::detail::CurrentDeviceGuard g(d);
    const cudaError_t e = cudaDeviceEnablePeerAccess(1 - d, 0);
    if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) check(e, "cudaDeviceEnablePeerAccess");
    (void)cudaGetLastError();
  }
  ws::DeviceBuffer src(total, 0), dst(total, 1);
  {
    ws::detail::CurrentDeviceGuard g(0);
    check(cudaMemset(src.data(), 0x5A, total), "cudaMemset");
    // a recognisable pattern every 1 MiB
    for (std::size_t off = 0; off < total; off += std::size_t{1} << 20)
      check(cudaMemset(src.data() + off, static_cast<int>((off >> 20) & 0xFF), 64), "cudaMemset");
    check(cudaDeviceSynchronize(), "sync");
  }
  std::printf("# copy_engine_probe: %zu GiB per run, GPU 0 -> GPU 1, median of 5 (GB/s = 1e9 B/s)\n",
              total >> 30);
  std::printf("# %-5s %7s %7s %8s %10s %8s\n", "dir", "streams", "piece", "source", "time(ms)", "GB/s");
  for (const char* dir : {"pull", "push"}) {
    const int dev = std::string(dir) == "pull" ? 1 : 0;
    ws::detail::CurrentDeviceGuard g(dev);
    for (int ns : {1, 2, 4, 8})
      for (std::size_t piece : {std::size_t{64} << 20, std::size_t{256} << 20, std::size_t{1} << 30})
        for (bool sweep : {true, false}) {
          if (ns > 2 && piece == (std::size_t{1} << 30) && !sweep) continue;
          std::vector<ws::CudaStream> streams;
          std::vector<ws::CudaEvent> done;
          for (int i = 0; i < ns; ++i) {
            streams.emplace_back(dev);
            done.emplace_back(dev);
          }
          ws::TimedEvent t0(dev), t1(dev);
          std::vector<double> ms;
          for (int rep = 0; rep < 6; ++rep) {
            check(cudaMemsetAsync(dst.data(), 0xCD, total, streams[0].get()), "poison");  // on dst's GPU only when pull
            t0.record(streams[0].get());
            for (int i = 1; i < ns; ++i) check(cudaStreamWaitEvent(streams[i].get(), t0.get(), 0), "wait");
            int k = 0;
            for (std::size_t off = 0; off < total; off += piece, k = (k + 1) % ns) {
              const std::size_t len = std::min(piece, total - off);
              const std::size_t soff = sweep ? off : off % ring;
              check(cudaMemcpyAsync(dst.data() + off, src.data() + soff, len, cudaMemcpyDeviceToDevice,
                                    streams[k].get()),
                    "cudaMemcpyAsync");
            }
            for (int i = 1; i < ns; ++i) {
              done[i].record(streams[i].get());
              check(cudaStreamWaitEvent(streams[0].get(), done[i].get(), 0), "wait");
            }
            t1.record(streams[0].get());
            t1.synchronize();
            if (rep > 0) ms.push_back(ws::TimedEvent::elapsed(t0, t1).count() / 1000.0);
          }
          std::sort(ms.begin(), ms.end());
          const double med = ms[ms.size() / 2];
          // check: first bytes of a few MiB blocks
          int bad = 0;
          for (std::size_t off : {std::size_t{0}, total / 2, total - (std::size_t{1} << 20)}) {
            unsigned char h = 0;
            check(cudaMemcpy(&h, dst.data() + off, 1, cudaMemcpyDeviceToHost), "check");
            const std::size_t soff = sweep ? off : off % ring;
            bad += h != static_cast<unsigned char>((soff >> 20) & 0xFF);
          }
          std::printf("  %-5s %7d %6zuM %8s %10.2f %8.1f%s\n", dir, ns, piece >> 20, sweep ? "sweep" : "ring2G",
                      med, double(total) / (med * 1e-3) / 1e9, bad ? "  WRONG" : "");
          std::fflush(stdout);
        }
  }
  {
    ws::detail::CurrentDeviceGuard g(1);
    ws::DeviceBuffer local(total, 1);
    ws::CudaStream s(1);
    ws::TimedEvent t0(1), t1(1);
    std::vector<double> ms;
    for (int rep = 0; rep < 6; ++rep) {
      t0.record(s.get());
      check(cudaMemcpyAsync(local.data(), dst.data(), total, cudaMemcpyDeviceToDevice, s.get()), "copy");
      t1.record(s.get());
      t1.synchronize();
      if (rep > 0) ms.push_back(ws::TimedEvent::elapsed(t0, t1).count() / 1000.0);
    }
    std::sort(ms.begin(), ms.end());
    std::printf("  %-5s %7d %7s %8s %10.2f %8.1f\n", "local", 1, "-", "sweep", ms[2],
                double(total) / (ms[2] * 1e-3) / 1e9);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "copy_engine_probe: %s\n", e.what());
  return 1;
}
