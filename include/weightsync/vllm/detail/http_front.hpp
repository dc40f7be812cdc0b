// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! ControlServer's front: one thread that reads every connection with epoll and hands only
//! complete requests to the workers (see ControlServer for why it is hand-written).

#if !defined(__has_include) || !__has_include(<httplib.h>)
#error "<weightsync/vllm/detail/http_front.hpp> needs cpp-httplib (<httplib.h>)"
#endif
// cpp-httplib's compiled parts come with weightsync::http (which defines WEIGHTSYNC_LINKS_HTTP);
// without it a program would compile and then fail to link (undefined httplib::...).
#if !defined(WEIGHTSYNC_LINKS_HTTP)
#error "<weightsync/vllm/detail/http_front.hpp>: link weightsync::http to use it (CMake: target_link_libraries(<target> PRIVATE weightsync::http); without CMake: link cpp-httplib, define WEIGHTSYNC_LINKS_HTTP=1)"
#define WEIGHTSYNC_LINKS_HTTP 0  // (said once per translation unit)
#endif

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "weightsync/detail/format.hpp"
#include "weightsync/error.hpp"
#include "weightsync/vllm/detail/http_connection.hpp"
#include "weightsync/vllm/server_limits.hpp"

namespace weightsync::http::detail {

//! Set while the accepting thread hands a new socket to ControlServer: it goes to the front.
inline thread_local bool adopting_connection = false;

//! cpp-httplib's task queue for a ControlServer: the accepting thread's job for each socket runs
//! at once (ControlServer::process_and_close_socket, which adopt()s it); one thread then reads
//! every connection with epoll, without waiting on any (Connection::on_readable), each under its
//! deadlines; a complete request goes to the worker pool (`serve` runs it there and resume()s
//! the connection for the next request, or lets it close); a full pool is a 503 at once. At most
//! max_connections are read at once: one more evicts the one that has waited longest.
//! What a front counts, kept by its server (a front lives only while the server listens).
struct FrontCounters {
  std::atomic<std::size_t> overloaded{0}, refused{0}, evicted{0};
};

class Front final : public httplib::TaskQueue {
 public:
  using Serve = std::function<void(std::shared_ptr<Connection>)>;

  Front(const ServerLimits& l, RequestLimits rl, FrontCounters& counters, Serve serve)
      : l_(l), rl_(rl), n_(counters), serve_(std::move(serve)), pool_(l.threads, l.max_queued) {
    ep_ = ::epoll_create1(EPOLL_CLOEXEC);
    wake_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (ep_ < 0 || wake_ < 0) {
      const int err = errno;
      if (ep_ >= 0) ::close(ep_);
      if (wake_ >= 0) ::close(wake_);
      throw system_error("http front: epoll_create1/eventfd failed", err);
    }
    epoll_event e{};
    e.events = EPOLLIN;
    e.data.fd = wake_;
    ::epoll_ctl(ep_, EPOLL_CTL_ADD, wake_, &e);
    thread_ = std::thread([this] { run(); });
  }
  Front(const Front&) = delete;
  Front& operator=(const Front&) = delete;
  ~Front() override {
    shutdown();
    ::close(ep_);
    ::close(wake_);
  }

  //! The accepting thread's job for a new socket: runs now (it only adopts the socket).
  void enqueue(std::function<void()> fn) override {
    adopting_connection = true;
    try {
      fn();
    } catch (...) {
    }
    adopting_connection = false;
  }
  //! Stops reading (the connections held close), then lets the workers finish their requests.
  void shutdown() override {
    {
      std::lock_guard lock(mu_);
      if (stop_) return;
      stop_ = true;
    }
    wake();
    if (thread_.joinable()) thread_.join();
    pool_.shutdown();
  }

  //! A new connection (from the accepting thread); `sock` is closed on every path.
  void adopt(int sock) {
    std::shared_ptr<Connection> c;
    try {
      c = std::make_shared<Connection>(sock, l_, rl_);
    } catch (...) {
      ::close(sock);
      throw;
    }
    c->begin(l_.header_timeout);
    push(std::move(c));
  }
  //! A connection back from a worker, for its next request (kept alive).
  void resume(std::shared_ptr<Connection> c) {
    c->begin(l_.keep_alive_timeout);
    push(std::move(c));
  }

 private:
  using ConnPtr = std::shared_ptr<Connection>;

