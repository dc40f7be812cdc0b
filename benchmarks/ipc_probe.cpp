// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0

// ipc_probe: what a colocated (ipc) sync of a few KiB is made of, with no library protocol around
// it, so that the bench's ipc `tiny` row can be taken apart: the host cost of each CUDA call such
// a sync makes, and the floor of a hand-off between two processes on one GPU (the producer says
// "go" in shared memory, the consumer copies from the producer's memory through a CUDA IPC
// mapping, sees the copy done and says so, the producer sees that). Two processes (one fork,
// before either touches CUDA); a spinning shared-memory barrier starts each iteration; each side
// times its part with the host clock, and an iteration's time is the slower side's. Median, p10
// and p90 of --iters.
//
//   ipc_probe [--bytes 4096] [--iters 300] [--warmup 30]
//
// Single calls (the consumer alone, its stream idle before each; host time of the call):
//   event-record, stream-query (idle), event-query (done), memcpy-local, memcpy-ipc (from the
//   mapping), wait-ipc-event (cudaStreamWaitEvent on the producer's interprocess event, done),
//   kernel-ipc (the library's batched copy, one piece, from the mapping)
// Raw copies (the consumer alone, as the bench's raw-copy row: record, copy, record, synchronize;
// host time, and the events' time in brackets): raw-local, raw-ipc
// Hand-offs (both sides):
//   ev-poll      producer posts; consumer copies, records an event, polls it, posts done
//   stream-poll  the same, polling the stream instead (no record)
//   ipc-event    producer records its interprocess event on its source stream, then posts;
//                consumer waits on it on its stream, copies, polls the stream, posts done
//   ipc-event-k  ipc-event with the batched copy kernel instead of cudaMemcpyAsync
//   bench-like   ev-poll, but each side first records an event on its own stream (the bench's
//                start event) and the producer waits for its source stream as the library does
//                (query; if busy, record and poll)

#include <weightsync/cuda/check.hpp>
#include <weightsync/cuda/batched_copy.hpp>

#include <cuda_runtime.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

namespace ws = weightsync;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kMaxIters = 4096;

struct Shared {
  std::atomic<std::uint64_t> arrived[2];
  std::atomic<std::uint64_t> go;
  std::atomic<std::uint64_t> done;
  std::atomic<int> handles_ready;
  std::atomic<int> failed;
  cudaIpcMemHandle_t mem;
  cudaIpcEventHandle_t event;
  double us[2][kMaxIters];
};

double since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

// Both sides arrive at generation `g`, then leave together (a spin, no yield: the probe wants the
// floor).
void barrier(Shared* sh, int me, std::uint64_t g) {
  sh->arrived[me].store(g, std::memory_order_release);
  const auto t0 = Clock::now();
  while (sh->arrived[1 - me].load(std::memory_order_acquire) < g) {
    if (sh->failed.load() != 0 || since(t0) > 10e6) {
      std::fprintf(stderr, "ipc_probe: rank %d: the other side is gone\n", me);
      std::exit(1);
    }
  }
}

void spin_until(const std::atomic<std::uint64_t>& a, std::uint64_t v, Shared* sh) {
  const auto t0 = Clock::now();
  while (a.load(std::memory_order_acquire) < v)
    if (sh->failed.load() != 0 || since(t0) > 10e6) {
      std::fprintf(stderr, "ipc_probe: no hand-off within 10 s\n");
      std::exit(1);
    }
}

void poll_event(cudaEvent_t e) {
  for (;;) {
    const auto st = cudaEventQuery(e);
    if (st == cudaSuccess) return;
    if (st != cudaErrorNotReady) ws::detail::check(st, "cudaEventQuery");
  }
}
void poll_stream(cudaStream_t s) {
  for (;;) {
    const auto st = cudaStreamQuery(s);
    if (st == cudaSuccess) return;
    if (st != cudaErrorNotReady) ws::detail::check(st, "cudaStreamQuery");
  }
}

struct Stats {
  double p10, p50, p90;
};
Stats stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1))]; };
  return {at(0.1), at(0.5), at(0.9)};
}

}  // namespace

