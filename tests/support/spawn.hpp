// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! Re-runs the current executable as peer processes (fork + exec, so no CUDA state crosses a
//! fork), each with --ws-rank/--ws-world/--ws-port/--ws-arg and a Catch test filter; enforces a
//! deadline; collects exit codes and output.

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

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

//! Starts `world` peers running test `test_name`; `kill_rank`/`kill_after` optionally SIGKILLs one.
inline std::vector<PeerResult> run_peers(const std::string& test_name, int world, int port,
                                         const std::string& arg, std::chrono::seconds limit,
                                         int kill_rank = -1,
                                         std::chrono::milliseconds kill_after = {}) {
  using Clock = std::chrono::steady_clock;
  struct Kid {
    pid_t pid;
    std::string log;
    Clock::time_point start;
    bool done = false;
  };
  std::vector<Kid> kids;
  const std::string exe = self_exe();
  // The test name as a Catch test spec: ',' '[' ']' '\\' are special there. A peer that matched no
  // test must fail: Catch2 v3 does by default, v2 with --warn NoTests (which v3 refuses).
  std::string spec;
  for (char c : test_name) {
    if (c == ',' || c == '[' || c == ']' || c == '\\') spec += '\\';
    spec += c;
  }
  for (int r = 0; r < world; ++r) {
    char tmpl[] = "/tmp/ws_peer_XXXXXX";
    const int fd = ::mkstemp(tmpl);
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      const std::string rank = std::to_string(r), w = std::to_string(world), p = std::to_string(port);
      std::vector<const char*> args = {exe.c_str(), spec.c_str()};
#if WEIGHTSYNC_TEST_CATCH2_MAJOR < 3
      args.insert(args.end(), {"--warn", "NoTests"});
#endif
      args.insert(args.end(), {"--ws-rank", rank.c_str(), "--ws-world", w.c_str(), "--ws-port", p.c_str()});
      // Catch2 v3 refuses an empty option value: --ws-arg only when there is one.
      if (!arg.empty()) args.insert(args.end(), {"--ws-arg", arg.c_str()});
      args.push_back(nullptr);
      ::execv(exe.c_str(), const_cast<char* const*>(args.data()));
      ::_exit(127);
    }
    ::close(fd);
    kids.push_back({pid, tmpl, Clock::now()});
  }
  std::vector<PeerResult> out(kids.size());
  const auto deadline = Clock::now() + limit;
  bool killed = false;
  std::size_t left = kids.size();
  while (left) {
    for (std::size_t i = 0; i < kids.size(); ++i) {
      if (kids[i].done) continue;
      int st = 0;
      if (::waitpid(kids[i].pid, &st, WNOHANG) == kids[i].pid) {
        kids[i].done = true;
        --left;
        out[i].seconds = std::chrono::duration<double>(Clock::now() - kids[i].start).count();
        out[i].exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
      }
    }
    if (!killed && kill_rank >= 0 && Clock::now() - kids[0].start >= kill_after) {
      ::kill(kids[static_cast<std::size_t>(kill_rank)].pid, SIGKILL);
      killed = true;
    }
    if (left && Clock::now() >= deadline) {
      for (std::size_t i = 0; i < kids.size(); ++i)
        if (!kids[i].done) {
          ::kill(kids[i].pid, SIGKILL);
          int st;
          ::waitpid(kids[i].pid, &st, 0);
          kids[i].done = true;
          out[i].hung = true;
          out[i].seconds = std::chrono::duration<double>(Clock::now() - kids[i].start).count();
        }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (std::size_t i = 0; i < kids.size(); ++i) {
    std::ifstream f(kids[i].log);
    std::stringstream ss;
    ss << f.rdbuf();
    out[i].output = ss.str();
    ::unlink(kids[i].log.c_str());
  }
  return out;
}

}  // namespace ws_test
