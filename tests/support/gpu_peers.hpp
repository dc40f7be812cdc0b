// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! The two sides of a multi-process GPU test (support/spawn.hpp). The parent: skip without enough
//! GPUs, run the peers, check their exit codes (or that the one it killed died and the other
//! noticed in time). A peer: its device, its rendezvous on 127.0.0.1, its progress lines.

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
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

//! Every peer exited with 0.
inline void expect_peers_passed(const std::vector<PeerResult>& results) {
  for (std::size_t i = 0; i < results.size(); ++i) {
    INFO("rank " << i << " exit " << results[i].exit_code << (results[i].hung ? " (hung)" : "")
                 << " after " << results[i].seconds << " s\n"
                 << results[i].output);
    CHECK(results[i].exit_code == 0);
  }
}

//! Parent side: skips without `gpus` GPUs, else runs test `name` as 2 peers and checks they all
//! passed. The caller returns right after (WS_SKIP returns from this function on Catch2 v2).
inline void run_peers_expect_ok(const std::string& name, int gpus, std::chrono::seconds limit) {
  if (device_count() < gpus) WS_SKIP("needs " << gpus << " GPU(s), found " << device_count());
  expect_peers_passed(run_peers(name, 2, free_port(), "", limit));
}

//! Parent side of a "peer killed mid-transfer" test: runs test `name` as 2 peers, SIGKILLs rank
//! `victim` `kill_after` after the start, and checks it died of that and that the survivor
//! passed (it checks inside that it failed within its deadline).
inline void run_peers_killing(const std::string& name, int gpus, int victim,
                              std::chrono::milliseconds kill_after, std::chrono::seconds limit) {
  if (device_count() < gpus) WS_SKIP("needs " << gpus << " GPU(s), found " << device_count());
  const auto r = run_peers(name, 2, free_port(), "", limit, victim, kill_after);
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
//! TEST_CASE as 2 peers and checking them (see run_peers_expect_ok); false in a peer, which goes
//! on with its rank's part. Use: `if (ws_test::ran_as_parent(2, 300s)) return;`
inline bool ran_as_parent(int gpus, std::chrono::seconds limit) {
  if (role().is_peer()) return false;
  run_peers_expect_ok(current_test_name(), gpus, limit);
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
