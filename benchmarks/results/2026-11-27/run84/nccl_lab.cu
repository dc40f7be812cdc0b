// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Run 84 lab (#25): what one NCCL exchange costs two ranks sharing one GPU over NCCL's socket
// transport (each rank its own NCCL_HOSTID), host-timed from a shared-memory barrier to the end of
// a spin on the stream's event, median of 300: a 4 KiB broadcast (the bench's raw row), all-gathers
// of 8 KiB and 256 B a rank, the library's exchange (256 B H2D, the 8 KiB all-gather, 16 KiB D2H),
// and a grouped send/recv pair.
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

#define CK(x)                                                                                 \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      std::printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));          \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)
#define CN(x)                                                                                 \
  do {                                                                                        \
    ncclResult_t r_ = (x);                                                                    \
    if (r_ != ncclSuccess) {                                                                  \
      std::printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, ncclGetErrorString(r_));         \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

struct Shared {
  std::atomic<int> id_ready;
  ncclUniqueId id;
  std::atomic<unsigned> arrived;
  std::atomic<unsigned> gen;
  double result[2][32];
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
  cudaEvent_t done;
  CK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  char* dev;
  CK(cudaMalloc(&dev, 1 << 20));
  char* host;
  CK(cudaMallocHost(&host, 1 << 20));
  std::memset(host, rank + 1, 1 << 20);
  auto spin = [&] {
    CK(cudaEventRecord(done, s));
    while (cudaEventQuery(done) == cudaErrorNotReady) {
    }
  };
  struct Case {
    std::string name;
    std::function<void()> op;
  };
  const size_t blk = 8192;
  std::vector<Case> cases;
  if (getenv("LAB_SIZES")) {  // pass 3: the exchange's size
    cases.push_back({"broadcast 4 KiB", [&] { CN(ncclBroadcast(dev, dev, 4096, ncclChar, 0, comm, s)); spin(); }});
    for (size_t b : {size_t(256), size_t(1024), size_t(2048), size_t(4352), size_t(8192)}) {
      cases.push_back({"allgather " + std::to_string(b) + " B a rank", [&, b] {
                         CN(ncclAllGather(dev + rank * b, dev, b, ncclChar, comm, s));
                         spin();
                       }});
    }
    for (size_t b : {size_t(4352), size_t(8192)}) {
      cases.push_back({"send " + std::to_string(b) + " B / recv 256 B, D2H", [&, b] {
                         CN(ncclGroupStart());
                         if (rank == 0) {
                           CN(ncclSend(dev, b, ncclChar, 1, comm, s));
                           CN(ncclRecv(dev + b, 256, ncclChar, 1, comm, s));
                         } else {
                           CN(ncclRecv(dev, b, ncclChar, 0, comm, s));
                           CN(ncclSend(dev + b, 256, ncclChar, 0, comm, s));
                         }
                         CN(ncclGroupEnd());
                         CK(cudaMemcpyAsync(host, dev, b + 256, cudaMemcpyDeviceToHost, s));
                         spin();
                       }});
    }
  } else {
    cases = {
      {"broadcast 4 KiB", [&] { CN(ncclBroadcast(dev, dev, 4096, ncclChar, 0, comm, s)); spin(); }},
      {"broadcast 8 KiB", [&] { CN(ncclBroadcast(dev, dev, 8192, ncclChar, 0, comm, s)); spin(); }},
      {"allgather 8 KiB a rank", [&] {
         CN(ncclAllGather(dev + rank * blk, dev, blk, ncclChar, comm, s));
         spin();
       }},
      {"allgather 256 B a rank", [&] {
         CN(ncclAllGather(dev + rank * 256, dev, 256, ncclChar, comm, s));
         spin();
       }},
      {"exchange: H2D 256 B, allgather 8 KiB, D2H 16 KiB", [&] {
         CK(cudaMemcpyAsync(dev + rank * blk, host + rank * blk, 256, cudaMemcpyHostToDevice, s));
         CN(ncclAllGather(dev + rank * blk, dev, blk, ncclChar, comm, s));
         CK(cudaMemcpyAsync(host, dev, 2 * blk, cudaMemcpyDeviceToHost, s));
         spin();
       }},
      {"exchange with cudaStreamSynchronize", [&] {
         CK(cudaMemcpyAsync(dev + rank * blk, host + rank * blk, 256, cudaMemcpyHostToDevice, s));
         CN(ncclAllGather(dev + rank * blk, dev, blk, ncclChar, comm, s));
         CK(cudaMemcpyAsync(host, dev, 2 * blk, cudaMemcpyDeviceToHost, s));
         CK(cudaStreamSynchronize(s));
       }},
      {"broadcast 4 KiB, D2H 4 KiB", [&] {
         CN(ncclBroadcast(dev, dev, 4096, ncclChar, 0, comm, s));
         CK(cudaMemcpyAsync(host, dev, 4096, cudaMemcpyDeviceToHost, s));
         spin();
       }},
      {"allgather 8 KiB a rank, D2H 16 KiB", [&] {
         CN(ncclAllGather(dev + rank * blk, dev, blk, ncclChar, comm, s));
         CK(cudaMemcpyAsync(host, dev, 2 * blk, cudaMemcpyDeviceToHost, s));
         spin();
       }},
      {"grouped send 8 KiB / recv 256 B", [&] {
         CN(ncclGroupStart());
         if (rank == 0) {
           CN(ncclSend(dev, blk, ncclChar, 1, comm, s));
           CN(ncclRecv(dev + blk, 256, ncclChar, 1, comm, s));
         } else {
           CN(ncclRecv(dev, blk, ncclChar, 0, comm, s));
           CN(ncclSend(dev + blk, 256, ncclChar, 0, comm, s));
         }
         CN(ncclGroupEnd());
         spin();
       }},
  };
  }
  using C = std::chrono::steady_clock;
  for (size_t c = 0; c < cases.size(); ++c) {
    std::vector<double> t;
    for (int i = 0; i < 330; ++i) {
      barrier(sh);
      const auto t0 = C::now();
      cases[c].op();
      const double us = std::chrono::duration<double, std::micro>(C::now() - t0).count();
      if (i >= 30) t.push_back(us);
    }
    sh->result[rank][c] = median(t);
    barrier(sh);
    if (rank == 0)
      std::printf("  %-52s rank 0 %7.1f us, rank 1 %7.1f us\n", cases[c].name.c_str(), sh->result[0][c],
                  sh->result[1][c]);
  }
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
