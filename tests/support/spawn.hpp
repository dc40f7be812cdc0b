// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! Re-runs the current executable as peer processes (fork + exec, so no CUDA state crosses a
//! fork), each with --ws-rank/--ws-world/--ws-port/--ws-arg and a Catch test filter; enforces a
//! deadline; collects exit codes and output.

#include <unistd.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "support/child.hpp"

namespace ws_test {

struct PeerResult {
  int exit_code = -1;  //!< -1: killed or hung
  bool hung = false;
  double seconds = 0;
  std::string output;
};

inline std::string self_exe() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
}

//! Extra environment of peer `rank` (e.g. a distinct NCCL_HOSTID when ranks share a GPU).
using PeerEnv = std::function<EnvVars(int rank)>;

//! Starts `world` peers running test `test_name`; `kill_rank`/`kill_after` optionally SIGKILLs one;
//! `env` (optional) adds variables to each peer's environment.
inline std::vector<PeerResult> run_peers(const std::string& test_name, int world, int port,
                                         const std::string& arg, std::chrono::seconds limit,
                                         int kill_rank = -1,
                                         std::chrono::milliseconds kill_after = {},
                                         const PeerEnv& env = {}) {
  using Clock = std::chrono::steady_clock;
  const std::string exe = self_exe();
  // The test name as a Catch test spec: ',' '[' ']' '\\' are special there. A peer that matched no
  // test must fail: Catch2 v3 does by default, v2 with --warn NoTests (which v3 refuses).
  std::string spec;
  for (char c : test_name) {
    if (c == ',' || c == '[' || c == ']' || c == '\\') spec += '\\';
    spec += c;
  }
  std::vector<Child> kids;
  std::vector<Clock::time_point> start;
  kids.reserve(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r) {
    std::vector<std::string> args = {exe, spec};
#if WEIGHTSYNC_TEST_CATCH2_MAJOR < 3
    args.insert(args.end(), {"--warn", "NoTests"});
#endif
    args.insert(args.end(), {"--ws-rank", std::to_string(r), "--ws-world", std::to_string(world),
                             "--ws-port", std::to_string(port)});
    // Catch2 v3 refuses an empty option value: --ws-arg only when there is one.
    if (!arg.empty()) args.insert(args.end(), {"--ws-arg", arg});
    kids.emplace_back(args, "/tmp/ws_peer_XXXXXX", env ? env(r) : EnvVars{});
    start.push_back(Clock::now());
  }
  std::vector<PeerResult> out(kids.size());
  std::vector<bool> done(kids.size(), false);
  const auto deadline = Clock::now() + limit;
  bool killed = false;
  std::size_t left = kids.size();
  auto elapsed = [&](std::size_t i) {
    return std::chrono::duration<double>(Clock::now() - start[i]).count();
  };
  while (left) {
    for (std::size_t i = 0; i < kids.size(); ++i) {
      if (done[i] || !kids[i].poll()) continue;
      done[i] = true;
      --left;
      out[i].seconds = elapsed(i);
      out[i].exit_code = kids[i].exit_code();
    }
    if (!killed && kill_rank >= 0 && Clock::now() - start[0] >= kill_after) {
      kids[static_cast<std::size_t>(kill_rank)].kill();
      killed = true;
    }
    if (left && Clock::now() >= deadline) {
      for (std::size_t i = 0; i < kids.size(); ++i)
        if (!done[i]) {
          kids[i].kill_and_reap();
          done[i] = true;
          out[i].hung = true;
          out[i].seconds = elapsed(i);
        }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (std::size_t i = 0; i < kids.size(); ++i) out[i].output = kids[i].output();
  return out;
}

}  // namespace ws_test
