// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! A cpp-httplib server with the limits a control plane needs against slow, idle and oversized
//! clients (ServerLimits): a fixed pool of worker threads with a bounded queue (a connection that
//! finds the queue full gets 503 at once), a deadline for the request line and headers (slowloris)
//! and one for the whole request, read and write timeouts, and bounds on the size and number of
//! request headers (431). It also reads requests the way curl sends them: a POST without a body
//! and without Content-Length has an empty body (RFC 9112 6.3, cpp-httplib 0.11 would wait for
//! the peer to close), and a body sent as application/x-www-form-urlencoded (`curl -d`) reaches
//! the handler as it came, instead of cpp-httplib's 8 KiB form limit answering 413. A request for
//! a known path with the wrong method gets 405 with an Allow header (routes added through get() /
//! post(), or add_vllm_routes).
//!
//! cpp-httplib 0.11 (Debian's, a split build) fixes a few limits when its library is compiled:
//! one header line at most CPPHTTPLIB_HEADER_MAX_LENGTH (8192) bytes, the request line at most
//! CPPHTTPLIB_REQUEST_URI_MAX_LENGTH (8192); longer ones are its 400. The limits here are checked
//! before cpp-httplib parses anything.

#if !defined(__has_include) || !__has_include(<httplib.h>)
#error "<weightsync/vllm/http_server.hpp> needs cpp-httplib (<httplib.h>)"
#endif
// cpp-httplib's compiled parts come with weightsync::http (which defines WEIGHTSYNC_LINKS_HTTP);
// without it a program would compile and then fail to link (undefined httplib::...).
#if !defined(WEIGHTSYNC_LINKS_HTTP)
#error "<weightsync/vllm/http_server.hpp>: link weightsync::http to use it (CMake: target_link_libraries(<target> PRIVATE weightsync::http); without CMake: link cpp-httplib, define WEIGHTSYNC_LINKS_HTTP=1)"
#define WEIGHTSYNC_LINKS_HTTP 0  // (said once per translation unit)
#endif

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "weightsync/detail/format.hpp"
#include "weightsync/error.hpp"

namespace weightsync::http {

//! What a ControlServer holds against its clients. Each is a trade-off between a slow but honest
//! client and how much one attacker can hold; the defaults suit a control plane on a trusted
//! network with a handful of trainers.
struct ServerLimits {
  //! Worker threads: requests served at once (a transfer's /update_weights holds one each).
  std::size_t threads = 8;
  //! Connections waiting for a worker; one more gets 503 (Retry-After: 1) at once.
  std::size_t max_queued = 64;
  //! The request line and every header must arrive within this (a slowloris client is dropped
  //! with 408).
  std::chrono::milliseconds header_timeout{10000};
  //! A whole request, headers and body, must arrive within this.
  std::chrono::milliseconds request_timeout{60000};
  //! Each wait for more bytes of a request, and each wait to send bytes of a reply.
  std::chrono::milliseconds read_timeout{5000};
  std::chrono::milliseconds write_timeout{5000};
  //! An idle keep-alive connection is closed after this; at most this many requests per
  //! connection.
  std::chrono::milliseconds keep_alive_timeout{5000};
  std::size_t keep_alive_max_count = 100;
  //! The request line and headers together, and the number of headers; more gets 431.
  std::size_t max_header_bytes = std::size_t{64} << 10;
  std::size_t max_header_count = 100;
};

namespace detail {

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

inline bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

//! One accepted connection as cpp-httplib's Stream: reads with deadlines through a buffer that
//! holds the request head ControlServer checked (and amended) before cpp-httplib parses it.
class LimitedStream final : public httplib::Stream {
 public:
  LimitedStream(int sock, const ServerLimits& l) : sock_(sock), l_(l) {}

  //! Waits until a byte is buffered or readable (false: none within `t`, or the peer closed).
  bool wait_readable(std::chrono::milliseconds t) {
    if (pos_ < buf_.size()) return true;
    return fill(Clock::now() + t) > 0;
  }
  //! Starts a request's deadline.
  void start_request() { request_deadline_ = Clock::now() + l_.request_timeout; }