  void push(ConnPtr c) {
    {
      std::lock_guard lock(mu_);
      if (stop_) return;  // (c closes)
      incoming_.push_back(std::move(c));
    }
    wake();
  }
  void wake() noexcept {
    const std::uint64_t one = 1;
    [[maybe_unused]] const auto k = ::write(wake_, &one, sizeof one);
  }

  void run() {
    std::vector<epoll_event> ev(256);
    while (true) {
      {
        std::lock_guard lock(mu_);
        if (stop_) break;
      }
      const int n = ::epoll_wait(ep_, ev.data(), static_cast<int>(ev.size()), poll_ms());
      // The wake-up is cleared before the connections pushed are taken: one pushed after this
      // wakes the next wait (cleared after, it could wait there for its deadline).
      std::uint64_t v;
      [[maybe_unused]] const auto k = ::read(wake_, &v, sizeof v);
      take_incoming();
      for (int i = 0; i < n; ++i) {
        if (ev[static_cast<std::size_t>(i)].data.fd == wake_) continue;
        auto it = conns_.find(ev[static_cast<std::size_t>(i)].data.fd);
        if (it != conns_.end()) step(it->second);
      }
      expire();
    }
    for (auto& [fd, c] : conns_) ::epoll_ctl(ep_, EPOLL_CTL_DEL, fd, nullptr);
    conns_.clear();  // (each closes)
  }

  //! Milliseconds until the nearest deadline (at most 1000).
  int poll_ms() const {
    auto next = Clock::now() + std::chrono::seconds(1);
    for (const auto& [fd, c] : conns_) next = std::min(next, c->deadline());
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now());
    return static_cast<int>(std::max<std::int64_t>(0, ms.count() + 1));
  }

  void take_incoming() {
    std::vector<ConnPtr> in;
    {
      std::lock_guard lock(mu_);
      in.swap(incoming_);
    }
    for (auto& c : in) {
      if (conns_.size() >= std::max<std::size_t>(l_.max_connections, 1)) evict_oldest();
      epoll_event e{};
      e.events = EPOLLIN | EPOLLRDHUP;
      e.data.fd = c->socket();
      if (::epoll_ctl(ep_, EPOLL_CTL_ADD, c->socket(), &e) != 0) continue;  // (c closes)
      conns_[c->socket()] = c;
      step(c);  // a connection back from a worker may hold its next request already
    }
  }

  //! Reads what `c` has; hands a complete request on, drops a closed or drained connection.
  void step(ConnPtr c) {
    switch (c->on_readable()) {
      case Connection::Step::more:
        return;
      case Connection::Step::refused:
        ++n_.refused;
        return;  // draining
      case Connection::Step::closed:
        drop(c);
        return;
      case Connection::Step::request:
        break;
    }
    drop(c);  // not read while a worker serves it
    if (!pool_.try_enqueue([this, c] { serve_(c); })) {
      ++n_.overloaded;
      c->answer(503, weightsync::detail::cat("the server is busy: all ", l_.threads,
                                             " workers are serving and ", l_.max_queued,
                                             " requests wait (retry later)"));
      c->close();
    }
  }

  void drop(const ConnPtr& c) {
    ::epoll_ctl(ep_, EPOLL_CTL_DEL, c->socket(), nullptr);
    conns_.erase(c->socket());
  }

  //! Connections past their deadline: 408 (draining) when a request had begun, else closed.
  void expire() {
    const auto now = Clock::now();
    std::vector<ConnPtr> late;
    for (const auto& [fd, c] : conns_)
      if (c->deadline() <= now) late.push_back(c);
    for (auto& c : late) {
      if (c->expire() == Connection::Step::refused)
        ++n_.refused;
      else
        drop(c);
    }
  }

  //! At the cap: the connection that has waited longest for its request goes (a draining one
  //! first).
  void evict_oldest() {
    ConnPtr victim;
    for (const auto& [fd, c] : conns_)
      if (!victim || (c->draining() && !victim->draining()) ||
          (c->draining() == victim->draining() && c->since() < victim->since()))
        victim = c;
    if (!victim) return;
    ++n_.evicted;
    drop(victim);
  }

  const ServerLimits& l_;
  RequestLimits rl_;
  FrontCounters& n_;
  Serve serve_;
  BoundedPool pool_;
  int ep_ = -1, wake_ = -1;
  std::mutex mu_;
  bool stop_ = false;
  std::vector<ConnPtr> incoming_;
  std::unordered_map<int, ConnPtr> conns_;  // (front thread only)
  std::thread thread_;
};

}  // namespace weightsync::http::detail