int main(int argc, char** argv) try {
  std::size_t bytes = 4096;
  int iters = 300, warmup = 30;
  bool dead_producer = false;
  for (int i = 1; i < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--dead-producer") {
      dead_producer = true;
      --i;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "ipc_probe: %s needs a value\n", k.c_str());
      return 2;
    }
    const long v = std::atol(argv[i + 1]);
    if (k == "--bytes") bytes = static_cast<std::size_t>(v);
    else if (k == "--iters") iters = static_cast<int>(v);
    else if (k == "--warmup") warmup = static_cast<int>(v);
    else {
      std::fprintf(stderr, "usage: ipc_probe [--bytes N] [--iters N] [--warmup N] [--dead-producer]\n");
      return 2;
    }
  }
  if (iters <= 0 || warmup + iters > kMaxIters || warmup < 0 || bytes == 0) {
    std::fprintf(stderr, "ipc_probe: --warmup + --iters at most %d, --bytes > 0\n", kMaxIters);
    return 2;
  }
  void* page = ::mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                      -1, 0);
  if (page == MAP_FAILED) throw std::runtime_error("mmap");
  auto* sh = new (page) Shared{};
  const pid_t child = ::fork();  // (before either side touches CUDA)
  if (child < 0) throw std::runtime_error("fork");
  // 0: producer, 1: consumer (with --dead-producer the child produces and dies; the parent waits)
  const int me = (child == 0) != dead_producer ? 1 : 0;
  try {
    ws::detail::check(cudaSetDevice(0), "cudaSetDevice");
    cudaStream_t s = nullptr;
    ws::detail::check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    cudaEvent_t e = nullptr, start = nullptr, end = nullptr, ipc_event = nullptr;
    ws::detail::check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    ws::detail::check(cudaEventCreate(&start), "cudaEventCreate");
    ws::detail::check(cudaEventCreate(&end), "cudaEventCreate");
    std::byte* mine = nullptr;
    ws::detail::check(cudaMalloc(reinterpret_cast<void**>(&mine), bytes), "cudaMalloc");
    ws::detail::check(cudaMemset(mine, 0x5A, bytes), "cudaMemset");
    std::byte* local_src = nullptr;
    ws::detail::check(cudaMalloc(reinterpret_cast<void**>(&local_src), bytes), "cudaMalloc");
    const std::byte* remote = nullptr;
    if (me == 0) {
      ws::detail::check(cudaEventCreateWithFlags(&ipc_event, cudaEventDisableTiming |
                                                                 cudaEventInterprocess),
                        "cudaEventCreate(interprocess)");
      ws::detail::check(cudaIpcGetMemHandle(&sh->mem, mine), "cudaIpcGetMemHandle");
      ws::detail::check(cudaIpcGetEventHandle(&sh->event, ipc_event), "cudaIpcGetEventHandle");
      ws::detail::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      sh->handles_ready.store(1);
    } else {
      const auto t0 = Clock::now();
      while (sh->handles_ready.load() == 0)
        if (sh->failed.load() != 0 || since(t0) > 60e6) throw std::runtime_error("no handles");
      void* p = nullptr;
      ws::detail::check(cudaIpcOpenMemHandle(&p, sh->mem, cudaIpcMemLazyEnablePeerAccess),
                        "cudaIpcOpenMemHandle");
      remote = static_cast<const std::byte*>(p);
      ws::detail::check(cudaIpcOpenEventHandle(&ipc_event, sh->event), "cudaIpcOpenEventHandle");
    }
    if (dead_producer) {
      // The producer records its interprocess event behind 3 s of host work on its stream, then
      // dies; the consumer's stream waits for that event. Does the wait end, and when?
      if (me == 0) {
        ws::detail::check(cudaLaunchHostFunc(s, [](void*) { ::sleep(3); }, nullptr),
                          "cudaLaunchHostFunc");
        ws::detail::check(cudaEventRecord(ipc_event, s), "cudaEventRecord(interprocess)");
        sh->go.store(1, std::memory_order_release);
        spin_until(sh->done, 1, sh);  // (the consumer enqueued its wait)
        std::printf("dead-producer: the producer exits with its event's record pending\n");
        std::fflush(stdout);
        std::_Exit(0);
      }
      spin_until(sh->go, 1, sh);
      ws::detail::check(cudaStreamWaitEvent(s, ipc_event, 0), "cudaStreamWaitEvent");
      ws::detail::check(cudaMemcpyAsync(mine, remote, bytes, cudaMemcpyDeviceToDevice, s), "memcpy");
      ws::detail::check(cudaEventRecord(e, s), "cudaEventRecord");
      sh->done.store(1, std::memory_order_release);
      const auto t0 = Clock::now();
      cudaError_t st = cudaErrorNotReady, ipc_st = cudaErrorNotReady;
      while (since(t0) < 20e6) {
        st = cudaEventQuery(e);
        if (st != cudaErrorNotReady) break;
        ::usleep(1000);
      }
      ipc_st = cudaEventQuery(ipc_event);
      std::printf("dead-producer: the consumer's stream %s after %.3f s (%s); the producer's event: %s\n",
                  st == cudaSuccess ? "went on" : st == cudaErrorNotReady ? "still waits" : "failed",
                  since(t0) / 1e6, cudaGetErrorString(st), cudaGetErrorString(ipc_st));
      std::fflush(stdout);
      ::waitpid(child, nullptr, 0);
      std::_Exit(st == cudaSuccess ? 0 : 3);
    }
    const auto* kernel = ws::detail::BatchedCopyKernel::instance();
    if (kernel == nullptr) throw std::runtime_error("no batched copy kernel on this device");
    auto launch = [&](void* const* d, const void* const* f, const std::size_t* n) {
      kernel->launch(d, f, n, 1, s, 0);
    };
    std::uint64_t gen = 0;
    auto report = [&](const char* name, const std::vector<double>& v, const char* note) {
      const Stats st = stats(v);
      std::printf("%-16s %8.1f %8.1f %8.1f  %s\n", name, st.p10, st.p50, st.p90, note);
      std::fflush(stdout);
    };
    if (me == 1) std::printf("# ipc_probe: %zu bytes, %d iterations (p10 / median / p90, us)\n", bytes, iters);
    // Single calls on the consumer (the producer waits at the barrier).
    auto single = [&](const char* name, const std::function<void()>& call) {
      ++gen;
      barrier(sh, me, gen);
      if (me == 0) return;
      std::vector<double> v;
      for (int i = 0; i < warmup + iters; ++i) {
        const auto t0 = Clock::now();
        call();
        const double us = since(t0);
        ws::detail::check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
        if (i >= warmup) v.push_back(us);
      }
      report(name, v, "one call, host time");
    };
    void* dst = mine;
    const void* psrc = remote;
    single("event-record", [&] { ws::detail::check(cudaEventRecord(e, s), "cudaEventRecord"); });
    single("stream-query", [&] { (void)cudaStreamQuery(s); });
    single("event-query", [&] { (void)cudaEventQuery(e); });
    single("memcpy-local", [&] {
      ws::detail::check(cudaMemcpyAsync(mine, local_src, bytes, cudaMemcpyDeviceToDevice, s), "memcpy");
    });
    single("memcpy-ipc", [&] {
      ws::detail::check(cudaMemcpyAsync(mine, remote, bytes, cudaMemcpyDeviceToDevice, s), "memcpy");
    });
    single("wait-ipc-event", [&] {
      ws::detail::check(cudaStreamWaitEvent(s, ipc_event, 0), "cudaStreamWaitEvent");
    });
    single("kernel-ipc", [&] { launch(&dst, &psrc, &bytes); });
    // Raw copies (consumer alone), as the bench times them.
    auto raw = [&](const char* name, const void* from) {
      ++gen;
      barrier(sh, me, gen);
      if (me == 0) return;
      std::vector<double> host, ev;
      for (int i = 0; i < warmup + iters; ++i) {
        const auto t0 = Clock::now();
        ws::detail::check(cudaEventRecord(start, s), "cudaEventRecord");
        ws::detail::check(cudaMemcpyAsync(mine, from, bytes, cudaMemcpyDeviceToDevice, s), "memcpy");
        ws::detail::check(cudaEventRecord(end, s), "cudaEventRecord");
        ws::detail::check(cudaEventSynchronize(end), "cudaEventSynchronize");
        const double us = since(t0);
        float ms = 0;
        ws::detail::check(cudaEventElapsedTime(&ms, start, end), "cudaEventElapsedTime");
        if (i >= warmup) {
          host.push_back(us);
          ev.push_back(ms * 1000.0);
        }
      }
      const Stats e2 = stats(ev);
      char note[96];
      std::snprintf(note, sizeof note, "host time; events %.1f / %.1f / %.1f", e2.p10, e2.p50, e2.p90);
      report(name, host, note);
    };
    raw("raw-local", local_src);
    raw("raw-ipc", remote);
    // Hand-offs.
    enum class Way { ev_poll, stream_poll, ipc_ev, ipc_ev_k, bench_like };
    auto handoff = [&](const char* name, Way way) {
      ++gen;
      barrier(sh, me, gen);
      std::vector<double> v;
      for (int i = 0; i < warmup + iters; ++i) {
        if (way == Way::bench_like) ws::detail::check(cudaStreamSynchronize(s), "sync");
        ++gen;
        barrier(sh, me, gen);
        const auto t0 = Clock::now();
        if (way == Way::bench_like) ws::detail::check(cudaEventRecord(start, s), "cudaEventRecord");
        if (me == 0) {
          if (way == Way::ipc_ev || way == Way::ipc_ev_k) {
            ws::detail::check(cudaEventRecord(ipc_event, s), "cudaEventRecord(interprocess)");
          } else {
            const auto st = cudaStreamQuery(s);
            if (st == cudaErrorNotReady) {
              ws::detail::check(cudaEventRecord(e, s), "cudaEventRecord");
              poll_event(e);
            } else {
              ws::detail::check(st, "cudaStreamQuery");
            }
          }
          sh->go.store(gen, std::memory_order_release);
          spin_until(sh->done, gen, sh);
        } else {
          spin_until(sh->go, gen, sh);
          if (way == Way::ipc_ev || way == Way::ipc_ev_k)
            ws::detail::check(cudaStreamWaitEvent(s, ipc_event, 0), "cudaStreamWaitEvent");
          if (way == Way::ipc_ev_k)
            launch(&dst, &psrc, &bytes);
          else
            ws::detail::check(cudaMemcpyAsync(mine, remote, bytes, cudaMemcpyDeviceToDevice, s),
                              "memcpy");
          if (way == Way::ev_poll || way == Way::bench_like) {
            ws::detail::check(cudaEventRecord(e, s), "cudaEventRecord");
            poll_event(e);
          } else {
            poll_stream(s);
          }
          sh->done.store(gen, std::memory_order_release);
        }
        sh->us[me][i] = since(t0);
        ++gen;
        barrier(sh, me, gen);  // (both times written)
        if (i >= warmup) v.push_back(std::max(sh->us[0][i], sh->us[1][i]));
      }
      if (me == 1) report(name, v, "hand-off, slower side, host time");
    };
    handoff("ev-poll", Way::ev_poll);
    handoff("stream-poll", Way::stream_poll);
    handoff("ipc-event", Way::ipc_ev);
    handoff("ipc-event-k", Way::ipc_ev_k);
    handoff("bench-like", Way::bench_like);
    ws::detail::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    ++gen;
    barrier(sh, me, gen);
    if (me == 1) ws::detail::check(cudaIpcCloseMemHandle(const_cast<std::byte*>(remote)), "close");
    ++gen;
    barrier(sh, me, gen);
  } catch (...) {
    sh->failed.store(1);
    throw;
  }
  if (me == 1) std::_Exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "ipc_probe: %s\n", e.what());
  return 1;
}
