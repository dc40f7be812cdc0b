// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! TCP plumbing for the rendezvous and the host transport: an owning descriptor, deadlines, and
//! send/recv/connect/accept that never block past their deadline. POSIX only.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "weightsync/detail/format.hpp"
#include "weightsync/tuning.hpp"
#include "weightsync/error.hpp"

namespace weightsync::detail {

using Clock = std::chrono::steady_clock;

//! Set by an embedding runtime to end every wait of this process at once (the Python binding's
//! Ctrl-C, python/src/core.cpp): every Deadline then counts as expired, so a wait that the signal
//! woke (EINTR) gives up as at its deadline and the transfer fails as after any timeout. Whoever
//! sets it clears it.
inline std::atomic<bool>& waits_interrupted() noexcept {
  static std::atomic<bool> flag{false};
  return flag;
}

//! A point in time after which a wait gives up.
struct Deadline {
  Clock::time_point at;

  static Deadline after(std::chrono::milliseconds d) { return {Clock::now() + d}; }
  bool expired() const {
    return waits_interrupted().load(std::memory_order_relaxed) || Clock::now() >= at;
  }
  //! Milliseconds left, clamped to [0, INT_MAX], for poll().
  int poll_ms() const {
    if (waits_interrupted().load(std::memory_order_relaxed)) return 0;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(at - Clock::now());
    if (left.count() <= 0) return 0;
    return static_cast<int>(std::min<std::int64_t>(left.count() + 1, 1 << 30));
  }
};

inline std::string errno_string(int err) {
  return cat(std::strerror(err), " (errno ", err, ")");
}

//! Owning file descriptor. Move-only; -1 is the empty state.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) noexcept : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    Fd tmp(std::move(o));
    std::swap(fd_, tmp.fd_);
    return *this;
  }
  ~Fd() { reset(); }

  int get() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }
  int release() noexcept { return std::exchange(fd_, -1); }
  void reset() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  //! Half-closes both directions so a peer blocked on us wakes up at once; keeps the descriptor.
  void shutdown() noexcept {
    if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
  }

 private:
  int fd_ = -1;
};

inline void set_nonblocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
    throw system_error("fcntl(O_NONBLOCK): " + errno_string(errno), errno);
}

inline void set_socket_options(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
}

struct AddrInfoDeleter {
  void operator()(addrinfo* p) const noexcept { ::freeaddrinfo(p); }
};

inline std::unique_ptr<addrinfo, AddrInfoDeleter> resolve(const std::string& host, int port,
                                                          bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  const int rc =
      ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0)
    throw config_error("master_address", cat("cannot resolve '", host, "': ", ::gai_strerror(rc)));
  return std::unique_ptr<addrinfo, AddrInfoDeleter>(res);
}

//! Listens on host:port (port 0: any free port). EADDRINUSE is a config_error naming the port.
inline Fd listen_tcp(const std::string& host, int port, int backlog = 128) {
  auto res = resolve(host, port, true);
  int last_err = 0;
  for (addrinfo* ai = res.get(); ai; ai = ai->ai_next) {
    Fd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
    if (!fd) {
      last_err = errno;
      continue;
    }
    // No SO_REUSEADDR: a port held by a live listener must fail loudly, not be shared.
    if (::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd.get(), backlog) != 0) {
      last_err = errno;
      continue;
    }
    set_nonblocking(fd.get());
    return fd;
  }
  if (last_err == EADDRINUSE)
    throw config_error("master_port",
                       cat(host, ":", port, " is already in use (", errno_string(last_err), ")"));
  throw system_error(cat("cannot listen on ", host, ":", port, ": ", errno_string(last_err)),
                     last_err);
}

//! The port a bound socket listens on.
inline int local_port(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0)
    throw system_error("getsockname: " + errno_string(errno), errno);
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
}