  //! Reads the request line and headers into the buffer, checks them against the limits and
  //! amends them (see ControlServer). Returns 0, or the status to answer (408, 431, 400), or -1
  //! when the peer closed before a complete head.
  int read_head(std::string& why, std::size_t max_body) {
    const auto head_deadline = std::min(Clock::now() + l_.header_timeout, request_deadline_);
    std::size_t end;
    while ((end = buf_.find("\r\n\r\n", pos_)) == std::string::npos) {
      if (buf_.size() - pos_ > l_.max_header_bytes) {
        why = weightsync::detail::cat("the request line and headers exceed ", l_.max_header_bytes,
                                      " bytes (max_header_bytes)");
        return 431;
      }
      const auto k = fill(head_deadline);
      if (k == 0) {  // the deadline passed
        why = weightsync::detail::cat("the request headers did not arrive within ",
                                      l_.header_timeout.count(), " ms (header_timeout)");
        return buf_.size() > pos_ ? 408 : -1;
      }
      if (k < 0) return -1;
    }
    end += 4;
    if (end - pos_ > l_.max_header_bytes) {
      why = weightsync::detail::cat("the request line and headers exceed ", l_.max_header_bytes,
                                    " bytes (max_header_bytes)");
      return 431;
    }
    std::string_view head(buf_.data() + pos_, end - pos_);
    // The lines: the request line, the headers, the empty line.
    std::vector<std::string_view> lines;
    for (std::size_t a = 0; a < head.size();) {
      const std::size_t b = head.find("\r\n", a);
      lines.push_back(head.substr(a, b - a));
      a = b + 2;
    }
    if (lines.size() < 2) return 400;
    const std::size_t headers = lines.size() - 2;
    if (headers > l_.max_header_count) {
      why = weightsync::detail::cat("the request has ", headers, " headers, over the limit of ",
                                    l_.max_header_count, " (max_header_count)");
      return 431;
    }
    const std::string_view method = lines[0].substr(0, lines[0].find(' '));
    bool has_length = false;
    std::string amended;
    amended.reserve(head.size() + 32);
    amended.append(lines[0]).append("\r\n");
    for (std::size_t i = 1; i + 1 < lines.size(); ++i) {
      const std::string_view line = lines[i];
      const std::size_t colon = line.find(':');
      const std::string_view name = line.substr(0, colon);
      std::string_view value =
          colon == std::string_view::npos ? std::string_view{} : line.substr(colon + 1);
      while (!value.empty() && (value.front() == ' ' || value.front() == '\t'))
        value.remove_prefix(1);
      if (iequals(name, "Content-Length") || iequals(name, "Transfer-Encoding")) has_length = true;
      if (iequals(name, "Content-Length")) {
        std::uint64_t n = 0;
        const auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
        if (ec != std::errc{} || p != value.data() + value.size()) {
          why = weightsync::detail::cat("Content-Length '", value, "' is not a number");
          return 400;
        }
        if (n > max_body) {  // refused before a byte of it is read
          why = weightsync::detail::cat("request body of ", n, " bytes exceeds the limit of ",
                                        max_body, " bytes");
          return 413;
        }
      }
      if (iequals(name, "Content-Type") &&
          iequals(value.substr(0, std::min<std::size_t>(value.size(), 33)),
                  "application/x-www-form-urlencoded")) {
        // The body reaches the handler as it came (the routes read it as JSON whatever its
        // type); cpp-httplib would parse it as a form and refuse one over 8 KiB with 413.
        amended.append("X-Original-Content-Type: ").append(value).append("\r\n");
        continue;
      }
      amended.append(line).append("\r\n");
    }
    if (!has_length && (method == "POST" || method == "PUT" || method == "PATCH"))
      amended.append("Content-Length: 0\r\n");  // no length, no chunks: no body (RFC 9112 6.3)
    amended.append("\r\n");
    buf_.replace(pos_, end - pos_, amended);
    return 0;
  }

  //! Answers `status` with a JSON error and Connection: close, within the write timeout.
  void write_error(int status, const std::string& why) {
    const char* reason = status == 431   ? "Request Header Fields Too Large"
                         : status == 413 ? "Payload Too Large"
                         : status == 408 ? "Request Timeout"
                         : status == 503 ? "Service Unavailable"
                                         : "Bad Request";
    const std::string body = nlohmann::json{{"error", why}}.dump();
    const std::string msg = weightsync::detail::cat(
        "HTTP/1.1 ", status, " ", reason,
        "\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: ", body.size(),
        status == 503 ? "\r\nRetry-After: 1" : "", "\r\n\r\n", body);
    std::size_t off = 0;
    while (off < msg.size()) {
      const ssize_t k = write(msg.data() + off, msg.size() - off);
      if (k <= 0) return;
      off += static_cast<std::size_t>(k);
    }
  }

