// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! Real processes for the multi-process tests. fork() runs a function in a child whose outcome
//! (the type of the exception it threw, if any, and its message) comes back through a pipe; the
//! parent enforces a deadline and kills what is left. CPU tests only: CUDA does not survive fork,
//! so GPU tests re-run their own binary instead (gpu/gpu_process.hpp).

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
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
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "weightsync/error.hpp"

namespace ws_test {

//! What a child's function threw, by weightsync error type.
enum class Outcome {
  ok,
  config,
  protocol,
  timeout,
  peer,
  remote,
  state,
  system,
  other_ws,
  std_exc,
  unknown,
  killed,
  hung
};

inline const char* outcome_name(Outcome o) {
  static const char* names[] = {"ok",
                                "config_error",
                                "protocol_error",
                                "timeout_error",
                                "peer_error",
                                "remote_error",
                                "state_error",
                                "system_error",
                                "weightsync::error",
                                "std::exception",
                                "unknown",
                                "killed",
                                "hung"};
  return names[static_cast<int>(o)];
}

struct Result {
  Outcome outcome = Outcome::unknown;
  std::string message;
  double seconds = 0;  //!< from spawn to exit
};

inline Outcome classify(std::exception_ptr e, std::string& msg) {
  try {
    std::rethrow_exception(e);
  } catch (const weightsync::config_error& x) {
    msg = x.what();
    return Outcome::config;
  } catch (const weightsync::protocol_error& x) {
    msg = x.what();
    return Outcome::protocol;
  } catch (const weightsync::timeout_error& x) {
    msg = x.what();
    return Outcome::timeout;
  } catch (const weightsync::peer_error& x) {
    msg = x.what();
    return Outcome::peer;
  } catch (const weightsync::remote_error& x) {
    msg = x.what();
    return Outcome::remote;
  } catch (const weightsync::state_error& x) {
    msg = x.what();
    return Outcome::state;
  } catch (const weightsync::system_error& x) {
    msg = x.what();
    return Outcome::system;
  } catch (const weightsync::error& x) {
    msg = x.what();
    return Outcome::other_ws;
  } catch (const std::exception& x) {
    msg = x.what();
    return Outcome::std_exc;
  } catch (...) {
    msg = "unknown exception";
    return Outcome::unknown;
  }
}

//! A free TCP port on 127.0.0.1 for a rendezvous. Chosen at random below Linux's ephemeral range
//! (32768-60999): a port the kernel hands out for outgoing connections could be taken by some
//! other test's client socket before our rank 0 binds it (seen as a rare rendezvous timeout under
//! parallel ctest). Checked bindable; parallel tests collide with probability ~1/12000.
inline int free_port() {
  static std::mt19937 rng(std::random_device{}() ^ static_cast<unsigned>(::getpid()));
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int port = 20000 + static_cast<int>(rng() % 12000);
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(fd);
    if (ok) return port;
  }
  throw std::runtime_error("no free port in 20000..31999");
}

//! WEIGHTSYNC_TEST_SMALL=1 (scripts/sanitize.sh tsan sets it): the tests whose deadlines assume
//! native speed use smaller models, so that making the model does not eat the deadline.
inline bool small_models() {
  const char* v = std::getenv("WEIGHTSYNC_TEST_SMALL");
  return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
}

class Processes {
 public:
  using Clock = std::chrono::steady_clock;
  Processes() = default;
  Processes(const Processes&) = delete;
  Processes& operator=(const Processes&) = delete;
  ~Processes() { kill_all(); }

