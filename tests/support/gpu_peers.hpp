// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! The two sides of a multi-process GPU test (support/spawn.hpp). The parent: skip without enough
//! GPUs, run the peers, check their exit codes (or that the one it killed died and the other
//! noticed in time). A peer: its device, its rendezvous on 127.0.0.1, its progress lines.

#include <cuda_runtime_api.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "support/catch.hpp"
#include "support/host_world.hpp"
#include "support/process.hpp"
#include "support/role.hpp"
#include "support/spawn.hpp"

namespace ws_test {

inline int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

//! A progress line from a peer (its output is shown by the parent when the test fails).
inline void say(const std::string& s) {
  std::printf("%s\n", s.c_str());
  std::fflush(stdout);
}

//! Set (to "1") in the environment of every peer that shares its GPU with another rank.
inline constexpr const char* kSharedGpuVar = "WS_TEST_SHARED_GPU";

//! How the ranks of a multi-process GPU test sit on the devices.
//!
//! Distinct: one GPU per rank (rank r on device r % devices, devices >= ranks), NCCL's own
//! intra-node transports (NVLink, P2P, SHM). Shared: fewer GPUs than ranks, or WS_SHARE_GPU=1:
//! rank r on device r % devices, and every rank process gets its own NCCL_HOSTID (plus
//! NCCL_SOCKET_IFNAME=lo and NCCL_IB_DISABLE=1 unless already set), so NCCL takes the ranks for
//! different hosts, skips its duplicate-GPU check and moves the bytes over its socket (network)
//! transport on loopback: the path two nodes without InfiniBand take. Figures in this mode are
//! functional, never link figures.
struct GpuSharing {
  int ranks = 0;
  int devices = 0;
  bool shared = false;