  bool is_readable() const override {
    if (pos_ < buf_.size()) return true;
    pollfd p{sock_, POLLIN, 0};
    return ::poll(&p, 1, static_cast<int>(l_.read_timeout.count())) > 0;
  }
  bool is_writable() const override {
    pollfd p{sock_, POLLOUT, 0};
    return ::poll(&p, 1, static_cast<int>(l_.write_timeout.count())) > 0;
  }
  ssize_t read(char* ptr, size_t size) override {
    if (pos_ == buf_.size()) {
      buf_.clear();
      pos_ = 0;
      if (fill(std::min(Clock::now() + l_.read_timeout, request_deadline_)) <= 0) return -1;
    }
    const std::size_t n = std::min(size, buf_.size() - pos_);
    std::memcpy(ptr, buf_.data() + pos_, n);
    pos_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    const auto deadline = Clock::now() + l_.write_timeout;
    while (true) {
      const ssize_t k = ::send(sock_, ptr, size, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (k >= 0) return k;
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      pollfd p{sock_, POLLOUT, 0};
      if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count()) + 1) <= 0) return -1;
    }
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
  using Clock = std::chrono::steady_clock;
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
  //! Appends what arrives before `deadline`: > 0 bytes read, 0 none in time, < 0 closed or error.
  ssize_t fill(Clock::time_point deadline) {
    if (pos_ > 0 && pos_ == buf_.size()) {
      buf_.clear();
      pos_ = 0;
    }
    char tmp[16384];
    while (true) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
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
  std::string buf_;
  std::size_t pos_ = 0;
  Clock::time_point request_deadline_ = Clock::time_point::max();
};

//! Half-closes, then reads and discards what the peer still sends (at most `max_bytes`, until it
//! is silent for `idle` or `total` passes), so that a client still sending its request sees our
//! answer rather than a reset; then closes.
inline void linger_close(int sock, std::size_t max_bytes, std::chrono::milliseconds idle,
                         std::chrono::milliseconds total) {
  ::shutdown(sock, SHUT_WR);
  const auto deadline = std::chrono::steady_clock::now() + total;
  char tmp[16384];
  std::size_t got = 0;
  while (got < max_bytes) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{sock, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(std::min(left, idle).count())) <= 0) break;
    const ssize_t k = ::recv(sock, tmp, sizeof tmp, MSG_DONTWAIT);
    if (k <= 0) break;
    got += static_cast<std::size_t>(k);
  }
  ::close(sock);
}

}  // namespace detail

//! A cpp-httplib server under ServerLimits (see the file comment). Use it where httplib::Server
//! is used; add routes with get()/post() (or Get/Post, without the 405 for them).
class ControlServer : public httplib::Server {
 public:
  explicit ControlServer(ServerLimits limits = {}) : limits_(limits) {
    new_task_queue = [this] {
      return new detail::BoundedPool(limits_.threads, limits_.max_queued);
    };
    set_read_timeout(limits_.read_timeout);
    set_write_timeout(limits_.write_timeout);
    set_keep_alive_max_count(limits_.keep_alive_max_count);
    set_keep_alive_timeout(std::max<time_t>(
        1,
        static_cast<time_t>(
            std::chrono::duration_cast<std::chrono::seconds>(limits_.keep_alive_timeout).count())));
  }
  ~ControlServer() override = default;

  const ServerLimits& limits() const noexcept { return limits_; }
  //! Connections answered 503 because every worker was busy and the queue full.
  std::size_t overloaded() const noexcept { return overloaded_.load(); }
  //! Requests refused before cpp-httplib read them: headers (431), too slow (408), a body
  //! announced over the payload limit (413).
  std::size_t refused_headers() const noexcept { return refused_headers_.load(); }

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

 private:
  bool process_and_close_socket(socket_t sock) override {
    if (detail::overloaded_connection) {
      ++overloaded_;
      detail::LimitedStream s(sock, limits_);
      s.write_error(503, weightsync::detail::cat("the server is busy: all ", limits_.threads,
                                                 " workers are serving and ", limits_.max_queued,
                                                 " connections wait (retry later)"));
      // In the accepting thread: never wait here.
      ::shutdown(sock, SHUT_WR);
      char tmp[4096];
      while (::recv(sock, tmp, sizeof tmp, MSG_DONTWAIT) > 0) {
      }
      ::close(sock);
      return true;
    }
    detail::LimitedStream s(sock, limits_);
    std::size_t discard = 0;  // > 0: answered early; read what the peer still sends
    for (std::size_t n = 0; n < limits_.keep_alive_max_count && is_running(); ++n) {
      if (!s.wait_readable(n == 0 ? limits_.header_timeout : limits_.keep_alive_timeout)) break;
      s.start_request();
      std::string why;
      const int st = s.read_head(why, payload_max_length_);
      if (st < 0) break;
      if (st > 0) {
        ++refused_headers_;
        s.write_error(st, why.empty() ? "malformed HTTP request" : why);
        // A refused body (413) is read and dropped, up to 64 MiB, so that a client that sends it
        // all before reading (curl, httplib) gets the answer; a refused head, 64 KiB.
        discard = st == 413 ? (std::size_t{64} << 20) : (std::size_t{64} << 10);
        break;
      }
      bool closed = false;
      const bool last = n + 1 == limits_.keep_alive_max_count || !is_running();
      if (!process_request(s, last, closed, nullptr) || closed) break;
    }
    if (discard) {
      detail::linger_close(sock, discard, std::chrono::milliseconds(1000), limits_.request_timeout);
    } else {
      ::shutdown(sock, SHUT_RDWR);
      ::close(sock);
    }
    return true;
  }

  ServerLimits limits_;
  mutable std::mutex routes_mu_;
  std::map<std::string, std::set<std::string>> routes_;
  std::atomic<std::size_t> overloaded_{0}, refused_headers_{0};
};

}  // namespace weightsync::http
