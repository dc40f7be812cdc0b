// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! The demo's processes for the end-to-end tests: start one (output to a temporary log), wait for
//! it with a limit, kill it when the test is over.

#include <weightsync/http/control_plane.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/catch.hpp"
#include "support/process.hpp"

namespace ws_e2e {

using namespace std::chrono_literals;
namespace ws = weightsync;

struct Proc {
  pid_t pid = -1;
  std::string log;
  int wait(std::chrono::seconds limit) {  // exit code, 128+signal, or -1 when it had to be killed
    const auto end = std::chrono::steady_clock::now() + limit;
    int st = 0;
    while (::waitpid(pid, &st, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > end) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &st, 0);
        pid = -1;
        return -1;
      }
      std::this_thread::sleep_for(10ms);
    }
    pid = -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }
  std::string output() const {
    std::ifstream f(log);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }
  ~Proc() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      int st;
      ::waitpid(pid, &st, 0);
    }
  }
};

inline Proc start(std::vector<std::string> args) {
  Proc p;
  char tmpl[] = "/tmp/ws_e2e_XXXXXX";
  const int fd = ::mkstemp(tmpl);
  p.log = tmpl;
  std::fflush(nullptr);
  p.pid = ::fork();
  if (p.pid == 0) {
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(fd);
  return p;
}

//! Starts the demo server on 127.0.0.1:`port` (plus `extra` options) and waits until it answers.
inline Proc start_server(int port, std::vector<std::string> extra = {}) {
  std::vector<std::string> args{WEIGHTSYNC_DEMO_SERVER, "--port", std::to_string(port)};
  args.insert(args.end(), extra.begin(), extra.end());
  Proc p = start(std::move(args));
  ws::http::VllmClient c("http://127.0.0.1:" + std::to_string(port), 2s);
  for (int i = 0; i < 200; ++i) {  // wait until it answers
    try {
      (void)c.weight_version();
      return p;
    } catch (const ws::error&) {
      std::this_thread::sleep_for(25ms);
    }
  }
  FAIL("the inference server did not come up:\n" << p.output());
  return p;
}

}  // namespace ws_e2e
