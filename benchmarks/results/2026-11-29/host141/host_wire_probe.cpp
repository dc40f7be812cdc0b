// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Host141 probe (throwaway, kept as run): HostCommunicator alone, two ranks forked on this host;
// the time of each wire shape, max over ranks, p10/p50/p90 of 300 after 20. Built and run by probes.sh.
#include <weightsync/host/communicator.hpp>
#include "shm_barrier.hpp"
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <unistd.h>
#include <sys/wait.h>
namespace ws = weightsync;
using Clock = std::chrono::steady_clock;
int run(int rank, int port) {
  ws::RendezvousOptions r; r.rank = rank; r.world_size = 2; r.port = port;
  auto comm = ws::HostCommunicator::connect(r);
  ws_bench::ShmBarrier bar("/hp_" + std::to_string(port), 2, rank, std::chrono::seconds(60), [&] { char b = 0; comm.broadcast(&b, 1, 0); });
  std::vector<char> a(33024), b(33024), c(4352);
  auto maxr = [&](double x) { double m = x; for (int k = 0; k < 2; ++k) { double v = x; comm.broadcast(&v, 8, k); m = std::max(m, v);} return m; };
  struct Case { const char* name; std::function<void()> f; };
  auto spin = [](double us) { auto t0 = Clock::now(); while (std::chrono::duration<double, std::micro>(Clock::now() - t0).count() < us) {} };
  std::vector<Case> cases = {
    {"bcast32256 after 8us", [&] { if (rank == 0) spin(8); comm.broadcast(a.data(), 32256, 0); }},
    {"bcast32256 after 20us", [&] { if (rank == 0) spin(20); comm.broadcast(a.data(), 32256, 0); }},
    {"bcast32256 after 8 both", [&] { spin(8); comm.broadcast(a.data(), 32256, 0); }},
    {"bcast32256", [&] { comm.broadcast(a.data(), 32256, 0); }},
    {"ag33024+4352", [&] { comm.group_start(); comm.broadcast(a.data(), 33024, 0); comm.broadcast(c.data(), 4352, 1); comm.group_end(); }},
    {"ag33024+256", [&] { comm.group_start(); comm.broadcast(a.data(), 33024, 0); comm.broadcast(c.data(), 256, 1); comm.group_end(); }},
    {"ag33024+8", [&] { comm.group_start(); comm.broadcast(a.data(), 33024, 0); comm.broadcast(c.data(), 8, 1); comm.group_end(); }},
    {"bcast33024+bcast256back", [&] { comm.broadcast(a.data(), 33024, 0); comm.broadcast(c.data(), 256, 1); }},
    {"bcast4096", [&] { comm.broadcast(a.data(), 4096, 0); }},
    {"ag4352+4352", [&] { comm.group_start(); comm.broadcast(a.data(), 4352, 0); comm.broadcast(c.data(), 4352, 1); comm.group_end(); }},
    {"ag4352+256", [&] { comm.group_start(); comm.broadcast(a.data(), 4352, 0); comm.broadcast(c.data(), 256, 1); comm.group_end(); }},
  };
  for (int pass = 0; pass < 2; ++pass)
  for (auto& cs : cases) {
    std::vector<double> t;
    for (int i = 0; i < 320; ++i) {
      bar.wait();
      auto t0 = Clock::now(); cs.f();
      double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
      us = maxr(us);
      if (i >= 20) t.push_back(us);
    }
    std::sort(t.begin(), t.end());
    if (rank == 0) std::printf("%-26s p10 %6.1f  p50 %6.1f  p90 %6.1f us\n", cs.name, t[t.size()/10], t[t.size()/2], t[t.size()*9/10]);
  }
  return 0;
}
int main(int argc, char** argv) {
  int port = 29000 + getpid() % 1000;
  pid_t p = fork();
  if (p == 0) { usleep(100000); return run(1, port); }
  int rc = run(0, port); waitpid(p, nullptr, 0); return rc;
}
