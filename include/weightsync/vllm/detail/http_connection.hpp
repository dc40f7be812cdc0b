// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! ControlServer's parts that touch sockets: a connection that owns its socket (closed on every
//! path, exceptions included) and reads whole requests without waiting, under deadlines (driven by
//! the front, http_front.hpp), the stream cpp-httplib serves one checked request from, and the
//! bounded worker pool.

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

//! A fixed pool of workers with a bounded queue of jobs (cpp-httplib's ThreadPool queues without
//! bound): try_enqueue refuses a job when the queue is full.
class BoundedPool {
 public:
  BoundedPool(std::size_t threads, std::size_t max_queued) : max_queued_(max_queued) {
    for (std::size_t i = 0; i < std::max<std::size_t>(threads, 1); ++i)
      workers_.emplace_back([this] { work(); });
  }
  BoundedPool(const BoundedPool&) = delete;
  BoundedPool& operator=(const BoundedPool&) = delete;
  ~BoundedPool() { shutdown(); }

  //! Queues `fn` (false: the queue is full, or the pool stopped).
  bool try_enqueue(std::function<void()> fn) {
    std::unique_lock lock(mu_);
    if (jobs_.size() >= max_queued_ || stop_) return false;
    jobs_.push_back(std::move(fn));
    cv_.notify_one();
    return true;
  }
  //! Runs what is queued, then joins the workers.
  void shutdown() {
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

//! One accepted connection: owns its socket (closed when the last owner lets go, on every path,
//! exceptions included) and the bytes received and not yet served. It reads without waiting (the
//! front calls on_readable() when the socket has bytes, expire() past deadline()); once it has
//! answered a refusal it drains: half-closed, what the peer still sends read and dropped (so the
//! peer sees the answer rather than a reset), until the peer closes or the drain's deadline.
class Connection {
 public:
  enum class Step { request, more, refused, closed };

  Connection(int sock, const ServerLimits& l, RequestLimits rl) : sock_(sock), l_(l), rl_(rl) {}
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection() { close(); }

  int socket() const noexcept { return sock_; }
  //! Bytes of answers sent on the current request (RequestStream counts them).
  std::size_t& written() noexcept { return written_; }
  //! Requests served on this connection so far.
  std::size_t& served_count() noexcept { return served_; }
  //! When the front took the connection (at accept, or back from a worker).
  Clock::time_point since() const noexcept { return since_; }

  //! Starts reading the next request: its first byte must come within `idle`.
  void begin(std::chrono::milliseconds idle) {
    parser_ = RequestParser(rl_);
    written_ = 0;
    since_ = last_ = Clock::now();
    idle_deadline_ = since_ + idle;
    head_deadline_ = request_deadline_ = Clock::time_point::max();
  }
  //! Reads what the socket holds now (at most 1 MiB a call, never waiting) and parses it.
  //! request: complete (request()); more: wait for the socket; refused: answered (refusal()),
  //! now draining; closed: the peer left before a byte of a request (close it).
  Step on_readable() {
    if (draining_) return drain() ? Step::closed : Step::more;
    char tmp[16384];
    for (std::size_t got = 0; got < (std::size_t{1} << 20);) {
      const Step s = advance();
      if (s != Step::more) return s;
      const ssize_t k = ::recv(sock_, tmp, sizeof tmp, MSG_DONTWAIT);
      if (k > 0) {
        buf_.append(tmp, static_cast<std::size_t>(k));
        got += static_cast<std::size_t>(k);
        last_ = Clock::now();
        continue;
      }
      if (k < 0 && errno == EINTR) continue;
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Step::more;
      if (!parser_.started()) return Step::closed;
      return refuse({400, "the connection closed before the request was complete", "request"});
    }
    return Step::more;
  }
  //! When more bytes must have come (draining: when the drain ends).
  Clock::time_point deadline() const noexcept {
    if (draining_) return drain_deadline_;
    if (!parser_.started()) return idle_deadline_;
    if (!parser_.head_complete()) return std::min(head_deadline_, request_deadline_);
    return std::min(last_ + l_.read_timeout, request_deadline_);
  }
  //! deadline() passed: refused (408, answered, draining) when a request had begun, else closed.
  Step expire() {
    using weightsync::detail::cat;
    if (draining_ || !parser_.started()) return Step::closed;
    if (!parser_.head_complete())
      return refuse({408, cat("the request headers did not arrive within ",
                              l_.header_timeout.count(), " ms (header_timeout)"), "headers"});
    const bool whole = request_deadline_ <= last_ + l_.read_timeout;
    return refuse({408, cat("the request body did not arrive within ",
                            whole ? l_.request_timeout.count() : l_.read_timeout.count(),
                            whole ? " ms (request_timeout)" : " ms of silence (read_timeout)"),
                   "body"});
  }
  //! The request on_readable() completed, as cpp-httplib is given it.
  const std::string& request() const noexcept { return parser_.request(); }
  //! The refusal answered.
  const Refusal& refusal() const noexcept { return refusal_; }
  //! Drops the request just served: what follows it is the next one.
  void served() { buf_.erase(0, parser_.consumed()); }

  //! Answers `r` (Connection: close) and starts draining.
  Step refuse(Refusal r) {
    refusal_ = std::move(r);
    answer(refusal_.status, refusal_.why, refusal_.field);
    return Step::refused;
  }
  //! Answers `status` with a JSON error and Connection: close (once per request, and not after
  //! an answer was begun; without waiting for a peer that does not read), then drains.
  void answer(int status, const std::string& why, const std::string& field = {}) {
    if (sock_ < 0 || draining_) return;
    if (written_ == 0)
      send_within(sock_, error_response(status, why, field), std::chrono::milliseconds(0),
                  &written_);
    ::shutdown(sock_, SHUT_WR);
    draining_ = true;
    // A refused body (413) is read and dropped up to 64 MiB, so that a client that sends it all
    // before reading (curl, httplib) gets the answer; otherwise 64 KiB. At most 1 s of silence.
    drain_left_ = status == 413 ? (std::size_t{64} << 20) : (std::size_t{64} << 10);
    drain_deadline_ = Clock::now() + std::chrono::seconds(1);
    drain_end_ = Clock::now() + std::min<std::chrono::milliseconds>(l_.request_timeout,
                                                                    std::chrono::seconds(10));
  }
  bool draining() const noexcept { return draining_; }
  //! Closes now. Idempotent.
  void close() noexcept {
    if (sock_ < 0) return;
    if (!draining_) ::shutdown(sock_, SHUT_RDWR);
    ::close(sock_);
    sock_ = -1;
  }

 private:
  Step advance() {
    const auto p = parser_.parse(buf_);
    if (p == RequestParser::Progress::done) return Step::request;
    if (p == RequestParser::Progress::failed) return refuse(parser_.refusal());
    if (parser_.take_continue())
      send_within(sock_, "HTTP/1.1 100 Continue\r\n\r\n", std::chrono::milliseconds(0));
    if (parser_.started() && head_deadline_ == Clock::time_point::max()) {
      head_deadline_ = last_ + l_.header_timeout;
      request_deadline_ = last_ + l_.request_timeout;
    }
    return Step::more;
  }
  //! Reads and drops what the peer sends while draining: true when the drain is over.
  bool drain() {
    char tmp[16384];
    while (drain_left_ > 0) {
      const ssize_t k = ::recv(sock_, tmp, sizeof tmp, MSG_DONTWAIT);
      if (k > 0) {
        drain_left_ -= std::min(drain_left_, static_cast<std::size_t>(k));
        drain_deadline_ = std::min(drain_end_, Clock::now() + std::chrono::seconds(1));
        continue;
      }
      if (k < 0 && errno == EINTR) continue;
      return !(k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
    }
    return true;
  }

  int sock_;
  const ServerLimits& l_;
  RequestLimits rl_;
  std::string buf_;
  RequestParser parser_;
  Refusal refusal_;
  std::size_t written_ = 0, served_ = 0, drain_left_ = 0;
  bool draining_ = false;
  Clock::time_point since_{}, last_{}, idle_deadline_{}, head_deadline_{}, request_deadline_{},
      drain_deadline_{}, drain_end_{};
};

}  // namespace weightsync::http::detail
