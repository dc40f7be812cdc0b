// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! A c10d TCPStore server: what `torch.distributed.TCPStore(host, port, is_master=True)` runs, so
//! that Python ranks (torch >= 2.1, and 2.0 / 1.13 without the handshake) can join a store a C++
//! process hosts. One background thread polls the listener and every connection; all sockets are
//! non-blocking, replies are queued per connection, and each connection is bounded (TcpStoreLimits:
//! lengths, request and reply sizes; an incomplete request older than `request_timeout`; its
//! pending output), and so is the whole server (`max_total_bytes`: stored data, half-sent requests
//! and queued replies together). A connection that breaks a rule, or whose request fails on the
//! server, is dropped with a logged reason; the server keeps serving the others. Fairness: a
//! connection's requests are read in bounded turns, and not at all while more than
//! `pause_reading_above` bytes of its replies wait to be sent. Idle connections are evicted when
//! the server is full (`idle_timeout_when_full`) and, optionally, always (`idle_timeout`). When
//! the process runs out of file descriptors, new connections are accepted and closed at once
//! (a reserved spare descriptor), with the reason logged at most every few seconds.

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <exception>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "weightsync/c10d/detail/store_engine.hpp"
#include "weightsync/detail/format.hpp"
#include "weightsync/detail/socket.hpp"
#include "weightsync/error.hpp"
#include "weightsync/log.hpp"

namespace weightsync {

struct TcpStoreServerOptions {
  std::string host = "127.0.0.1";  //!< address to listen on ("0.0.0.0": every interface)
  int port = 0;                    //!< 0: any free port (see TcpStoreServer::port())
  TcpStoreLimits limits;
  //! Also serve clients without the VALIDATE handshake (torch 2.0 and 1.13).
  bool accept_torch1_13 = true;
  //! A connection that leaves a request incomplete this long is dropped (truncated request).
  std::chrono::milliseconds request_timeout{30000};
  std::size_t max_pending_output = 64u << 20;  //!< per connection; a peer that stops reading
  //! While more than this many bytes of a connection's replies wait to be sent, its requests are
  //! not read (so a peer that never reads its replies costs the others nothing).
  std::size_t pause_reading_above = 4u << 20;
  //! One budget for the whole server: stored data + half-sent requests + queued replies. A read
  //! that would take the server over it drops that connection (logged). 0: no budget.
  std::size_t max_total_bytes = std::size_t(2) << 30;
  //! When max_connections are open, a new connection evicts the connection silent the longest if
  //! it has been silent at least this long (no request in progress, no WAIT pending, no reply
  //! queued). 0: never evict.
  std::chrono::milliseconds idle_timeout_when_full{10000};
  //! A connection silent this long (no request in progress, no WAIT pending, no reply queued) is
  //! closed even when the server is not full. 0 (the default): never; torch's ranks keep their
  //! store connection open and silent between uses for the life of the group.
  std::chrono::milliseconds idle_timeout{0};
  //! After accept fails for want of file descriptors (EMFILE/ENFILE) and the spare descriptor
  //! could not absorb it, the listener is not polled for this long (no busy loop).
  std::chrono::milliseconds accept_backoff{100};
};

class TcpStoreServer {
 public:
  //! Listens at once (so the port is known and connections queue) and starts serving.
  //! @throws config_error("master_port") when the port is taken.
  explicit TcpStoreServer(TcpStoreServerOptions o = {})
      : o_(std::move(o)), engine_(o_.limits, o_.accept_torch1_13) {
    listener_ = detail::listen_tcp(o_.host, o_.port);
    port_ = detail::local_port(listener_.get());
    int p[2];
    if (::pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0)
      throw system_error("pipe2: " + detail::errno_string(errno), errno);
    wake_r_ = detail::Fd(p[0]);
    wake_w_ = detail::Fd(p[1]);
    spare_ = detail::Fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    warn_if_near_fd_limit();
    thread_ = std::thread([this] { run(); });
  }
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;
  ~TcpStoreServer() { stop(); }

  int port() const noexcept { return port_; }
  //! Connections dropped for breaking the protocol (for tests and monitoring).
  std::size_t refused() const noexcept { return refused_.load(); }
  //! Connections closed for being idle (evicted when full, or past idle_timeout).
  std::size_t idle_closed() const noexcept { return idle_closed_.load(); }
  //! Connections accepted and closed at once because the process had no file descriptor left.
  std::size_t fd_refused() const noexcept { return fd_refused_.load(); }

  //! Stops serving and closes every connection. Idempotent, noexcept.
  void stop() noexcept {
    if (!thread_.joinable()) return;
    const char b = 1;
    [[maybe_unused]] auto k = ::write(wake_w_.get(), &b, 1);
    thread_.join();
  }

