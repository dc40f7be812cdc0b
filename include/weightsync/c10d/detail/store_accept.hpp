// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! TcpStoreServer's door: the listening socket, accepting without ever spinning when the process
//! is out of file descriptors (a spare descriptor answers the waiting peer, then accepting pauses
//! until a connection is pending again), refusing a connection with a reason its client can read
//! (kRefusedPrefix), and log lines that a flood cannot multiply (LogLimiter).

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

#include "weightsync/c10d/wire.hpp"
#include "weightsync/detail/format.hpp"
#include "weightsync/detail/socket.hpp"
#include "weightsync/log.hpp"

namespace weightsync::detail::c10d {

//! One kind of log line, at most `burst` of them in each `every`; the first line logged after
//! some were left out says how many.
class LogLimiter {
 public:
  explicit LogLimiter(std::size_t burst = 1,
                      std::chrono::milliseconds every = std::chrono::seconds(5))
      : burst_(burst), every_(every) {}
  //! Logs make() when the window has room, else counts the line as left out.
  template <class Make>
  void log(LogLevel level, Make&& make) {
    const auto now = Clock::now();
    if (now - start_ >= every_) {
      start_ = now;
      in_window_ = 0;
    }
    if (in_window_ >= burst_) {
      ++skipped_;
      return;
    }
    ++in_window_;
    std::string m = make();
    if (skipped_ > 0) m += cat(" (", skipped_, " more like this before it were not logged)");
    skipped_ = 0;
    weightsync::log(level, m);
  }

 private:
  std::size_t burst_;
  std::chrono::milliseconds every_;
  Clock::time_point start_{};
  std::size_t in_window_ = 0, skipped_ = 0;
};

//! "host:port" of an accepted peer.
inline std::string peer_name(const sockaddr_storage& ss) {
  char host[INET6_ADDRSTRLEN] = {};
  int port = 0;
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    ::inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
    port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    ::inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
    port = ntohs(a->sin6_port);
  }
  return cat(host, ":", port);
}

//! Tells a connection it is refused (kRefusedPrefix, `why`, a newline) and closes it. What it sent
//! already is read first, so that the close is a FIN behind the reason, not a reset before it.
inline void refuse_connection(Fd fd, std::string_view why) {
  std::string m(kRefusedPrefix);
  m.append(why).push_back('\n');
  [[maybe_unused]] const auto k = ::send(fd.get(), m.data(), m.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  char buf[4096];
  for (int i = 0; i < 4 && ::recv(fd.get(), buf, sizeof buf, MSG_DONTWAIT) > 0; ++i) {
  }
}

//! The listening socket. accept() never loops on EMFILE: with no descriptor left, the spare one
//! is freed to accept the waiting peer, refuse it and close it, then taken back; when nobody is
//! waiting the turn ends; when the spare cannot be taken back, accepting pauses for `backoff`.
class StoreListener {
 public:
  StoreListener(const std::string& host, int port, std::size_t max_connections,
                std::chrono::milliseconds backoff)
      : fd_(listen_tcp(host, port)), max_connections_(max_connections), backoff_(backoff) {
    port_ = local_port(fd_.get());
    spare_ = Fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    warn_if_near_fd_limit();
  }

  int fd() const { return fd_.get(); }
  int port() const { return port_; }
  //! When accepting may resume (the past when it is not paused).
  Clock::time_point paused_until() const { return paused_until_; }
  std::size_t fd_refused() const { return fd_refused_.load(); }
  void close() { fd_.reset(); }

  //! Accepts one waiting connection (its peer's name in `peer`); an empty Fd when the turn is over:
  //! nobody waits, or the descriptors ran out (the waiting peer was refused and closed).
  Fd accept(std::string& peer, bool& more) {
    more = false;
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    Fd fd(
        ::accept4(fd_.get(), reinterpret_cast<sockaddr*>(&ss), &len, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (fd) {
      peer = peer_name(ss);
      more = true;
      return fd;
    }
    const int err = errno;
    if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) more = shed(err);
    return fd;  // EAGAIN, or a connection that went away before it was accepted
  }

 private:
  //! Warns when max_connections is near or above the descriptor limit (at start).
  void warn_if_near_fd_limit() const {
    rlimit rl{};
    if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        max_connections_ + 64 > rl.rlim_cur)
      weightsync::log(
          LogLevel::warning,
          cat("TCPStore server: max_connections ", max_connections_,
              " is near or above this process's descriptor limit (RLIMIT_NOFILE soft limit ",
              static_cast<long long>(rl.rlim_cur),
              "): connections past it are closed at once; raise `ulimit -n` or lower "
              "max_connections"));
  }

  //! accept4 failed for want of descriptors: frees the spare to accept the waiting peer, refuses
  //! it, takes the spare back. Returns whether to go on accepting in this turn (a peer was shed
  //! and the spare is back); without the spare, pauses accepting for the backoff.
  bool shed(int err) {
    shortage_log_.log(LogLevel::error, [&] {
      rlimit rl{};
      ::getrlimit(RLIMIT_NOFILE, &rl);
      return cat("TCPStore server: cannot accept connections: ", errno_string(err),
                 " (max_connections ", max_connections_, ", RLIMIT_NOFILE soft limit ",
                 static_cast<long long>(rl.rlim_cur),
                 "); new connections are refused at once until descriptors free up (raise "
                 "`ulimit -n` or lower max_connections)");
    });
    bool shed_one = false;
    if (spare_) {
      spare_.reset();
      Fd fd(::accept4(fd_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
      if (fd) {
        ++fd_refused_;
        shed_one = true;
        refuse_connection(std::move(fd), "the server is out of file descriptors");
      }
      spare_ = Fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
      if (spare_) return shed_one;
    }
    paused_until_ = Clock::now() + backoff_;
    return false;
  }

  Fd fd_;
  int port_ = 0;
  std::size_t max_connections_;
  std::chrono::milliseconds backoff_;
  Fd spare_;  //!< held so that an accept without descriptors can still answer its peer
  Clock::time_point paused_until_{};
  std::atomic<std::size_t> fd_refused_{0};
  LogLimiter shortage_log_;
};

}  // namespace weightsync::detail::c10d