  //! One line for the test's output: which mode the test ran in.
  std::string describe() const {
    if (!shared)
      return "[ws-test] mode: distinct GPUs (" + std::to_string(ranks) + " ranks on " +
             std::to_string(devices) + " devices)";
    return "[ws-test] mode: shared GPU, NCCL net transport (" + std::to_string(ranks) +
           " ranks on " + std::to_string(devices) +
           " device(s), one NCCL_HOSTID per rank, sockets on lo): functional, not a link figure";
  }
};

//! Whether WS_SHARE_GPU=1 asks for shared mode even with enough GPUs.
inline bool share_gpu_requested() {
  const char* v = std::getenv("WS_SHARE_GPU");
  return v && std::string(v) == "1";
}

//! The placement of `ranks` rank processes that want `gpus` GPUs (one per NCCL rank) on this
//! machine's devices. A test that wants 1 GPU (CUDA IPC: colocated by design) is never "shared".
//! NCCL ranks share when there are fewer devices than ranks, whatever `gpus` says: two ranks of
//! one communicator on one device fail NCCL's duplicate-GPU check unless they seem to be on two
//! hosts (run 95: 4 ranks on 2 H200s).
inline GpuSharing gpu_sharing(int ranks, int gpus) {
  GpuSharing s;
  s.ranks = ranks;
  s.devices = device_count();
  s.shared = gpus > 1 && s.devices > 0 &&
             (s.devices < std::max(gpus, ranks) || share_gpu_requested());
  return s;
}

//! True in a peer started in shared mode.
inline bool peer_shares_gpu() {
  const char* v = std::getenv(kSharedGpuVar);
  return v && std::string(v) == "1";
}

//! The environment that makes NCCL treat rank process `rank` as its own host: `tag` keeps
//! concurrent tests apart. Variables the user already set (NCCL_SOCKET_IFNAME, NCCL_IB_DISABLE)
//! are kept.
inline EnvVars nccl_net_env(const std::string& tag, int rank) {
  EnvVars e = {{"NCCL_HOSTID", "ws-" + tag + "-" + std::to_string(rank)}, {kSharedGpuVar, "1"}};
  if (!std::getenv("NCCL_SOCKET_IFNAME")) e.emplace_back("NCCL_SOCKET_IFNAME", "lo");
  if (!std::getenv("NCCL_IB_DISABLE")) e.emplace_back("NCCL_IB_DISABLE", "1");
  return e;
}

//! The per-rank environment of peers placed by `s`: nothing in distinct mode.
inline PeerEnv peer_env(const GpuSharing& s) {
  if (!s.shared) return {};
  const std::string tag = std::to_string(::getpid());
  return [tag](int rank) { return nccl_net_env(tag, rank); };
}

//! Puts this process (a test that is itself one rank, e.g. against a Python peer) in the mode of
//! `s` as rank `rank`: in shared mode, sets its NCCL_HOSTID and the socket variables. Call it
//! before this process's first NCCL call (NCCL reads them at communicator init).
inline void join_sharing(const GpuSharing& s, int rank) {
  if (!s.shared) return;
  for (const auto& [k, v] : nccl_net_env(std::to_string(::getpid()), rank))
    ::setenv(k.c_str(), v.c_str(), 1);
}

//! The placement of `ranks` processes wanting `gpus` GPUs, announced in the test's output.
inline GpuSharing announce_sharing(int ranks, int gpus) {
  const auto s = gpu_sharing(ranks, gpus);
  if (gpus > 1) say(s.describe());
  return s;
}

//! Every peer exited with 0.
inline void expect_peers_passed(const std::vector<PeerResult>& results) {
  for (std::size_t i = 0; i < results.size(); ++i) {
    INFO("rank " << i << " exit " << results[i].exit_code << (results[i].hung ? " (hung)" : "")
                 << " after " << results[i].seconds << " s\n"
                 << results[i].output);
    CHECK(results[i].exit_code == 0);
  }
}

//! Parent side: runs test `name` as `ranks` peers that want `gpus` GPUs (sharing them when there
//! are fewer, see GpuSharing) and checks they all passed.
inline void run_peers_expect_ok(const std::string& name, int gpus, std::chrono::seconds limit,
                                int ranks = 2, const std::string& arg = "") {
  const auto s = announce_sharing(ranks, gpus);
  expect_peers_passed(run_peers(name, ranks, free_port(), arg, limit, -1, {}, peer_env(s)));
}

//! Parent side of a test that physically needs `gpus` distinct devices (copy engines between two
//! GPUs, a transport that must refuse peers on two GPUs): skips with that reason on fewer.
inline void run_peers_on_distinct_gpus(const std::string& name, int gpus,
                                       std::chrono::seconds limit) {
  if (device_count() < gpus)
    WS_SKIP("needs " << gpus << " distinct GPUs (copy engines between devices), found "
                     << device_count() << "; shared-GPU mode cannot stand in for this one");
  expect_peers_passed(run_peers(name, gpus, free_port(), "", limit));
}

//! Parent side of a "peer killed mid-transfer" test: runs test `name` as 2 peers (sharing a GPU
//! when there is one), SIGKILLs rank `victim` `kill_after` after the start, and checks it died of
//! that and that the survivor passed (it checks inside that it failed within its deadline).
inline void run_peers_killing(const std::string& name, int gpus, int victim,
                              std::chrono::milliseconds kill_after, std::chrono::seconds limit) {
  const auto s = announce_sharing(2, gpus);
  const auto r = run_peers(name, 2, free_port(), "", limit, victim, kill_after, peer_env(s));
  const auto& killed = r[static_cast<std::size_t>(victim)];
  const auto& survivor = r[static_cast<std::size_t>(1 - victim)];
  INFO("rank " << 1 - victim << " exit " << survivor.exit_code << " after " << survivor.seconds
               << " s\n"
               << survivor.output);
  CHECK((killed.exit_code == -1 && !killed.hung));  // SIGKILLed, as planned
  CHECK(survivor.exit_code == 0);  // the survivor failed in time, as checked inside
}

//! The name of the running TEST_CASE: what its peers are told to run.
inline std::string current_test_name() {
  return Catch::getResultCapture().getCurrentTestName();
}

//! The parent's whole part of a multi-process test: true in the parent, after running this
//! TEST_CASE as `ranks` peers wanting `gpus` GPUs and checking them (see run_peers_expect_ok:
//! NCCL ranks share a GPU when there are fewer); false in a peer, which goes on with its rank's
//! part. Use: `if (ws_test::ran_as_parent(2, 300s)) return;`
inline bool ran_as_parent(int gpus, std::chrono::seconds limit, int ranks = 2) {
  if (role().is_peer()) return false;
  run_peers_expect_ok(current_test_name(), gpus, limit, ranks);
  return true;
}

//! ran_as_parent that also prints the lines of every peer's output that begin with "[ws-test] "
//! (measurements a test reports; a peer's output is shown otherwise only when it fails).
inline bool ran_as_parent_reporting(int gpus, std::chrono::seconds limit, int ranks = 2) {
  if (role().is_peer()) return false;
  const auto s = announce_sharing(ranks, gpus);
  const auto results =
      run_peers(current_test_name(), ranks, free_port(), "", limit, -1, {}, peer_env(s));
  for (std::size_t r = 0; r < results.size(); ++r) {
    std::size_t a = 0;
    const std::string& out = results[r].output;
    while (a < out.size()) {
      std::size_t b = out.find('\n', a);
      if (b == std::string::npos) b = out.size();
      if (out.compare(a, 10, "[ws-test] ") == 0)
        std::printf("rank %zu: %s\n", r, out.substr(a, b - a).c_str());
      a = b + 1;
    }
  }
  std::fflush(stdout);
  expect_peers_passed(results);
  return true;
}

//! ran_as_parent for a test that needs `gpus` distinct devices (see run_peers_on_distinct_gpus).
inline bool ran_as_parent_on_distinct_gpus(int gpus, std::chrono::seconds limit) {
  if (role().is_peer()) return false;
  run_peers_on_distinct_gpus(current_test_name(), gpus, limit);
  return true;
}

//! ran_as_parent for a "peer killed mid-transfer" test (see run_peers_killing).
inline bool ran_as_parent_killing(int gpus, int victim, std::chrono::milliseconds kill_after,
                                  std::chrono::seconds limit) {
  if (role().is_peer()) return false;
  run_peers_killing(current_test_name(), gpus, victim, kill_after, limit);
  return true;
}

//! Peer side: this peer's rendezvous (rank, world and port from the command line) on 127.0.0.1.
inline weightsync::RendezvousOptions peer_rendezvous(
    std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  const auto& r = role();
  return loopback_rendezvous(r.port, r.rank, r.world, timeout);
}

}  // namespace ws_test
