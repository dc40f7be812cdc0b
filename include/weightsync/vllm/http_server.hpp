// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! A cpp-httplib server with the limits a control plane needs against slow, idle, malformed and
//! oversized clients (ServerLimits). One thread (the front) reads every connection with epoll and
//! hands only complete requests to a fixed pool of workers with a bounded queue (a complete
//! request that finds it full gets 503 at once), under per-connection deadlines (the request line
//! and headers, each wait for the body, the whole request) and a cap on connections (one more
//! evicts the one that has waited longest for its request); bounds on the size and number of
//! request headers (431) and on the body (413, before a byte of it is read). It also reads
//! requests the way curl sends them: a POST without a body and without Content-Length has an
//! empty body (RFC 9112 6.3, cpp-httplib 0.11 would wait for the peer to close), and a body sent
//! as application/x-www-form-urlencoded (`curl -d`) reaches the handler as it came, instead of
//! cpp-httplib's 8 KiB form limit answering 413. A request for a known path with the wrong method
//! gets 405 with an Allow header (routes added through get() / post(), or add_vllm_routes).
//!
//! Every byte sequence gets an answer or a close, never a leak. A request is read whole (head and
//! body, chunks joined) and checked before cpp-httplib parses it (detail::RequestParser): a
//! malformed request line, header or chunk, a path or query parameter that is not UTF-8 once
//! percent-decoded, a doubled or conflicting length: 400 naming the field, and the connection
//! closes (no worker held, nothing unsolicited later). Messages quote request bytes escaped
//! (\xFF), and every JSON dump of them replaces what is not UTF-8, so none can throw. The socket
//! belongs to an object that closes it on every path; a route that throws gets a generic 500 and
//! its message goes to the log (weightsync::log), never to the client.
//!
//! Why a hand-written front. cpp-httplib reads a request's line, headers and body in the worker
//! that then serves it, so N slow clients (slowloris, slow bodies) hold N workers; a longer queue
//! or a shorter header timeout only moves the wall. Three ways out were weighed:
//! - Boost.Beast on Boost.Asio (Debian libboost-dev): well kept, asynchronous parsing and I/O,
//!   but every handler, add_vllm_routes and VllmClient are written against cpp-httplib's
//!   Request/Response, which Beast would replace, and Beast is heavy to compile (seconds per
//!   translation unit, against issue 59's compile budget).
//! - libmicrohttpd (Debian libmicrohttpd-dev): C, event-driven, with connection limits and
//!   per-connection timeouts built in; but it too replaces cpp-httplib's routing and types under
//!   every handler, and is one more library for the http component to find and link.
//! - An epoll front before cpp-httplib (chosen): no new dependency, every handler unchanged; the
//!   request checks it needs exist anyway (a malformed request must be refused before cpp-httplib
//!   sees it), so the front adds only reads that never wait, deadlines and a cap (about 250
//!   lines, detail/http_front.hpp). cpp-httplib parses each complete request from memory.
//! Left as it was: a worker writes its answer, so a client that never reads a large answer holds
//! that worker for write_timeout; no TLS.
//!
//! cpp-httplib 0.11 (Debian's, a split build) fixes a few limits when its library is compiled:
//! one header line at most CPPHTTPLIB_HEADER_MAX_LENGTH (8192) bytes, the request line at most
//! CPPHTTPLIB_REQUEST_URI_MAX_LENGTH (8192). It is given only requests checked against the
//! limits here, each as a stream of its own bytes.

#if !defined(__has_include) || !__has_include(<httplib.h>)
#error "<weightsync/vllm/http_server.hpp> needs cpp-httplib (<httplib.h>)"
#endif
// cpp-httplib's compiled parts come with weightsync::http (which defines WEIGHTSYNC_LINKS_HTTP);
// without it a program would compile and then fail to link (undefined httplib::...).
#if !defined(WEIGHTSYNC_LINKS_HTTP)
#error "<weightsync/vllm/http_server.hpp>: link weightsync::http to use it (CMake: target_link_libraries(<target> PRIVATE weightsync::http); without CMake: link cpp-httplib, define WEIGHTSYNC_LINKS_HTTP=1)"
#define WEIGHTSYNC_LINKS_HTTP 0  // (said once per translation unit)
#endif

#include <httplib.h>

#include <atomic>
#include <exception>
#include <memory>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "weightsync/detail/format.hpp"
#include "weightsync/error.hpp"
#include "weightsync/log.hpp"
#include "weightsync/vllm/detail/http_connection.hpp"
#include "weightsync/vllm/detail/http_front.hpp"
#include "weightsync/vllm/detail/http_request.hpp"
#include "weightsync/vllm/server_limits.hpp"