 private:
  using Clock = std::chrono::steady_clock;
  struct Conn {
    detail::Fd fd;
    std::deque<std::string> out;  //!< replies to send, front first (no copy, no erase of a prefix)
    std::size_t out_off = 0;      //!< bytes of out.front() already sent
    std::size_t out_bytes = 0;    //!< unsent bytes in `out`
    std::string peer;
    detail::Deadline partial_since{};
    bool partial = false;
    bool read_closed = false;  //!< the peer half-closed: flush the replies, then close
    std::size_t in_bytes = 0;  //!< what the engine holds of its incomplete request
    Clock::time_point last_active = Clock::now();
  };

  std::size_t total_bytes() const { return engine_.stored_bytes() + in_total_ + out_total_; }

  void drop(int id, const std::string& why) {
    auto it = conns_.find(id);
    if (it == conns_.end()) return;
    if (!why.empty()) {
      ++refused_;
      log(LogLevel::warning,
          detail::cat("TCPStore server: dropped the connection from ", it->second.peer, ": ", why));
    }
    in_total_ -= it->second.in_bytes;
    out_total_ -= it->second.out_bytes;
    engine_.close(id);
    conns_.erase(it);
  }

  bool idle(const Conn& c, int id) const {
    return !c.partial && c.out_bytes == 0 && !engine_.waiting(id);
  }

  //! At max_connections: closes the connection idle the longest if it has been idle at least
  //! idle_timeout_when_full. Returns whether one was closed.
  bool evict_idle(const std::string& for_peer) {
    if (o_.idle_timeout_when_full.count() <= 0) return false;
    const auto now = Clock::now();
    int best = -1;
    Clock::time_point oldest = now - o_.idle_timeout_when_full;
    for (const auto& [id, c] : conns_)
      if (idle(c, id) && c.last_active <= oldest) {
        oldest = c.last_active;
        best = id;
      }
    if (best < 0) return false;
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - oldest).count();
    log(LogLevel::warning,
        detail::cat("TCPStore server: closed the connection from ", conns_.at(best).peer,
                    ": idle for ", ms, " ms while all ", o_.limits.max_connections,
                    " connections are open (idle_timeout_when_full ",
                    o_.idle_timeout_when_full.count(), " ms), to serve ", for_peer));
    ++idle_closed_;
    drop(best, "");
    return true;
  }

