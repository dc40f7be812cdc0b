// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! ControlServer's parts that touch sockets: a connection that owns its socket (closed on every
//! path, exceptions included) and reads whole requests under deadlines, the stream cpp-httplib
//! serves one checked request from, and the bounded worker pool.

#if !defined(__has_include) || !__has_include(<httplib.h>)
#error "<weightsync/vllm/detail/http_connection.hpp> needs cpp-httplib (<httplib.h>)"
#endif
// cpp-httplib's compiled parts come with weightsync::http (which defines WEIGHTSYNC_LINKS_HTTP);
// without it a program would compile and then fail to link (undefined httplib::...).
#if !defined(WEIGHTSYNC_LINKS_HTTP)
#error "<weightsync/vllm/detail/http_connection.hpp>: link weightsync::http to use it (CMake: target_link_libraries(<target> PRIVATE weightsync::http); without CMake: link cpp-httplib, define WEIGHTSYNC_LINKS_HTTP=1)"
#define WEIGHTSYNC_LINKS_HTTP 0  // (said once per translation unit)
#endif

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <httplib.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "weightsync/detail/format.hpp"
#include "weightsync/vllm/detail/http_request.hpp"
#include "weightsync/vllm/detail/http_request_parser.hpp"
#include "weightsync/vllm/server_limits.hpp"

namespace weightsync::http::detail {

using Clock = std::chrono::steady_clock;

//! Set while a connection is handed to ControlServer in the accepting thread because the queue
//! was full: it is answered 503 without being read.
inline thread_local bool overloaded_connection = false;

//! A fixed pool of workers with a bounded queue (cpp-httplib's ThreadPool queues without bound).
//! A job that finds the queue full runs at once in the caller's thread with overloaded_connection
//! set (ControlServer then answers 503 and closes without blocking).
class BoundedPool final : public httplib::TaskQueue {
 public:
  BoundedPool(std::size_t threads, std::size_t max_queued) : max_queued_(max_queued) {
    for (std::size_t i = 0; i < std::max<std::size_t>(threads, 1); ++i)
      workers_.emplace_back([this] { work(); });
  }
  BoundedPool(const BoundedPool&) = delete;
  BoundedPool& operator=(const BoundedPool&) = delete;
  ~BoundedPool() override { shutdown(); }

  void enqueue(std::function<void()> fn) override {
    {
      std::unique_lock lock(mu_);
      if (jobs_.size() < max_queued_ && !stop_) {
        jobs_.push_back(std::move(fn));
        cv_.notify_one();
        return;
      }
    }
    overloaded_connection = true;
    try {
      fn();
    } catch (...) {
    }
    overloaded_connection = false;
  }
  void shutdown() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_)
      if (t.joinable()) t.join();
  }

 private:
  void work() {
    while (true) {
      std::function<void()> fn;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
        if (jobs_.empty()) return;  // stopping, and nothing left
        fn = std::move(jobs_.front());
        jobs_.pop_front();
      }
      try {
        fn();
      } catch (...) {
      }
    }
  }
  std::size_t max_queued_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

//! Sends all of `data` within `timeout` (false: the peer is gone or too slow).
inline bool send_within(int sock, std::string_view data, std::chrono::milliseconds timeout,
                        std::size_t* written = nullptr) {
  const auto deadline = Clock::now() + timeout;
  while (!data.empty()) {
    const ssize_t k = ::send(sock, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k > 0) {
      if (written) *written += static_cast<std::size_t>(k);
      data.remove_prefix(static_cast<std::size_t>(k));
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    if (k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) return false;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    pollfd p{sock, POLLOUT, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count()) + 1) <= 0) return false;
  }
  return true;
}

//! One checked request (RequestParser::request()) as cpp-httplib's Stream: reads come from the
//! request's bytes only (never the socket: what follows is the next request's), writes go to the
//! socket within the write timeout and are counted.
class RequestStream final : public httplib::Stream {
 public:
  RequestStream(int sock, std::string_view request, std::chrono::milliseconds write_timeout,
                std::size_t& written)
      : sock_(sock), req_(request), write_timeout_(write_timeout), written_(written) {}