namespace weightsync::http {

//! A cpp-httplib server under ServerLimits (see the file comment). Use it where httplib::Server
//! is used; add routes with get()/post() (or Get/Post, without the 405 for them).
class ControlServer : public httplib::Server {
 public:
  explicit ControlServer(ServerLimits limits = {}) : limits_(limits) {
    new_task_queue = [this] {
      auto* f = new detail::Front(limits_, request_limits(), counters_,
                                  [this](std::shared_ptr<detail::Connection> c) {
                                    serve(std::move(c));
                                  });
      front_ = f;
      return f;
    };
    set_read_timeout(limits_.read_timeout);
    set_write_timeout(limits_.write_timeout);
    set_keep_alive_max_count(limits_.keep_alive_max_count);
    set_keep_alive_timeout(std::max<time_t>(
        1,
        static_cast<time_t>(
            std::chrono::duration_cast<std::chrono::seconds>(limits_.keep_alive_timeout).count())));
    set_exception_handler(internal_error);
  }
  ~ControlServer() override = default;

  const ServerLimits& limits() const noexcept { return limits_; }
  //! Requests answered 503 because every worker was busy and the queue full.
  std::size_t overloaded() const noexcept { return counters_.overloaded.load(); }
  //! Requests refused before cpp-httplib read them: malformed (400, 501, 505), too slow (408),
  //! headers over the limits (431), a body over the payload limit (413).
  std::size_t refused_headers() const noexcept { return counters_.refused.load(); }
  //! Connections dropped at max_connections (the longest waiting for their requests).
  std::size_t evicted() const noexcept { return counters_.evicted.load(); }

  ControlServer& get(const std::string& path, Handler h) {
    note_route("GET", path);
    Get(path, std::move(h));
    return *this;
  }
  ControlServer& post(const std::string& path, Handler h) {
    note_route("POST", path);
    Post(path, std::move(h));
    return *this;
  }
  //! Records that `path` (a literal path) answers `method`, for 405 and its Allow header.
  void note_route(const std::string& method, const std::string& path) {
    std::lock_guard lock(routes_mu_);
    routes_[path].insert(method);
  }
  //! The methods `path` answers ("" when it is no route), e.g. "GET, POST".
  std::string allowed_methods(const std::string& path) const {
    std::lock_guard lock(routes_mu_);
    auto it = routes_.find(path);
    if (it == routes_.end()) return {};
    std::string out;
    for (const auto& m : it->second) out += (out.empty() ? "" : ", ") + m;
    return out;
  }
  //! Every route, "METHOD path" per entry, sorted by path.
  std::vector<std::string> route_list() const {
    std::lock_guard lock(routes_mu_);
    std::vector<std::string> out;
    for (const auto& [path, methods] : routes_)
      for (const auto& m : methods) out.push_back(m + " " + path);
    return out;
  }

  //! The exception handler every ControlServer starts with: 500 with a generic message; the
  //! route, the method and the exception's message (escaped) go to the log.
  static void internal_error(const httplib::Request& req, httplib::Response& res,
                             std::exception_ptr ep) {
    std::string what = "an exception that is no std::exception";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    log(LogLevel::error, weightsync::detail::cat("http: ", detail::escaped(req.method), " ",
                                                 detail::escaped(req.path, 256), " failed: ",
                                                 detail::escaped(what, 4096)));
    res.status = 500;
    res.set_content(R"j({"error":"internal server error (the server's log says more)"})j",
                    "application/json");
  }

 private:
  //! In the accepting thread: the socket goes to the front (which reads it, and closes it).
  bool process_and_close_socket(socket_t sock) override {
    try {
      if (detail::adopting_connection && front_.load()) {
        front_.load()->adopt(sock);
        return true;
      }
    } catch (const std::exception& e) {
      log(LogLevel::error, weightsync::detail::cat("http: a connection was dropped: ",
                                                   detail::escaped(e.what(), 4096)));
      return true;  // (adopt closed it)
    }
    ::close(sock);  // (not through the front: cannot happen)
    return true;
  }

  //! In a worker: serves the complete request `c` holds; then hands `c` back to the front for
  //! the next one, or lets it close.
  void serve(std::shared_ptr<detail::Connection> c) {
    try {
      detail::RequestStream s(c->socket(), c->request(), limits_.write_timeout, c->written());
      bool closed = false;
      const bool last = ++c->served_count() >= limits_.keep_alive_max_count || !is_running();
      const bool ok = process_request(s, last, closed, nullptr);
      c->served();
      if (ok && !closed && !last) front_.load()->resume(std::move(c));
    } catch (const std::exception& e) {
      if (c) fail(*c, e.what());
    } catch (...) {
      if (c) fail(*c, "an exception that is no std::exception");
    }
  }

  //! Something threw outside a route (cpp-httplib, an error handler): logged; the request gets a
  //! generic 500 unless its answer was begun; the connection closes.
  void fail(detail::Connection& c, const char* what) noexcept {
    try {
      log(LogLevel::error, weightsync::detail::cat("http: a connection failed: ",
                                                   detail::escaped(what, 4096)));
      c.answer(500, "internal server error (the server's log says more)");
    } catch (...) {
    }
  }

  detail::RequestLimits request_limits() const {
    return {limits_.max_header_bytes, limits_.max_header_count, payload_max_length_};
  }

  ServerLimits limits_;
  detail::FrontCounters counters_;
  std::atomic<detail::Front*> front_{nullptr};  // (while listening; cpp-httplib's listen owns it)
  mutable std::mutex routes_mu_;
  std::map<std::string, std::set<std::string>> routes_;
};

}  // namespace weightsync::http