  //! Runs `fn` in a new process; returns its index.
  std::size_t spawn(std::function<void()> fn) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("fork");
    if (pid == 0) {
      ::close(p[0]);
      Outcome o = Outcome::ok;
      std::string msg;
      try {
        fn();
      } catch (...) {
        o = classify(std::current_exception(), msg);
      }
      const std::string out = std::to_string(static_cast<int>(o)) + "\n" + msg;
      (void)!::write(p[1], out.data(), out.size());
      ::close(p[1]);
      std::fflush(nullptr);
      ::_exit(0);
    }
    ::close(p[1]);
    kids_.push_back({pid, p[0], Clock::now(), {}, false});
    return kids_.size() - 1;
  }

  //! Runs `fn(rank)` for rank 0..world-1, each in a new process (index == rank when these are the
  //! first children).
  void spawn_ranks(int world, const std::function<void(int)>& fn) {
    for (int rank = 0; rank < world; ++rank) spawn([fn, rank] { fn(rank); });
  }

  //! Kills child `i` with `sig` (e.g. SIGKILL mid-transfer).
  void kill(std::size_t i, int sig = SIGKILL) { ::kill(kids_[i].pid, sig); }

  //! Waits for every child until `limit`; children still running then are killed and reported
  //! as Outcome::hung.
  std::vector<Result> wait_all(std::chrono::milliseconds limit) {
    const auto deadline = Clock::now() + limit;
    std::vector<Result> out(kids_.size());
    std::size_t left = kids_.size();
    while (left > 0) {
      for (std::size_t i = 0; i < kids_.size(); ++i) {
        auto& k = kids_[i];
        if (k.done) continue;
        int status = 0;
        const pid_t r = ::waitpid(k.pid, &status, WNOHANG);
        if (r != k.pid) continue;
        k.done = true;
        --left;
        out[i].seconds = std::chrono::duration<double>(Clock::now() - k.start).count();
        std::string buf;
        char tmp[4096];
        ssize_t n;
        while ((n = ::read(k.fd, tmp, sizeof tmp)) > 0)
          buf.append(tmp, static_cast<std::size_t>(n));
        ::close(k.fd);
        if (WIFSIGNALED(status) || buf.empty()) {
          out[i].outcome = Outcome::killed;
          out[i].message = WIFSIGNALED(status) ? "signal " + std::to_string(WTERMSIG(status))
                                               : "exited without a report";
        } else {
          const auto nl = buf.find('\n');
          out[i].outcome = static_cast<Outcome>(std::stoi(buf.substr(0, nl)));
          out[i].message = buf.substr(nl + 1);
        }
      }
      if (left == 0) break;
      if (Clock::now() >= deadline) {
        for (std::size_t i = 0; i < kids_.size(); ++i) {
          auto& k = kids_[i];
          if (k.done) continue;
          int status = 0;
          ::kill(k.pid, SIGKILL);
          ::waitpid(k.pid, &status, 0);
          ::close(k.fd);
          k.done = true;
          out[i].outcome = Outcome::hung;
          out[i].message = "still running at the test's deadline";
          out[i].seconds = std::chrono::duration<double>(Clock::now() - k.start).count();
        }
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return out;
  }

 private:
  struct Kid {
    pid_t pid;
    int fd;
    Clock::time_point start;
    std::string buf;
    bool done;
  };
  void kill_all() noexcept {
    for (auto& k : kids_)
      if (!k.done) {
        ::kill(k.pid, SIGKILL);
        int st;
        ::waitpid(k.pid, &st, 0);
        ::close(k.fd);
        k.done = true;
      }
  }
  std::vector<Kid> kids_;
};

//! Counters in memory shared with the children forked after it (an anonymous MAP_SHARED mapping):
//! a child counts what it has done (say, rounds completed) and the parent reads it, e.g. to kill a
//! rank only once every rank has completed a round, so that the kill lands mid-sync and not in the
//! rendezvous.
class SharedCounters {
 public:
  using Counter = std::atomic<long>;
  static_assert(Counter::is_always_lock_free, "a lock-free atomic works across processes");

  explicit SharedCounters(std::size_t n) : n_(n) {
    void* p = ::mmap(nullptr, bytes(), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("mmap of the shared counters");
    c_ = static_cast<Counter*>(p);
    for (std::size_t i = 0; i < n_; ++i) new (&c_[i]) Counter(0);
  }
  SharedCounters(const SharedCounters&) = delete;
  SharedCounters& operator=(const SharedCounters&) = delete;
  ~SharedCounters() { ::munmap(c_, bytes()); }

  Counter& operator[](std::size_t i) { return c_[i]; }
  //! The smallest counter now.
  long min() const {
    long m = n_ ? c_[0].load() : 0;
    for (std::size_t i = 1; i < n_; ++i) m = std::min(m, c_[i].load());
    return m;
  }
  //! Waits until every counter is >= v, at most `limit`; @returns whether they all got there.
  bool wait_all_at_least(long v, std::chrono::milliseconds limit) const {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (min() < v) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
  }

 private:
  std::size_t bytes() const { return (n_ ? n_ : 1) * sizeof(Counter); }
  std::size_t n_;
  Counter* c_ = nullptr;
};

}  // namespace ws_test