//! The local address a connected socket uses (how peers can reach this host).
inline std::string local_address(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0)
    throw system_error("getsockname: " + errno_string(errno), errno);
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET)
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&ss)->sin_addr, buf, sizeof buf);
  else
    ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&ss)->sin6_addr, buf, sizeof buf);
  return buf;
}

//! Connects to host:port, retrying refused connections until `deadline` (the listener may not
//! be up yet). @throws timeout_error naming `phase` and `peer`; when every attempt was refused,
//! it says "nothing listening at host:port (N refused connects in T s)".
inline Fd connect_tcp(const std::string& host, int port, Deadline deadline,
                      const std::string& phase, int peer) {
  std::string last = "no attempt";
  auto backoff = Tuning::Connect::first_backoff;
  const auto started = Clock::now();
  std::size_t attempts = 0, refused = 0;
  while (true) {
    auto res = resolve(host, port, false);
    for (addrinfo* ai = res.get(); ai; ai = ai->ai_next) {
      Fd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
      if (!fd) {
        last = errno_string(errno);
        continue;
      }
      set_nonblocking(fd.get());
      int rc = ::connect(fd.get(), ai->ai_addr, ai->ai_addrlen);
      if (rc != 0 && errno == EINPROGRESS) {
        pollfd p{fd.get(), POLLOUT, 0};
        rc = ::poll(&p, 1, deadline.poll_ms());
        if (rc == 1) {
          int err = 0;
          socklen_t len = sizeof err;
          ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
          rc = err == 0 ? 0 : -1;
          errno = err;
        } else {
          rc = -1;
          errno = ETIMEDOUT;
        }
      }
      if (rc == 0) {
        set_socket_options(fd.get());
        return fd;
      }
      ++attempts;
      if (errno == ECONNREFUSED) ++refused;
      last = errno_string(errno);
    }
    if (deadline.expired()) {
      if (attempts > 0 && refused == attempts) {
        const double s = std::chrono::duration<double>(Clock::now() - started).count();
        throw timeout_error(phase, peer,
                            cat("nothing listening at ", host, ":", port, " (", refused,
                                " refused connects in ",
                                s >= 10 ? std::round(s) : std::round(s * 10) / 10, " s)"));
      }
      throw timeout_error(
          phase, peer, cat("could not connect to ", host, ":", port, " (last error: ", last, ")"));
    }
    std::this_thread::sleep_for(std::min<std::chrono::milliseconds>(
        backoff, std::chrono::milliseconds(std::max(1, deadline.poll_ms()))));
    backoff = std::min(backoff * 2, Tuning::Connect::max_backoff);
  }
}

//! Accepts one connection or returns an empty Fd when `deadline` passes first.
inline Fd accept_tcp(int listen_fd, Deadline deadline) {
  while (true) {
    pollfd p{listen_fd, POLLIN, 0};
    const int rc = ::poll(&p, 1, deadline.poll_ms());
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) return Fd{};
    Fd fd(::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (fd) {
      set_socket_options(fd.get());
      return fd;
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED)
      throw system_error("accept: " + errno_string(errno), errno);
    if (deadline.expired()) return Fd{};
  }
}

//! Sends all `n` bytes before `deadline`. @throws peer_error on a closed/reset connection,
//! timeout_error when the peer stops reading.
inline void send_all(int fd, const void* data, std::size_t n, Deadline deadline,
                     const std::string& phase, int peer) {
  auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k > 0) {
      p += k;
      n -= static_cast<std::size_t>(k);
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd pf{fd, POLLOUT, 0};
      const int rc = ::poll(&pf, 1, deadline.poll_ms());
      if (rc == 0 || (rc < 0 && errno != EINTR && deadline.expired()))
        throw timeout_error(phase, peer,
                            cat("rank ", peer, " stopped reading (", n, " bytes still to send)"));
      if (deadline.expired() && !(pf.revents & POLLOUT))
        throw timeout_error(phase, peer, cat("rank ", peer, " stopped reading"));
      continue;
    }
    throw peer_error(peer, cat(phase, ": connection to rank ", peer,
                               " lost while sending: ", errno_string(errno)));
  }
}