  bool is_readable() const override { return pos_ < req_.size(); }
  bool is_writable() const override {
    pollfd p{sock_, POLLOUT, 0};
    return ::poll(&p, 1, static_cast<int>(write_timeout_.count())) > 0;
  }
  ssize_t read(char* ptr, size_t size) override {
    const std::size_t n = std::min(size, req_.size() - pos_);
    std::memcpy(ptr, req_.data() + pos_, n);
    pos_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    return send_within(sock_, std::string_view(ptr, size), write_timeout_, &written_)
               ? static_cast<ssize_t>(size)
               : -1;
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    if (::getpeername(sock_, reinterpret_cast<sockaddr*>(&ss), &len) == 0) name(ss, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    if (::getsockname(sock_, reinterpret_cast<sockaddr*>(&ss), &len) == 0) name(ss, ip, port);
  }
  socket_t socket() const override { return sock_; }

 private:
  static void name(const sockaddr_storage& ss, std::string& ip, int& port) {
    char host[INET6_ADDRSTRLEN] = {};
    if (ss.ss_family == AF_INET) {
      auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
      ::inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
      port = ntohs(a->sin_port);
    } else if (ss.ss_family == AF_INET6) {
      auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
      ::inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
      port = ntohs(a->sin6_port);
    }
    ip = host;
  }
  int sock_;
  std::string_view req_;
  std::size_t pos_ = 0;
  std::chrono::milliseconds write_timeout_;
  std::size_t& written_;
};

//! Half-closes, then reads and discards what the peer still sends (at most `max_bytes`, until it
//! is silent for `idle` or `total` passes), so that a client still sending its request sees our
//! answer rather than a reset; then closes.
inline void linger_close(int sock, std::size_t max_bytes, std::chrono::milliseconds idle,
                         std::chrono::milliseconds total) noexcept {
  ::shutdown(sock, SHUT_WR);
  const auto deadline = Clock::now() + total;
  char tmp[16384];
  std::size_t got = 0;
  while (got < max_bytes) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) break;
    pollfd p{sock, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(std::min(left, idle).count())) <= 0) break;
    const ssize_t k = ::recv(sock, tmp, sizeof tmp, MSG_DONTWAIT);
    if (k <= 0) break;
    got += static_cast<std::size_t>(k);
  }
  ::close(sock);
}

//! The answer to a refused request: `status` with {"error": why(, "field": field)} and
//! Connection: close. The JSON dump replaces bytes that are not UTF-8 (it cannot throw).
inline std::string error_response(int status, const std::string& why, const std::string& field) {
  const char* reason = status == 400   ? "Bad Request"
                       : status == 408 ? "Request Timeout"
                       : status == 413 ? "Payload Too Large"
                       : status == 431 ? "Request Header Fields Too Large"
                       : status == 501 ? "Not Implemented"
                       : status == 503 ? "Service Unavailable"
                       : status == 505 ? "HTTP Version Not Supported"
                                       : "Internal Server Error";
  nlohmann::json j{{"error", why}};
  if (!field.empty()) j["field"] = field;
  const std::string body = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return weightsync::detail::cat(
      "HTTP/1.1 ", status, " ", reason,
      "\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: ", body.size(),
      status == 503 ? "\r\nRetry-After: 1" : "", "\r\n\r\n", body);
}

//! One accepted connection: owns its socket (closed when it goes, on every path, exceptions
//! included), the bytes received and not yet served, and how to close: at once, or, once
//! answered early, after reading what the peer still sends (so it sees the answer, not a reset).
class Connection {
 public:
  enum class Read { request, idle, refused };

  Connection(int sock, const ServerLimits& l, RequestLimits rl) : sock_(sock), l_(l), rl_(rl) {}
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection() { close(); }

  int socket() const noexcept { return sock_; }
  //! Bytes of answers sent on the current request (RequestStream counts them).
  std::size_t& written() noexcept { return written_; }

