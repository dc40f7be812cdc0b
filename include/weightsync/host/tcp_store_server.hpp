// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! A c10d TCPStore server: what `torch.distributed.TCPStore(host, port, is_master=True)` runs, so
//! that Python ranks (torch >= 2.1, and 2.0 / 1.13 without the handshake) can join a store a C++
//! process hosts. One background thread polls the listener and every connection; all sockets are
//! non-blocking, replies are queued per connection, and each connection is bounded (TcpStoreLimits:
//! lengths, request and reply sizes; an incomplete request older than `request_timeout`; its
//! pending output). A connection that breaks a rule, or whose request fails on the server, is
//! dropped with a logged reason; the server keeps serving the others.

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "weightsync/detail/format.hpp"
#include "weightsync/detail/socket.hpp"
#include "weightsync/error.hpp"
#include "weightsync/host/tcp_store_engine.hpp"
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
    thread_ = std::thread([this] { run(); });
  }
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;
  ~TcpStoreServer() { stop(); }

  int port() const noexcept { return port_; }
  //! Connections dropped for breaking the protocol (for tests and monitoring).
  std::size_t refused() const noexcept { return refused_.load(); }

  //! Stops serving and closes every connection. Idempotent, noexcept.
  void stop() noexcept {
    if (!thread_.joinable()) return;
    const char b = 1;
    [[maybe_unused]] auto k = ::write(wake_w_.get(), &b, 1);
    thread_.join();
  }

 private:
  struct Conn {
    detail::Fd fd;
    std::string out;
    std::string peer;
    detail::Deadline partial_since{};
    bool partial = false;
  };

  void drop(int id, const std::string& why) {
    auto it = conns_.find(id);
    if (it == conns_.end()) return;
    if (!why.empty()) {
      ++refused_;
      log(LogLevel::warning,
          detail::cat("TCPStore server: dropped the connection from ", it->second.peer, ": ", why));
    }
    engine_.close(id);
    conns_.erase(it);
  }

  void accept_all() {
    while (true) {
      sockaddr_storage ss{};
      socklen_t len = sizeof ss;
      detail::Fd fd(::accept4(listener_.get(), reinterpret_cast<sockaddr*>(&ss), &len,
                              SOCK_CLOEXEC | SOCK_NONBLOCK));
      if (!fd) return;
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
      if (conns_.size() >= o_.limits.max_connections) {
        ++refused_;
        log(LogLevel::warning, detail::cat("TCPStore server: refused ", peer, ": ",
                                           o_.limits.max_connections, " connections already open"));
        continue;
      }
      const int id = next_id_++;
      engine_.open(id);
      conns_.emplace(id, Conn{std::move(fd), {}, peer, {}, false});
    }
  }

  void deliver(std::vector<detail::c10d::Reply>& replies) {
    for (auto& r : replies) {
      auto it = conns_.find(r.conn);
      if (it != conns_.end()) it->second.out += r.bytes;
    }
    replies.clear();
  }

  //! Writes what is queued; returns "" or the reason to drop the connection.
  std::string flush(Conn& c) {
    while (!c.out.empty()) {
      const ssize_t k = ::send(c.fd.get(), c.out.data(), c.out.size(), MSG_NOSIGNAL);
      if (k > 0) {
        c.out.erase(0, static_cast<std::size_t>(k));
        continue;
      }
      if (k < 0 && errno == EINTR) continue;
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      return detail::cat("send failed: ", detail::errno_string(errno));
    }
    if (c.out.size() > o_.max_pending_output)
      return detail::cat(c.out.size(), " bytes of replies unread (the peer stopped reading)");
    return {};
  }

  void serve(int id, std::vector<detail::c10d::Reply>& replies) {
    char buf[16384];
    while (true) {
      auto it = conns_.find(id);
      if (it == conns_.end()) return;
      const ssize_t k = ::recv(it->second.fd.get(), buf, sizeof buf, MSG_DONTWAIT);
      if (k == 0) return drop(id, engine_.partial(id) ? "closed in the middle of a request" : "");
      if (k < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        return drop(id, engine_.partial(id) ? "connection reset in the middle of a request" : "");
      }
      // Replies are bounded before they are built: what this connection may still queue.
      const std::size_t queued = it->second.out.size();
      const std::size_t budget =
          queued < o_.max_pending_output ? o_.max_pending_output - queued : 0;
      const std::string why =
          engine_.feed(id, std::string_view(buf, static_cast<std::size_t>(k)), replies, budget);
      deliver(replies);
      if (!why.empty()) return drop(id, why);
      const bool partial = engine_.partial(id);
      if (partial && !it->second.partial)
        it->second.partial_since = detail::Deadline::after(o_.request_timeout);
      it->second.partial = partial;
    }
  }

  void run() noexcept {
    std::vector<detail::c10d::Reply> replies;
    std::vector<pollfd> fds;
    std::vector<int> ids;
    while (true) {
      fds.assign({{listener_.get(), POLLIN, 0}, {wake_r_.get(), POLLIN, 0}});
      ids.assign({-1, -1});
      int wait_ms = 1000;
      for (auto& [id, c] : conns_) {
        fds.push_back({c.fd.get(), static_cast<short>(POLLIN | (c.out.empty() ? 0 : POLLOUT)), 0});
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
          try {
            serve(ids[i], replies);
          } catch (const std::exception& e) {  // bad_alloc and the like: drop this one only
            replies.clear();
            drop(ids[i], detail::cat("failed to serve the connection: ", e.what()));
          }
        }
        for (auto it = conns_.begin(); it != conns_.end();) {
          const int id = it->first;
          std::string why = flush(it->second);
          if (why.empty() && it->second.partial && it->second.partial_since.expired())
            why = detail::cat("request incomplete for ", o_.request_timeout.count(),
                              " ms (truncated request)");
          ++it;
          if (!why.empty()) drop(id, why);
        }
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
  std::map<int, Conn> conns_;
  std::atomic<std::size_t> refused_{0};
  std::thread thread_;
};

}  // namespace weightsync