//! Receives exactly `n` bytes before `deadline`. @throws peer_error on EOF or reset,
//! timeout_error when nothing arrives in time.
inline void recv_all(int fd, void* data, std::size_t n, Deadline deadline, const std::string& phase,
                     int peer) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t k = ::recv(fd, p, n, 0);
    if (k > 0) {
      p += k;
      n -= static_cast<std::size_t>(k);
      continue;
    }
    if (k == 0)
      throw peer_error(peer, cat(phase, ": rank ", peer, " closed the connection (", n,
                                 " bytes still expected; did it exit or abort?)"));
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      pollfd pf{fd, POLLIN, 0};
      const int rc = ::poll(&pf, 1, deadline.poll_ms());
      if (rc == 0)
        throw timeout_error(
            phase, peer,
            cat("nothing from rank ", peer, " before the deadline (", n, " bytes still expected)"));
      continue;
    }
    throw peer_error(peer, cat(phase, ": connection to rank ", peer,
                               " lost while receiving: ", errno_string(errno)));
  }
}

//! One non-blocking send of `an` bytes at `a` then `bn` at `b` (one sendmsg; `b` may be empty),
//! advancing both past what went. @returns what ::sendmsg returned.
inline ssize_t send_two(int fd, const char*& a, std::size_t& an, const char*& b, std::size_t& bn) {
  iovec iov[2] = {{const_cast<char*>(a), an}, {const_cast<char*>(b), bn}};
  msghdr m{};
  m.msg_iov = iov;
  m.msg_iovlen = bn > 0 ? 2 : 1;
  const ssize_t k = ::sendmsg(fd, &m, MSG_NOSIGNAL);
  if (k > 0) {
    auto left = static_cast<std::size_t>(k);
    const std::size_t first = std::min(left, an);
    a += first;
    an -= first;
    left -= first;
    b += left;
    bn -= left;
  }
  return k;
}

//! Sends `an` bytes at `a`, then `bn` at `b`, on `fd` before `deadline`: in one call while both
//! remain, so that they arrive together (a header and the bytes it announces: the reader wakes
//! once). @throws as send_all.
inline void send_all2(int fd, const void* a, std::size_t an, const void* b, std::size_t bn,
                      Deadline deadline, const std::string& phase, int peer) {
  auto* ap = static_cast<const char*>(a);
  auto* bp = static_cast<const char*>(b);
  while (an > 0 && bn > 0) {
    const ssize_t k = send_two(fd, ap, an, bp, bn);
    if (k > 0) continue;
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd pf{fd, POLLOUT, 0};
      const int rc = ::poll(&pf, 1, deadline.poll_ms());
      if (rc == 0 || (rc < 0 && errno != EINTR && deadline.expired()))
        throw timeout_error(phase, peer, cat("rank ", peer, " stopped reading (", an + bn,
                                             " bytes still to send)"));
      continue;
    }
    throw peer_error(peer, cat(phase, ": connection to rank ", peer,
                               " lost while sending: ", errno_string(errno)));
  }
  send_all(fd, ap, an, deadline, phase, peer);
  send_all(fd, bp, bn, deadline, phase, peer);
}