  //! Reads until the next request is complete (request()), or the peer stays silent for `idle`
  //! or closes before a byte of one (idle), or the request is malformed, too large or too slow
  //! (refused: refusal() says why). Deadlines: header_timeout for the head from its first byte,
  //! read_timeout for each wait for the body, request_timeout for the whole.
  Read read_request(std::chrono::milliseconds idle) {
    using weightsync::detail::cat;
    parser_ = RequestParser(rl_);
    written_ = 0;
    const auto now0 = Clock::now();
    Clock::time_point head_deadline{}, request_deadline{};
    while (true) {
      const auto p = parser_.parse(buf_);
      if (p == RequestParser::Progress::done) return Read::request;
      if (p == RequestParser::Progress::failed) return refuse(parser_.refusal());
      if (parser_.take_continue())
        send_within(sock_, "HTTP/1.1 100 Continue\r\n\r\n", l_.write_timeout);
      const auto now = Clock::now();
      if (parser_.started() && head_deadline == Clock::time_point{}) {
        head_deadline = now + l_.header_timeout;
        request_deadline = now + l_.request_timeout;
      }
      const auto deadline = !parser_.started()       ? now0 + idle
                            : !parser_.head_complete() ? std::min(head_deadline, request_deadline)
                                                       : std::min(now + l_.read_timeout, request_deadline);
      const ssize_t k = fill(deadline);
      if (k > 0) continue;
      if (!parser_.started()) return Read::idle;
      if (k < 0)
        return refuse({400, "the connection closed before the request was complete", "request"});
      if (!parser_.head_complete())
        return refuse({408, cat("the request headers did not arrive within ", l_.header_timeout.count(),
                                " ms (header_timeout)"), "headers"});
      return refuse({408, cat("the request body did not arrive within ",
                              deadline == request_deadline ? l_.request_timeout.count() : l_.read_timeout.count(),
                              deadline == request_deadline ? " ms (request_timeout)" : " ms of silence (read_timeout)"),
                     "body"});
    }
  }
  //! The request read_request() completed, as cpp-httplib is given it.
  const std::string& request() const noexcept { return parser_.request(); }
  //! The refusal read_request() answered.
  const Refusal& refusal() const noexcept { return refusal_; }
  //! Drops the request just served: what follows it is the next one.
  void served() { buf_.erase(0, parser_.consumed()); }

  //! Answers `r` (Connection: close); the connection then lingers before it closes.
  Read refuse(Refusal r) {
    refusal_ = std::move(r);
    answer(refusal_.status, refusal_.why, refusal_.field);
    return Read::refused;
  }
  //! Answers `status` with a JSON error and Connection: close, unless an answer to this request
  //! was begun; the connection then lingers before it closes.
  void answer(int status, const std::string& why, const std::string& field = {}) {
    if (sock_ < 0 || written_ > 0) return;
    send_within(sock_, error_response(status, why, field), l_.write_timeout, &written_);
    // A refused body (413) is read and dropped, up to 64 MiB, so that a client that sends it all
    // before reading (curl, httplib) gets the answer; otherwise, 64 KiB.
    linger_ = status == 413 ? (std::size_t{64} << 20) : (std::size_t{64} << 10);
  }
  //! Closes now (lingering when answered early). Idempotent.
  void close() noexcept {
    if (sock_ < 0) return;
    if (linger_) {
      linger_close(sock_, linger_, std::chrono::milliseconds(1000), l_.request_timeout);
    } else {
      ::shutdown(sock_, SHUT_RDWR);
      ::close(sock_);
    }
    sock_ = -1;
  }

 private:
  //! Appends what arrives before `deadline`: > 0 bytes read, 0 none in time, < 0 closed or error.
  ssize_t fill(Clock::time_point deadline) {
    char tmp[16384];
    while (true) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() < 0) return 0;
      pollfd p{sock_, POLLIN, 0};
      const int rc = ::poll(&p, 1, static_cast<int>(left.count()));
      if (rc < 0 && errno == EINTR) continue;
      if (rc == 0) return 0;
      if (rc < 0) return -1;
      const ssize_t k = ::recv(sock_, tmp, sizeof tmp, MSG_DONTWAIT);
      if (k > 0) {
        buf_.append(tmp, static_cast<std::size_t>(k));
        return k;
      }
      if (k < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
      return -1;
    }
  }

  int sock_;
  const ServerLimits& l_;
  RequestLimits rl_;
  std::string buf_;
  RequestParser parser_;
  Refusal refusal_;
  std::size_t written_ = 0;
  std::size_t linger_ = 0;
};

}  // namespace weightsync::http::detail
