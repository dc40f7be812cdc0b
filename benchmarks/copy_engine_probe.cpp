// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// copy_engine_probe: what the copy engines can do between two GPUs of one node, in one process,
// to choose how the p2p backend moves bytes. For each direction (pull: the copy is issued on the
// receiving GPU and reads the peer; push: issued on the sending GPU and writes the peer), number
// of streams, piece size and source working set (a fresh sweep over the whole buffer, or a
// small ring reused), copies TOTAL bytes and prints the median of 5 timed runs after one warm-up.
// Every destination is poisoned first and checked against the source afterwards.
//   copy_engine_probe [TOTAL_GIB=16]
//   copy_engine_probe ipc [TOTAL_GIB=16]   the same pull, from memory another process exported
//                                          (cudaIpcGetMemHandle), against in-process memory
#include <weightsync/cuda/check.hpp>
#include <weightsync/cuda/device_buffer.hpp>
#include <weightsync/cuda/event.hpp>
#include <weightsync/cuda/stream.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace ws = weightsync;
using ws::detail::check;

namespace {

// Incompressible bytes (splitmix64 words), 64 MiB from the host at a time, each block different.
void fill_random(std::byte* dst, std::size_t bytes) {
  std::vector<unsigned long long> h((std::size_t{64} << 20) / 8);
  unsigned long long x = 0x9E3779B97F4A7C15ull;
  for (std::size_t off = 0; off < bytes; off += h.size() * 8) {
    for (auto& w : h) {
      unsigned long long z = (x += 0x9E3779B97F4A7C15ull);
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      w = z ^ (z >> 31);
    }
    check(cudaMemcpy(dst + off, h.data(), std::min(h.size() * 8, bytes - off),
                     cudaMemcpyHostToDevice),
          "fill");
  }
}

// Median ms of 5 timed pulls (after one warm-up) of `bytes` from `src` into `dst` on `dev`, in
// 1 GiB pieces over 2 streams; checks the first byte of every 1 GiB piece against `expect`.
double timed_pull(int dev, std::byte* dst, const std::byte* src, std::size_t bytes, int expect,
                  int& bad) {
  ws::detail::CurrentDeviceGuard g(dev);
  ws::CudaStream s0(dev), s1(dev);
  ws::CudaEvent d1(dev);
  ws::TimedEvent t0(dev), t1(dev);
  std::vector<double> ms;
  const std::size_t piece = std::size_t{1} << 30;
  for (int rep = 0; rep < 6; ++rep) {
    check(cudaMemsetAsync(dst, 0xCD, bytes, s0.get()), "poison");
    t0.record(s0.get());
    check(cudaStreamWaitEvent(s1.get(), t0.get(), 0), "wait");
    int k = 0;
    for (std::size_t off = 0; off < bytes; off += piece, k ^= 1)
      check(cudaMemcpyAsync(dst + off, src + off, std::min(piece, bytes - off),
                            cudaMemcpyDeviceToDevice, k ? s1.get() : s0.get()),
            "cudaMemcpyAsync");
    d1.record(s1.get());
    check(cudaStreamWaitEvent(s0.get(), d1.get(), 0), "wait");
    t1.record(s0.get());
    t1.synchronize();
    if (rep > 0) ms.push_back(ws::TimedEvent::elapsed(t0, t1).count() / 1000.0);
  }
  for (std::size_t off = 0; off < bytes; off += piece) {
    unsigned char h = 0;
    check(cudaMemcpy(&h, dst + off, 1, cudaMemcpyDeviceToHost), "check");
    bad += h != static_cast<unsigned char>(expect);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Another process allocates and exports; this one opens and pulls. Call before any CUDA use here.
int ipc_probe(std::size_t total) {
  const std::size_t sizes[2] = {total, total};  // constant bytes, then incompressible bytes
  int to_parent[2], to_child[2];
  if (::pipe(to_parent) != 0 || ::pipe(to_child) != 0) return 1;
  const pid_t pid = ::fork();
  if (pid == 0) {
    check(cudaSetDevice(0), "cudaSetDevice");
    for (int which = 0; which < 2; ++which) {
      const std::size_t sz = sizes[which];
      void* p = nullptr;
      check(cudaMalloc(&p, sz), "cudaMalloc");
      check(cudaMemset(p, 0x77, sz), "cudaMemset");
      if (which == 1) {
        fill_random(static_cast<std::byte*>(p), sz);
        for (std::size_t off = 0; off < sz; off += std::size_t{1} << 30)
          check(cudaMemset(static_cast<std::byte*>(p) + off, 0x77, 1),
                "mark");  // what the check reads
      }
      cudaIpcMemHandle_t h;
      check(cudaIpcGetMemHandle(&h, p), "cudaIpcGetMemHandle");
      if (::write(to_parent[1], &h, sizeof h) != sizeof h) ::_exit(1);
    }
    check(cudaDeviceSynchronize(), "sync");
    char b;
    if (::read(to_child[0], &b, 1) < 0) ::_exit(1);  // the parent is done
    ::_exit(0);
  }
  cudaIpcMemHandle_t h[2];
  for (auto& x : h)
    if (::read(to_parent[0], &x, sizeof x) != sizeof x) return 1;
  std::printf(
      "# copy_engine_probe ipc: another process exports GPU 0 memory; 1 GiB pieces, 2 streams, "
      "median of 5\n");
  std::printf("# %-44s %8s %10s %8s\n", "case", "GiB", "time(ms)", "GB/s");
  auto row = [](const char* what, std::size_t sz, double ms, int bad) {
    std::printf("  %-44s %8zu %10.2f %8.1f%s\n", what, sz >> 30, ms, double(sz) / (ms * 1e-3) / 1e9,
                bad ? "  WRONG" : "");
    std::fflush(stdout);
  };
  for (int i = 0; i < 2; ++i) {
    const std::size_t sz = sizes[i];
    for (int dev : {1, 0}) {
      ws::DeviceBuffer dst(sz, dev);
      for (bool explicit_peer : {false, true}) {
        if (dev == 0 && explicit_peer) continue;
        ws::detail::CurrentDeviceGuard g(dev);
        if (explicit_peer) {
          const auto e = cudaDeviceEnablePeerAccess(0, 0);
          if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled)
            check(e, "cudaDeviceEnablePeerAccess");
          (void)cudaGetLastError();
        }
        void* src = nullptr;
        check(cudaIpcOpenMemHandle(&src, h[i], cudaIpcMemLazyEnablePeerAccess),
              "cudaIpcOpenMemHandle");
        int bad = 0;
        const double ms = timed_pull(dev, dst.data(), static_cast<std::byte*>(src), sz, 0x77, bad);
        std::string what = dev == 1 ? (explicit_peer ? "ipc pull GPU0->GPU1, peer enabled"
                                                     : "ipc pull GPU0->GPU1, lazy peer")
                                    : "ipc copy on GPU0 (colocated)";
        what += i ? ", random" : ", constant";
        row(what.c_str(), sz, ms, bad);
        check(cudaIpcCloseMemHandle(src), "cudaIpcCloseMemHandle");
      }
      // the same bytes from this process's own memory on GPU 0
      ws::DeviceBuffer own(sz, 0);
      {
        ws::detail::CurrentDeviceGuard g(0);
        check(cudaMemset(own.data(), 0x77, sz), "cudaMemset");
        if (i) {
          fill_random(own.data(), sz);
          for (std::size_t off = 0; off < sz; off += std::size_t{1} << 30)
            check(cudaMemset(own.data() + off, 0x77, 1), "mark");
        }
        check(cudaDeviceSynchronize(), "sync");
      }
      if (dev == 1) {
        ws::detail::CurrentDeviceGuard g(1);
        const auto e = cudaDeviceEnablePeerAccess(0, 0);
        if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled)
          check(e, "cudaDeviceEnablePeerAccess");
        (void)cudaGetLastError();
      }
      int bad = 0;
      const double ms = timed_pull(dev, dst.data(), own.data(), sz, 0x77, bad);
      row(dev == 1
              ? (i ? "own-process pull GPU0->GPU1, random"
                   : "own-process pull GPU0->GPU1, constant")
              : (i ? "own-process copy on GPU0, random" : "own-process copy on GPU0, constant"),
          sz, ms, bad);
    }
  }
  if (::write(to_child[1], "x", 1) < 0) return 1;
  int st = 0;
  ::waitpid(pid, &st, 0);
  return 0;
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc > 1 && std::string(argv[1]) == "ipc")
    return ipc_probe((argc > 2 ? std::stoull(argv[2]) : 16) << 30);
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
    if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled)
      check(e, "cudaDeviceEnablePeerAccess");
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
  std::printf(
      "# copy_engine_probe: %zu GiB per run, GPU 0 -> GPU 1, median of 5 (GB/s = 1e9 B/s)\n",
      total >> 30);
  std::printf("# %-5s %7s %7s %8s %10s %8s\n", "dir", "streams", "piece", "source", "time(ms)",
              "GB/s");
  for (const char* dir : {"pull", "push"}) {
    const int dev = std::string(dir) == "pull" ? 1 : 0;
    ws::detail::CurrentDeviceGuard g(dev);
    for (int ns : {1, 2, 4, 8})
      for (std::size_t piece :
           {std::size_t{64} << 20, std::size_t{256} << 20, std::size_t{1} << 30})
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
            check(cudaMemsetAsync(dst.data(), 0xCD, total, streams[0].get()),
                  "poison");  // on dst's GPU only when pull
            t0.record(streams[0].get());
            for (int i = 1; i < ns; ++i)
              check(cudaStreamWaitEvent(streams[i].get(), t0.get(), 0), "wait");
            int k = 0;
            for (std::size_t off = 0; off < total; off += piece, k = (k + 1) % ns) {
              const std::size_t len = std::min(piece, total - off);
              const std::size_t soff = sweep ? off : off % ring;
              check(cudaMemcpyAsync(dst.data() + off, src.data() + soff, len,
                                    cudaMemcpyDeviceToDevice, streams[k].get()),
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
          std::printf("  %-5s %7d %6zuM %8s %10.2f %8.1f%s\n", dir, ns, piece >> 20,
                      sweep ? "sweep" : "ring2G", med, double(total) / (med * 1e-3) / 1e9,
                      bad ? "  WRONG" : "");
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
      check(cudaMemcpyAsync(local.data(), dst.data(), total, cudaMemcpyDeviceToDevice, s.get()),
            "copy");
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