  //! Logs an accept that failed for want of descriptors, at most every 5 s.
  //! Warns when max_connections is near or above this process's descriptor limit (at start, and
  //! again when the descriptors ran out).
  void warn_if_near_fd_limit() const {
    rlimit rl{};
    if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        o_.limits.max_connections + 64 > rl.rlim_cur)
      log(LogLevel::warning,
          detail::cat("TCPStore server: max_connections ", o_.limits.max_connections,
                      " is near or above this process's descriptor limit (RLIMIT_NOFILE soft "
                      "limit ",
                      static_cast<long long>(rl.rlim_cur),
                      "): connections past it are closed at once; raise `ulimit -n` or lower "
                      "max_connections"));
  }
  void log_fd_shortage(int err) {
    const auto now = Clock::now();
    if (fd_log_at_ != Clock::time_point{} && now - fd_log_at_ < std::chrono::seconds(5)) return;
    fd_log_at_ = now;
    rlimit rl{};
    ::getrlimit(RLIMIT_NOFILE, &rl);
    log(LogLevel::error,
        detail::cat("TCPStore server: cannot accept connections: ", detail::errno_string(err),
                    " (open connections ", conns_.size(), ", RLIMIT_NOFILE soft limit ",
                    static_cast<long long>(rl.rlim_cur),
                    "); new connections are closed at once until descriptors free up (raise "
                    "`ulimit -n` or lower max_connections)"));
  }

  //! accept4 failed with EMFILE/ENFILE: frees the spare descriptor to accept the waiting
  //! connection and close it at once (so its client is answered, not left hanging), then takes the
  //! spare back. Without a spare, pauses accepting for accept_backoff.
  void shed_connection(int err) {
    log_fd_shortage(err);
    if (spare_) {
      spare_.reset();
      detail::Fd fd(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
      if (fd) ++fd_refused_;
      fd.reset();
      spare_ = detail::Fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
      warn_if_near_fd_limit();
      if (spare_) return;
    }
    accept_paused_until_ = Clock::now() + o_.accept_backoff;
  }

  void accept_all() {
    for (int n = 0; n < 64; ++n) {  // a bounded turn: the connections are served in between
      sockaddr_storage ss{};
      socklen_t len = sizeof ss;
      detail::Fd fd(::accept4(listener_.get(), reinterpret_cast<sockaddr*>(&ss), &len,
                              SOCK_CLOEXEC | SOCK_NONBLOCK));
      if (!fd) {
        const int err = errno;
        if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
          shed_connection(err);
          if (accept_paused_until_ > Clock::now()) return;
          continue;
        }
        return;  // EAGAIN, or a connection that went away before it was accepted
      }
      detail::set_socket_options(fd.get());
      char host[INET6_ADDRSTRLEN] = {};
      int port = 0;
      if (ss.ss_family == AF_INET) {
        auto* a = reinterpret_cast<sockaddr_in*>(&ss);
        ::inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
        port = ntohs(a->sin_port);
      } else if (ss.ss_family == AF_INET6) {
        auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
        ::inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
        port = ntohs(a->sin6_port);
      }
      const std::string peer = detail::cat(host, ":", port);
      if (conns_.size() >= o_.limits.max_connections && !evict_idle(peer)) {
        ++refused_;
        log(LogLevel::warning,
            detail::cat("TCPStore server: refused ", peer, ": ", o_.limits.max_connections,
                        " connections already open and none idle"));
        continue;
      }
      const int id = next_id_++;
      engine_.open(id);
      Conn c;
      c.fd = std::move(fd);
      c.peer = peer;
      conns_.emplace(id, std::move(c));
    }
  }

  void deliver(std::vector<detail::c10d::Reply>& replies) {
    for (auto& r : replies) {
      auto it = conns_.find(r.conn);
      if (it == conns_.end() || r.bytes.empty()) continue;
      it->second.out_bytes += r.bytes.size();
      out_total_ += r.bytes.size();
      it->second.out.push_back(std::move(r.bytes));
    }
    replies.clear();
  }

  //! Writes what is queued, without blocking; returns "" or the reason to drop the connection.
  std::string flush(Conn& c) {
    while (!c.out.empty()) {
      const std::string& b = c.out.front();
      const ssize_t k =
          ::send(c.fd.get(), b.data() + c.out_off, b.size() - c.out_off, MSG_NOSIGNAL);
      if (k > 0) {
        const auto n = static_cast<std::size_t>(k);
        c.out_off += n;
        c.out_bytes -= n;
        out_total_ -= n;
        if (c.out_off == b.size()) {
          c.out.pop_front();
          c.out_off = 0;
        }
        continue;
      }
      if (k < 0 && errno == EINTR) continue;
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      return detail::cat("send failed: ", detail::errno_string(errno));
    }
    if (c.out_bytes > o_.max_pending_output)
      return detail::cat(c.out_bytes, " bytes of replies unread (the peer stopped reading)");
    return {};
  }

  bool reading(const Conn& c) const {
    return !c.read_closed && c.out_bytes <= o_.pause_reading_above;
  }

  void serve(int id, std::vector<detail::c10d::Reply>& replies) {
    char buf[16384];
    for (int turn = 0; turn < 16; ++turn) {  // at most 256 KiB per turn: fair to the others
      auto it = conns_.find(id);
      if (it == conns_.end()) return;
      Conn& c = it->second;
      if (!reading(c)) return;
      const ssize_t k = ::recv(c.fd.get(), buf, sizeof buf, MSG_DONTWAIT);
      if (k == 0) {
        if (engine_.partial(id)) return drop(id, "closed in the middle of a request");
        c.read_closed = true;  // half-closed: its replies are still sent (then it is closed)
        return;
      }
      if (k < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        return drop(id, engine_.partial(id) ? "connection reset in the middle of a request" : "");
      }
      c.last_active = Clock::now();
      const auto n = static_cast<std::size_t>(k);
      if (o_.max_total_bytes > 0 && total_bytes() + n > o_.max_total_bytes)
        return drop(
            id, detail::cat("the server's memory budget (max_total_bytes ", o_.max_total_bytes,
                            ") is spent: ", engine_.stored_bytes(), " bytes stored, ", in_total_,
                            " in incomplete requests, ", out_total_, " in queued replies"));
      // Replies are bounded before they are built: what this connection, and the server, may
      // still queue.
      std::size_t budget =
          c.out_bytes < o_.max_pending_output ? o_.max_pending_output - c.out_bytes : 0;
      if (o_.max_total_bytes > 0) {
        const std::size_t used = total_bytes() + n;
        budget = std::min(budget, used < o_.max_total_bytes ? o_.max_total_bytes - used : 0);
      }
      const std::string why = engine_.feed(id, std::string_view(buf, n), replies, budget);
      const std::size_t in_now = engine_.pending_bytes(id);
      in_total_ = in_total_ - c.in_bytes + in_now;
      c.in_bytes = in_now;
      deliver(replies);
      if (!why.empty()) return drop(id, why);
      const bool partial = engine_.partial(id);
      if (partial && !c.partial) c.partial_since = detail::Deadline::after(o_.request_timeout);
      c.partial = partial;
    }
  }

  //! Closes the connections past their deadlines, and the half-closed ones whose replies are out.
  void sweep() {
    const auto now = Clock::now();
    for (auto it = conns_.begin(); it != conns_.end();) {
      const int id = it->first;
      Conn& c = it->second;
      std::string why = flush(c);
      bool close_quietly = false;
      if (why.empty() && c.partial && c.partial_since.expired())
        why = detail::cat("request incomplete for ", o_.request_timeout.count(),
                          " ms (truncated request)");
      if (why.empty() && c.read_closed && c.out_bytes == 0 && !engine_.waiting(id))
        close_quietly = true;
      if (why.empty() && !close_quietly && o_.idle_timeout.count() > 0 && idle(c, id) &&
          now - c.last_active >= o_.idle_timeout) {
        log(LogLevel::warning,
            detail::cat("TCPStore server: closed the connection from ", c.peer, ": idle for ",
                        o_.idle_timeout.count(), " ms (idle_timeout)"));
        ++idle_closed_;
        close_quietly = true;
      }
      ++it;
      if (!why.empty() || close_quietly) drop(id, why);
    }
  }

  void run() noexcept {
    std::vector<detail::c10d::Reply> replies;
    std::vector<pollfd> fds;
    std::vector<int> ids;
    while (true) {
      const auto now = Clock::now();
      const bool accepting = accept_paused_until_ <= now;
      fds.assign({{listener_.get(), static_cast<short>(accepting ? POLLIN : 0), 0},
                  {wake_r_.get(), POLLIN, 0}});
      ids.assign({-1, -1});
      int wait_ms = 1000;
      if (!accepting)
        wait_ms = static_cast<int>(std::clamp<long long>(
            std::chrono::duration_cast<std::chrono::milliseconds>(accept_paused_until_ - now)
                    .count() +
                1,
            1, 1000));
      if (o_.idle_timeout.count() > 0)
        wait_ms = std::min<int>(
            wait_ms, static_cast<int>(std::clamp<long long>(o_.idle_timeout.count() / 4, 1, 1000)));
      for (auto& [id, c] : conns_) {
        short ev = reading(c) ? POLLIN : 0;
        if (c.out_bytes) ev = static_cast<short>(ev | POLLOUT);
        fds.push_back({c.fd.get(), ev, 0});
        ids.push_back(id);
        if (c.partial) wait_ms = std::min(wait_ms, std::max(1, c.partial_since.poll_ms()));
      }
      const int rc = ::poll(fds.data(), fds.size(), wait_ms);
      if (rc < 0 && errno != EINTR) {
        log(LogLevel::error, "TCPStore server: poll failed: " + detail::errno_string(errno));
        break;
      }
      if (fds[1].revents) break;
      try {
        for (std::size_t i = 2; i < fds.size(); ++i) {
          if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
          if (!(fds[i].events & POLLIN)) {  // not reading it: only a hang-up or error is news
            if (fds[i].revents & (POLLHUP | POLLERR)) drop(ids[i], "");
            continue;
          }
          try {
            serve(ids[i], replies);
          } catch (const std::exception& e) {  // bad_alloc and the like: drop this one only
            replies.clear();
            drop(ids[i], detail::cat("failed to serve the connection: ", e.what()));
          }
        }
        sweep();
        if (fds[0].revents & POLLIN) accept_all();
      } catch (const std::exception& e) {  // keep serving the others
        replies.clear();
        log(LogLevel::error, detail::cat("TCPStore server: ", e.what()));
      }
    }
    conns_.clear();
    listener_.reset();
  }

  TcpStoreServerOptions o_;
  detail::c10d::StoreEngine engine_;
  detail::Fd listener_, wake_r_, wake_w_;
  int port_ = 0;
  int next_id_ = 1;
  detail::Fd spare_;  //!< held so that an accept without descriptors can still close its peer
  std::map<int, Conn> conns_;
  std::size_t in_total_ = 0, out_total_ = 0;
  Clock::time_point accept_paused_until_{}, fd_log_at_{};
  std::atomic<std::size_t> refused_{0}, idle_closed_{0}, fd_refused_{0};
  std::thread thread_;
};

}  // namespace weightsync
