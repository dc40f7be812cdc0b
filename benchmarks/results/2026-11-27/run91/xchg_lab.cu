// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Run 91 lab (#25): the floor of one eager 4 KiB sync on two ranks sharing one GPU over NCCL's
// socket transport (one NCCL_HOSTID per rank), timed as weightsync_bench times a row: a start
// event on the stream, the body (host waits included), an end event; the max over ranks of the
// elapsed time, median of 300. Rank 0 is the producer (4 KiB of source), rank 1 the consumer
// (4 KiB of destination). Every case checks the consumer's bytes (poisoned before each round).
//   R   raw ncclBroadcast of the 4 KiB (the bench's raw row)
//   A   ncclAllGather of 4352 B a rank on device buffers, no copies
//   X   today's library: pack (D2D 4 KiB, producer), H2D 256 B frame, all-gather 4352 B a rank,
//       D2H 8704 B, host wait; consumer: D2D 4 KiB into place, host wait
//   G   X with its exchange (H2D, all-gather, D2H) as one CUDA graph
//   H   the exchange area in pinned host memory: pack (D2H 4 KiB, producer), all-gather over the
//       host memory, host wait; consumer: H2D 4 KiB into place, host wait
//   H1  H with the consumer's copy enqueued before the one host wait (a device-side verdict)
#include <cuda_runtime.h>
#include <nccl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#define CK(x)                                                                        \
  do {                                                                               \
    cudaError_t e_ = (x);                                                            \
    if (e_ != cudaSuccess) {                                                         \
      std::printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)
#define CN(x)                                                                         \
  do {                                                                                \
    ncclResult_t r_ = (x);                                                            \
    if (r_ != ncclSuccess) {                                                          \
      std::printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, ncclGetErrorString(r_)); \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

struct Shared {
  std::atomic<int> id_ready;
  ncclUniqueId id;
  std::atomic<unsigned> arrived;
  std::atomic<unsigned> gen;
  double ev[2][16];
  double host[2][16];
  long wrong[2][16];
};

static void barrier(Shared* sh) {
  const unsigned g = sh->gen.load(std::memory_order_acquire);
  if (sh->arrived.fetch_add(1, std::memory_order_acq_rel) == 1) {
    sh->arrived.store(0, std::memory_order_relaxed);
    sh->gen.store(g + 1, std::memory_order_release);
  } else {
    while (sh->gen.load(std::memory_order_acquire) == g) {
    }
  }
}

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

constexpr size_t kData = 4096, kFrame = 256, kBlock = kFrame + kData;

static void rank_main(int rank, Shared* sh) {
  setvbuf(stdout, nullptr, _IONBF, 0);
  setenv("NCCL_HOSTID", rank ? "wslabB" : "wslabA", 1);
  setenv("NCCL_SOCKET_IFNAME", "lo", 0);
  setenv("NCCL_IB_DISABLE", "1", 0);
  CK(cudaSetDevice(0));
  if (rank == 0) {
    CN(ncclGetUniqueId(&sh->id));
    sh->id_ready.store(1, std::memory_order_release);
  } else {
    while (!sh->id_ready.load(std::memory_order_acquire)) usleep(100);
  }
  ncclComm_t comm;
  CN(ncclCommInitRank(&comm, 2, sh->id, rank));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t done, t0, t1;
  CK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  CK(cudaEventCreate(&t0));
  CK(cudaEventCreate(&t1));
  char *src, *dst, *area;  // the producer's tensor, the consumer's tensor, the device exchange area
  CK(cudaMalloc(&src, kData));
  CK(cudaMalloc(&dst, kData));
  CK(cudaMalloc(&area, 2 * kBlock));
  char *frame_h, *mirror_h, *area_h;  // pinned: this rank's frame, the area's mirror, a host area
  CK(cudaMallocHost(&frame_h, 2 * kBlock));
  CK(cudaMallocHost(&mirror_h, 2 * kBlock));
  CK(cudaMallocHost(&area_h, 2 * kBlock));
  std::memset(frame_h, 0x40 + rank, 2 * kBlock);
  std::vector<char> want(kData), got(kData);
  for (size_t i = 0; i < kData; ++i) want[i] = char(i * 7 + 3);
  if (rank == 0) CK(cudaMemcpy(src, want.data(), kData, cudaMemcpyHostToDevice));
  auto spin = [&] {
    CK(cudaEventRecord(done, s));
    while (cudaEventQuery(done) == cudaErrorNotReady) {
    }
  };
  char* mine = area + rank * kBlock;
  char* mine_h = area_h + rank * kBlock;
  // G: the exchange captured once.
  cudaGraphExec_t graph = nullptr;
  {
    cudaGraph_t g;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    CK(cudaMemcpyAsync(mine, frame_h + rank * kBlock, kFrame, cudaMemcpyHostToDevice, s));
    CN(ncclAllGather(mine, area, kBlock, ncclChar, comm, s));
    CK(cudaMemcpyAsync(mirror_h, area, 2 * kBlock, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&graph, g, 0));
    CK(cudaGraphDestroy(g));
  }
  struct Case {
    std::string name;
    std::function<void()> op;
    char* landed;  // where the consumer's 4 KiB are after the op (checked)
  };
  std::vector<Case> cases = {
      {"R  raw broadcast 4 KiB", [&] {
         CN(ncclBroadcast(rank ? dst : src, rank ? dst : src, kData, ncclChar, 0, comm, s));
         spin();
       }, dst},
      {"A  all-gather 4352 B a rank (device)", [&] {
         if (rank == 0) CK(cudaMemcpyAsync(mine + kFrame, src, kData, cudaMemcpyDeviceToDevice, s));
         CN(ncclAllGather(mine, area, kBlock, ncclChar, comm, s));
         if (rank == 1) CK(cudaMemcpyAsync(dst, area + kFrame, kData, cudaMemcpyDeviceToDevice, s));
         spin();
       }, dst},
      {"X  today: pack, H2D, all-gather, D2H, wait; copy, wait", [&] {
         if (rank == 0) CK(cudaMemcpyAsync(mine + kFrame, src, kData, cudaMemcpyDeviceToDevice, s));
         CK(cudaMemcpyAsync(mine, frame_h + rank * kBlock, kFrame, cudaMemcpyHostToDevice, s));
         CN(ncclAllGather(mine, area, kBlock, ncclChar, comm, s));
         CK(cudaMemcpyAsync(mirror_h, area, 2 * kBlock, cudaMemcpyDeviceToHost, s));
         spin();
         if (rank == 1) {
           CK(cudaMemcpyAsync(dst, area + kFrame, kData, cudaMemcpyDeviceToDevice, s));
           spin();
         }
       }, dst},
      {"G  X with the exchange as one graph", [&] {
         if (rank == 0) CK(cudaMemcpyAsync(mine + kFrame, src, kData, cudaMemcpyDeviceToDevice, s));
         CK(cudaGraphLaunch(graph, s));
         spin();
         if (rank == 1) {
           CK(cudaMemcpyAsync(dst, area + kFrame, kData, cudaMemcpyDeviceToDevice, s));
           spin();
         }
       }, dst},
      {"H  host area: pack D2H, all-gather, wait; H2D, wait", [&] {
         std::memcpy(mine_h, frame_h + rank * kBlock, kFrame);
         if (rank == 0) CK(cudaMemcpyAsync(mine_h + kFrame, src, kData, cudaMemcpyDefault, s));
         CN(ncclAllGather(mine_h, area_h, kBlock, ncclChar, comm, s));
         spin();
         if (rank == 1) {
           CK(cudaMemcpyAsync(dst, area_h + kFrame, kData, cudaMemcpyDefault, s));
           spin();
         }
       }, dst},
      {"H1 H with one wait (copy before the wait)", [&] {
         std::memcpy(mine_h, frame_h + rank * kBlock, kFrame);
         if (rank == 0) CK(cudaMemcpyAsync(mine_h + kFrame, src, kData, cudaMemcpyDefault, s));
         CN(ncclAllGather(mine_h, area_h, kBlock, ncclChar, comm, s));
         if (rank == 1) CK(cudaMemcpyAsync(dst, area_h + kFrame, kData, cudaMemcpyDefault, s));
         spin();
       }, dst},
  };
  for (size_t c = 0; c < cases.size(); ++c) {
    std::vector<double> ev, host;
    long wrong = 0;
    for (int i = 0; i < 330; ++i) {
      if (rank == 1) {
        CK(cudaMemsetAsync(dst, 0xEE, kData, s));
        CK(cudaMemsetAsync(area, 0xEE, 2 * kBlock, s));
        std::memset(area_h + kFrame, 0xEE, kData);
        CK(cudaStreamSynchronize(s));
      }
      barrier(sh);
      CK(cudaEventRecord(t0, s));
      const auto h0 = std::chrono::steady_clock::now();
      cases[c].op();
      const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - h0).count();
      CK(cudaEventRecord(t1, s));
      CK(cudaEventSynchronize(t1));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, t0, t1));
      if (rank == 1) {
        CK(cudaMemcpy(got.data(), cases[c].landed, kData, cudaMemcpyDeviceToHost));
        for (size_t k = 0; k < kData; ++k) wrong += got[k] != want[k];
      }
      if (i >= 30) {
        ev.push_back(ms * 1e3);
        host.push_back(us);
      }
    }
    sh->ev[rank][c] = median(ev);
    sh->host[rank][c] = median(host);
    sh->wrong[rank][c] = wrong;
    barrier(sh);
    if (rank == 0)
      std::printf("  %-56s events r0 %6.1f r1 %6.1f us | host r0 %6.1f r1 %6.1f us | wrong %ld\n",
                  cases[c].name.c_str(), sh->ev[0][c], sh->ev[1][c], sh->host[0][c],
                  sh->host[1][c], sh->wrong[1][c]);
  }
  CK(cudaGraphExecDestroy(graph));
  CN(ncclCommDestroy(comm));
}

int main() {
  auto* sh = static_cast<Shared*>(mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE,
                                       MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  new (sh) Shared{};
  pid_t kids[2];
  for (int r = 0; r < 2; ++r) {
    kids[r] = fork();
    if (kids[r] == 0) {
      rank_main(r, sh);
      std::fflush(stdout);
      _exit(0);
    }
  }
  int rc = 0;
  for (pid_t k : kids) {
    int st = 0;
    waitpid(k, &st, 0);
    rc |= !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  std::printf("rc %d\n", rc);
  return rc;
}