//! Sends a header and a body on `out` (`sh`/`shn`, then `sb`/`sbn`) while receiving a header of
//! `rhn` bytes into `rh` on `in`, then the body that `body(rh)` names once that header is in: a
//! {pointer, size} pair, or a throw (a header that says the peer disagrees). Both before
//! `deadline`, each side whichever is ready first: two ranks that send to each other at once never
//! wait for each other's reads, and the body follows its header without waiting for the peer's
//! (one latency, not two). @throws as send_all and recv_all, naming `out_peer`/`in_peer`.
template <class Body>
void send_recv_framed(int out, const void* sh, std::size_t shn, const void* sb, std::size_t sbn,
                      int in, void* rh, std::size_t rhn, Body&& body, Deadline deadline,
                      const std::string& phase, int out_peer, int in_peer) {
  const char* sp = static_cast<const char*>(sh);
  std::size_t sn = shn;
  const char* next_sp = static_cast<const char*>(sb);
  std::size_t next_sn = sbn;
  char* rp = static_cast<char*>(rh);
  std::size_t rn = rhn;
  bool header_in = false;
  const auto advance = [&] {  // the next segment of each direction, once one is done
    if (sn == 0 && next_sn > 0) {
      sp = next_sp;
      sn = std::exchange(next_sn, 0);
    }
    if (rn == 0 && !header_in) {
      header_in = true;
      const auto [p, n] = body(static_cast<const void*>(rh));
      rp = static_cast<char*>(p);
      rn = n;
    }
  };
  advance();
  while (sn > 0 || rn > 0) {
    bool progressed = false;
    if (sn > 0) {
      // The header and the body in one call while both remain: they arrive together, and the
      // peer wakes once for them.
      const ssize_t k = send_two(out, sp, sn, next_sp, next_sn);
      if (k > 0) {
        progressed = true;
      } else if (k < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
        throw peer_error(out_peer, cat(phase, ": connection to rank ", out_peer,
                                       " lost while sending: ", errno_string(errno)));
      }
    }
    if (rn > 0) {
      const ssize_t k = ::recv(in, rp, rn, 0);
      if (k > 0) {
        rp += k;
        rn -= static_cast<std::size_t>(k);
        progressed = true;
      } else if (k == 0) {
        throw peer_error(in_peer, cat(phase, ": rank ", in_peer, " closed the connection (", rn,
                                      " bytes still expected; did it exit or abort?)"));
      } else if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
        throw peer_error(in_peer, cat(phase, ": connection to rank ", in_peer,
                                      " lost while receiving: ", errno_string(errno)));
      }
    }
    advance();
    if (progressed || (sn == 0 && rn == 0)) continue;
    pollfd pf[2] = {{out, static_cast<short>(sn > 0 ? POLLOUT : 0), 0},
                    {in, static_cast<short>(rn > 0 ? POLLIN : 0), 0}};
    const int rc = ::poll(pf, 2, deadline.poll_ms());
    if (rc == 0 || (rc < 0 && errno != EINTR && deadline.expired())) {
      if (rn > 0)
        throw timeout_error(phase, in_peer,
                            cat("nothing from rank ", in_peer, " before the deadline (", rn,
                                " bytes still expected)"));
      throw timeout_error(
          phase, out_peer,
          cat("rank ", out_peer, " stopped reading (", sn, " bytes still to send)"));
    }
  }
}

//! Sends `sn` bytes on `out` while receiving `rn` bytes on `in`, both before `deadline`, whichever
//! is ready first: two ranks that send to each other at once never wait for each other's reads
//! (a ring step of an allgather). @throws as send_all and recv_all, naming `out_peer`/`in_peer`.
inline void send_recv_all(int out, const void* sdata, std::size_t sn, int in, void* rdata,
                          std::size_t rn, Deadline deadline, const std::string& phase, int out_peer,
                          int in_peer) {
  send_recv_framed(
      out, sdata, sn, nullptr, 0, in, rdata, rn,
      [](const void*) { return std::pair<void*, std::size_t>{nullptr, 0}; }, deadline, phase,
      out_peer, in_peer);
}

//! True when the connection has been closed or reset by the peer; never consumes data.
inline bool peer_closed(int fd) {
  pollfd pf{fd, POLLIN, 0};
  if (::poll(&pf, 1, 0) <= 0) return false;
  if (pf.revents & (POLLERR | POLLHUP)) return true;
  char c;
  const ssize_t k = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

}  // namespace weightsync::detail
