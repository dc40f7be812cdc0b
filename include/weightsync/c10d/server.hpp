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
//! server, is dropped with a logged reason; the server keeps serving the others.
//!
//! Who pays under pressure: a connection that does not read its replies stops being read
//! (`pause_reading_above`), is dropped when they do not move for `reply_timeout`, and is dropped
//! first when another connection needs the memory budget. A full server makes room by evicting a
//! connection that has done nothing (`idle_timeout_when_full`), never a rank's, and refuses a new
//! connection at once, with a reason TcpStoreClient reports, when there is none. Out of file
//! descriptors, new connections are refused at once (a reserved spare descriptor), never in a busy
//! loop. A flood cannot multiply the log: evictions, refusals and running out of descriptors are
//! logged once per 5 s each, dropped connections 20 times per 5 s, with a count of the lines left
//! out. Memory freed by deletes and sent replies goes back to the system
//! (c10d/detail/store_memory.hpp).

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

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

#include "weightsync/c10d/detail/store_accept.hpp"
#include "weightsync/c10d/detail/store_conn.hpp"
#include "weightsync/c10d/detail/store_engine.hpp"
#include "weightsync/c10d/detail/store_memory.hpp"
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
  //! not read: it waits for its own replies, and nobody else does.
  std::size_t pause_reading_above = 4u << 20;
  //! A connection whose queued replies do not move for this long (the peer stopped reading them)
  //! is dropped and its replies freed. A client that reads, however slowly, is never dropped for
  //! it; a rank reads its answer as soon as it comes. 0: never.
  std::chrono::milliseconds reply_timeout{30000};
  //! One budget for the whole server: stored data + half-sent requests + queued replies. When a
  //! read would take the server over it, the memory holders pay: the other connections with
  //! replies queued are dropped, those whose replies have not moved for the longest time first
  //! (a client reading its replies keeps moving them), until the read fits; only when none is
  //! left is the reading connection dropped. Both are logged. 0: no budget.
  std::size_t max_total_bytes = std::size_t(2) << 30;
  //! Who makes room when max_connections are open. A connection earns its place with its first
  //! request other than VALIDATE and PING (a SET, GET, ADD, WAIT...: what a rank does first);
  //! from then on it is never closed to make room (only `idle_timeout` closes it, when set). A
  //! new connection that finds the server full evicts one that has done nothing else, once that
  //! one is this old, the newest of them first (a flood's are newer than what was there before
  //! it; a torch 1.13 rank's second connection, silent until a watch, counts as one that has done
  //! nothing). When there is none, the new connection is refused at once: it gets "TCPStore
  //! refused this connection: ..." (kRefusedPrefix) and is closed, which TcpStoreClient reports
  //! as a peer_error at connect. So idle or PINGing connections keep new clients out for at most
  //! this long after a flood ends; clients that do real work cannot be told from ranks and are
  //! bounded by max_connections alone. 0: never evict.
  std::chrono::milliseconds idle_timeout_when_full{1000};
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
      : o_(std::move(o)),
        engine_(o_.limits, o_.accept_torch1_13),
        listener_(o_.host, o_.port, o_.limits.max_connections, o_.accept_backoff) {
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

  int port() const noexcept { return listener_.port(); }
  //! Connections dropped with a logged reason (a broken rule), or refused because the server was
  //! full (for tests and monitoring).
  std::size_t refused() const noexcept { return refused_.load(); }
  //! Connections closed for being idle (evicted when full, or past idle_timeout).
  std::size_t idle_closed() const noexcept { return idle_closed_.load(); }
  //! Connections refused at once because the process had no file descriptor left.
  std::size_t fd_refused() const noexcept { return listener_.fd_refused(); }
  //! What the server holds: stored data, half-sent requests and queued replies (as of its last
  //! turn; the number max_total_bytes bounds).
  std::size_t held_bytes() const noexcept { return held_.load(); }

  //! Stops serving and closes every connection. Idempotent, noexcept.
  void stop() noexcept {
    if (!thread_.joinable()) return;
    const char b = 1;
    [[maybe_unused]] auto k = ::write(wake_w_.get(), &b, 1);
    thread_.join();
  }

 private:
  using Clock = std::chrono::steady_clock;
  using Conn = detail::c10d::StoreConn;
  std::size_t total_bytes() const { return engine_.stored_bytes() + in_total_ + out_total_; }
  static long long ms(Clock::duration d) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
  }

  void drop(int id, const std::string& why) {
    auto it = conns_.find(id);
    if (it == conns_.end()) return;
    if (!why.empty()) {
      ++refused_;
      drop_log_.log(LogLevel::warning, [&] {
        return detail::cat("TCPStore server: dropped the connection from ", it->second.peer, ": ",
                           why);
      });
    }
    if (it->second.out_bytes > 0) {  // a reset: a FIN would wait behind the replies it leaves
      const linger now{1, 0};
      ::setsockopt(it->second.fd.get(), SOL_SOCKET, SO_LINGER, &now, sizeof now);
    }
    in_total_ -= it->second.in_bytes;
    out_total_ -= it->second.out_bytes;
    engine_.close(id);
    conns_.erase(it);
  }

  bool idle(const Conn& c, int id) const {
    return !c.partial && c.out_bytes == 0 && !engine_.waiting(id);
  }

  //! The server is full: closes the newest connection that has done nothing but VALIDATE / PING
  //! for at least idle_timeout_when_full (see the option). Returns whether one was closed.
  bool evict_for(const std::string& for_peer) {
    if (o_.idle_timeout_when_full.count() <= 0) return false;
    const auto now = Clock::now();
    const int best = detail::c10d::newest_unproven(conns_, engine_, o_.idle_timeout_when_full, now);
    if (best < 0) return false;
    evict_log_.log(LogLevel::warning, [&] {
      const Conn& c = conns_.at(best);
      return detail::cat(
          "TCPStore server: closed the connection from ", c.peer, ", open ", ms(now - c.opened),
          " ms without a request but VALIDATE or PING, to serve ", for_peer, ": all ",
          o_.limits.max_connections, " connections are open (idle_timeout_when_full ",
          o_.idle_timeout_when_full.count(), " ms)");
    });
    ++idle_closed_;
    drop(best, "");
    return true;
  }

  //! Refuses a new connection at once: the server is full and nobody can be evicted.
  void refuse_full(detail::Fd fd, const std::string& peer) {
    ++refused_;
    const std::string why = detail::cat(
        "the store is full: all ", o_.limits.max_connections,
        " connections (max_connections) are open, by clients that have made requests or came "
        "less than idle_timeout_when_full (",
        o_.idle_timeout_when_full.count(), " ms) ago; retry later");
    full_log_.log(LogLevel::warning,
                  [&] { return detail::cat("TCPStore server: refused ", peer, ": ", why); });
    detail::c10d::refuse_connection(std::move(fd), why);
  }

  void accept_all() {
    for (int n = 0; n < 64; ++n) {  // a bounded turn: the connections are served in between
      std::string peer;
      bool more = false;
      detail::Fd fd = listener_.accept(peer, more);
      if (!fd) {
        if (more) continue;  // one peer refused for want of descriptors: maybe more wait
        return;
      }
      detail::set_socket_options(fd.get());
      if (conns_.size() >= o_.limits.max_connections && !evict_for(peer)) {
        refuse_full(std::move(fd), peer);
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

  bool reading(const Conn& c) const {
    return !c.read_closed && c.out_bytes <= o_.pause_reading_above;
  }

  //! Makes room for `need` more bytes under max_total_bytes: drops the connections with replies
  //! queued, those unmoved the longest first (never `reader`). Whether it fits now.
  bool reclaim(int reader, std::size_t need) {
    const auto now = Clock::now();
    while (total_bytes() + need > o_.max_total_bytes) {
      const int victim = detail::c10d::longest_stalled(conns_, reader);
      if (victim < 0) return false;
      const Conn& v = conns_.at(victim);
      drop(victim, detail::cat("its ", v.out_bytes, " bytes of replies have not moved for ",
                               ms(now - v.moved),
                               " ms and another connection needs the memory "
                               "budget (max_total_bytes ",
                               o_.max_total_bytes, ")"));
    }
    return true;
  }

  //! Reads and runs what `id` sent, in bounded turns; drops it when it breaks a rule.
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
      if (o_.max_total_bytes > 0 && total_bytes() + n > o_.max_total_bytes && !reclaim(id, n))
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
      detail::c10d::deliver(conns_, replies, out_total_);
      if (!why.empty()) return drop(id, why);
      const bool partial = engine_.partial(id);
      if (partial && !c.partial) c.partial_since = detail::Deadline::after(o_.request_timeout);
      c.partial = partial;
    }
  }

  //! Why `c` goes now ("" when it stays; `quiet`: closed without a warning of its own).
  std::string overdue(int id, Conn& c, Clock::time_point now, bool& quiet) {
    quiet = false;
    std::string why = detail::c10d::flush_replies(c, out_total_, o_.max_pending_output);
    if (!why.empty()) return why;
    if (c.partial && c.partial_since.expired())
      return detail::cat("request incomplete for ", o_.request_timeout.count(),
                         " ms (truncated request)");
    if (c.out_bytes > 0 && o_.reply_timeout.count() > 0 && now - c.moved >= o_.reply_timeout)
      return detail::cat(c.out_bytes, " bytes of replies have not moved for ",
                         o_.reply_timeout.count(), " ms (reply_timeout): the peer stopped reading");
    quiet = c.read_closed && c.out_bytes == 0 && !engine_.waiting(id);
    if (!quiet && o_.idle_timeout.count() > 0 && idle(c, id) &&
        now - c.last_active >= o_.idle_timeout) {
      drop_log_.log(LogLevel::warning, [&] {
        return detail::cat("TCPStore server: closed the connection from ", c.peer, ": idle for ",
                           o_.idle_timeout.count(), " ms (idle_timeout)");
      });
      ++idle_closed_;
      quiet = true;
    }
    return {};
  }

  //! Closes the connections past their deadlines, and the half-closed ones whose replies are out.
  void sweep() {
    const auto now = Clock::now();
    for (auto it = conns_.begin(); it != conns_.end();) {
      const int id = it->first;
      bool quiet = false;
      const std::string why = overdue(id, it->second, now, quiet);
      ++it;
      if (!why.empty() || quiet) drop(id, why);
    }
  }

  //! The poll set (listener, wake pipe, connections) and how long to wait at most.
  int prepare_poll(std::vector<pollfd>& fds, std::vector<int>& ids) const {
    const auto now = Clock::now();
    const bool accepting = listener_.paused_until() <= now;
    fds.assign({{listener_.fd(), static_cast<short>(accepting ? POLLIN : 0), 0},
                {wake_r_.get(), POLLIN, 0}});
    ids.assign({-1, -1});
    auto until = [&](Clock::time_point t) {
      return static_cast<int>(std::clamp<long long>(ms(t - now) + 1, 1, 1000));
    };
    int wait_ms = accepting ? 1000 : until(listener_.paused_until());
    if (o_.idle_timeout.count() > 0)
      wait_ms = std::min<int>(
          wait_ms, static_cast<int>(std::clamp<long long>(o_.idle_timeout.count() / 4, 1, 1000)));
    for (const auto& [id, c] : conns_) {
      short ev = reading(c) ? POLLIN : 0;
      if (c.out_bytes) ev = static_cast<short>(ev | POLLOUT);
      fds.push_back({c.fd.get(), ev, 0});
      ids.push_back(id);
      if (c.partial) wait_ms = std::min(wait_ms, std::max(1, c.partial_since.poll_ms()));
      if (c.out_bytes && o_.reply_timeout.count() > 0)
        wait_ms = std::min(wait_ms, until(c.moved + o_.reply_timeout));
    }
    return wait_ms;
  }

  //! Serves the connections poll found ready; a failure drops that connection only.
  void serve_ready(const std::vector<pollfd>& fds, const std::vector<int>& ids,
                   std::vector<detail::c10d::Reply>& replies) {
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
  }

  void run() noexcept {
    std::vector<detail::c10d::Reply> replies;
    std::vector<pollfd> fds;
    std::vector<int> ids;
    while (true) {
      const int wait_ms = prepare_poll(fds, ids);
      const int rc = ::poll(fds.data(), fds.size(), wait_ms);
      if (rc < 0 && errno != EINTR) {
        log(LogLevel::error, "TCPStore server: poll failed: " + detail::errno_string(errno));
        break;
      }
      if (fds[1].revents) break;
      try {
        serve_ready(fds, ids, replies);
        sweep();
        if (fds[0].revents & POLLIN) accept_all();
      } catch (const std::exception& e) {  // keep serving the others
        replies.clear();
        log(LogLevel::error, detail::cat("TCPStore server: ", e.what()));
      }
      memory_.update(total_bytes(), Clock::now());
      held_ = total_bytes();
    }
    conns_.clear();
    listener_.close();
  }

  TcpStoreServerOptions o_;
  detail::c10d::StoreEngine engine_;
  detail::c10d::StoreListener listener_;
  detail::Fd wake_r_, wake_w_;
  int next_id_ = 1;
  std::map<int, Conn> conns_;
  std::size_t in_total_ = 0, out_total_ = 0;
  detail::c10d::LogLimiter evict_log_, full_log_, drop_log_{20};
  detail::c10d::MemoryReturn memory_;
  std::atomic<std::size_t> refused_{0}, idle_closed_{0}, held_{0};
  std::thread thread_;
};

}  // namespace weightsync
