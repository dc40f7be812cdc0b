// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! Another program (or this test binary again) as a child process whose stdout and stderr go to a
//! log file; every wait is bounded, and a child still running when its Child is destroyed is
//! killed. fork + exec: no CUDA state crosses the fork.

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace ws_test {

//! Environment variables set (or replaced) in a child, on top of this process's environment.
using EnvVars = std::vector<std::pair<std::string, std::string>>;

class Child {
 public:
  //! Starts `argv[0]` (a path, or a name looked up in PATH) with `argv`. `log`: the output file,
  //! truncated; one ending in XXXXXX is a template for a new temporary file, removed with the
  //! Child. `env`: variables set in the child (replacing this process's values of them).
  Child(const std::vector<std::string>& argv, std::string log, const EnvVars& env = {})
      : log_(std::move(log)) {
    int fd = -1;
    if (log_.size() >= 6 && log_.compare(log_.size() - 6, 6, "XXXXXX") == 0) {
      fd = ::mkstemp(log_.data());
      temporary_ = true;
    } else {
      fd = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    }
    if (fd < 0) throw std::runtime_error("cannot create the log " + log_);
    std::vector<const char*> args;
    for (const auto& a : argv) args.push_back(a.c_str());
    args.push_back(nullptr);
    // The child's environment, built before fork (nothing but async-signal-safe calls after it).
    std::vector<std::string> env_strings;
    for (char** e = environ; *e; ++e) {
      const char* eq = std::strchr(*e, '=');
      const std::string name(*e, eq ? static_cast<std::size_t>(eq - *e) : std::strlen(*e));
      bool replaced = false;
      for (const auto& [k, v] : env) replaced = replaced || k == name;
      if (!replaced) env_strings.emplace_back(*e);
    }
    for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
    std::vector<char*> envp;
    for (auto& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::fflush(nullptr);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::execvpe(args[0], const_cast<char* const*>(args.data()), envp.data());
      ::_exit(127);
    }
    ::close(fd);
    if (pid_ < 0) throw std::runtime_error("fork");
  }
  Child(Child&& o) noexcept
      : pid_(std::exchange(o.pid_, -1)),
        status_(o.status_),
        log_(std::move(o.log_)),
        temporary_(std::exchange(o.temporary_, false)) {}
  Child& operator=(Child&&) = delete;
  Child(const Child&) = delete;
  ~Child() {
    kill_and_reap();
    if (temporary_) ::unlink(log_.c_str());
  }

  //! Its process id while it runs (-1 once reaped).
  pid_t pid() const noexcept { return pid_; }
  //! Whether it has exited (reaps it then; does not wait).
  bool poll() {
    if (pid_ < 0) return true;
    if (::waitpid(pid_, &status_, WNOHANG) != pid_) return false;
    pid_ = -1;
    return true;
  }
  //! After poll() said it exited: its exit code, or -1 when a signal ended it.
  int exit_code() const { return WIFEXITED(status_) ? WEXITSTATUS(status_) : -1; }
  //! Waits up to `limit`: the exit code, 128 + the signal that ended it, or -1 when it was still
  //! running then (it is killed).
  int wait(std::chrono::milliseconds limit) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (!poll()) {
      if (std::chrono::steady_clock::now() > end) {
        kill_and_reap();
        return -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return WIFEXITED(status_) ? WEXITSTATUS(status_) : 128 + WTERMSIG(status_);
  }
  //! Sends `sig` while it runs (SIGKILL: killed mid-transfer).
  void kill(int sig = SIGKILL) {
    if (pid_ > 0) ::kill(pid_, sig);
  }
  //! SIGKILLs it if it still runs and reaps it.
  void kill_and_reap() noexcept {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, &status_, 0);
    pid_ = -1;
  }
  //! Everything it wrote so far.
  std::string output() const {
    std::ifstream f(log_);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }

 private:
  pid_t pid_ = -1;
  int status_ = 0;
  std::string log_;
  bool temporary_ = false;
};

}  // namespace ws_test
