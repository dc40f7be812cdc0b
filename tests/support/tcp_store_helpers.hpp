// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! What the c10d TCPStore tests (tests/unit/tcp_store_*_test.cpp, store_group_test.cpp) share:
//! client options, raw connections that send what no well-behaved client sends, a log capture,
//! request bytes in torch's dialects, a StoreEngine driven directly, and a scripted fake peer.

#include <weightsync/c10d/client.hpp>
#include <weightsync/c10d/detail/store_engine.hpp>
#include <weightsync/c10d/server.hpp>
#include <weightsync/log.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "support/catch.hpp"

namespace ws_test::tcp_store {

inline weightsync::TcpStoreClientOptions copts(
    int port, weightsync::TcpStoreWire wire = weightsync::TcpStoreWire::torch2,
    std::chrono::milliseconds t = std::chrono::milliseconds(5000)) {
  weightsync::TcpStoreClientOptions o;
  o.port = port;
  o.wire = wire;
  o.timeout = t;
  return o;
}

// A raw connection for sending what no well-behaved client sends.
inline weightsync::detail::Fd raw_connect(int port) {
  return weightsync::detail::connect_tcp(
      "127.0.0.1", port, weightsync::detail::Deadline::after(std::chrono::milliseconds(2000)),
      "test", 0);
}
inline void raw_send(const weightsync::detail::Fd& fd, const std::string& b) {
  weightsync::detail::send_all(fd.get(), b.data(), b.size(),
                               weightsync::detail::Deadline::after(std::chrono::milliseconds(1000)),
                               "test", 0);
}
// True when the server closes the connection before `t` passes.
inline bool closed_within(const weightsync::detail::Fd& fd, std::chrono::milliseconds t) {
  const auto d = weightsync::detail::Deadline::after(t);
  while (!d.expired()) {
    if (weightsync::detail::peer_closed(fd.get())) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}
inline std::string validate_bytes() {
  weightsync::detail::c10d::Out o;
  o.u8(0).u32(weightsync::detail::c10d::kValidationMagic);
  return o.bytes();
}
inline bool refused_within(const weightsync::TcpStoreServer& s, std::size_t n,
                           std::chrono::milliseconds t) {
  const auto d = weightsync::detail::Deadline::after(t);
  while (!d.expired()) {
    if (s.refused() >= n) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}
inline void set_quiet() {
  weightsync::set_log_handler([](weightsync::LogLevel, std::string_view) {});
}
// Collects the log lines (the server logs from its own thread).
struct LogCapture {
  std::mutex m;
  std::vector<std::string> lines;
  LogCapture() {
    weightsync::set_log_handler([this](weightsync::LogLevel, std::string_view s) {
      std::lock_guard<std::mutex> g(m);
      lines.emplace_back(s);
    });
  }
  ~LogCapture() { weightsync::set_log_handler(nullptr); }
  bool has(const std::string& needle,
           std::chrono::milliseconds t = std::chrono::milliseconds(2000)) {
    const auto d = weightsync::detail::Deadline::after(t);
    do {
      {
        std::lock_guard<std::mutex> g(m);
        for (const auto& l : lines)
          if (l.find(needle) != std::string::npos) return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    } while (!d.expired());
    return false;
  }
};

using weightsync::detail::c10d::Cmd;
inline std::uint8_t qb(Cmd c, weightsync::TcpStoreWire w = weightsync::TcpStoreWire::torch2) {
  return static_cast<std::uint8_t>(weightsync::detail::c10d::byte_of(c, w));
}
// One request's bytes in the torch 2.x dialect.
inline weightsync::detail::c10d::Out req(Cmd c) {
  weightsync::detail::c10d::Out o;
  o.u8(qb(c));
  return o;
}
inline std::string keys_req(Cmd c, const std::vector<std::string>& keys) {
  auto o = req(c);
  o.u64(keys.size());
  for (const auto& k : keys) o.str(k);
  return o.bytes();
}

// Drives a StoreEngine directly: connections that said VALIDATE, their replies collected.
struct Engine {
  weightsync::detail::c10d::StoreEngine e;
  std::vector<weightsync::detail::c10d::Reply> out;
  explicit Engine(weightsync::TcpStoreLimits l = {}) : e(l) {}
  void open(int c) {
    e.open(c);
    REQUIRE(feed(c, validate_bytes()).empty());
  }
  std::string feed(int c, const std::string& b) { return e.feed(c, b, out); }
  // Everything answered to `c` so far (and forgets it).
  std::string replies(int c) {
    std::string r;
    for (auto it = out.begin(); it != out.end();) {
      if (it->conn == c) {
        r += it->bytes;
        it = out.erase(it);
      } else {
        ++it;
      }
    }
    return r;
  }
  std::string ok() { return e.check_invariants(); }
};
inline std::string i64_bytes(std::int64_t v) {
  weightsync::detail::c10d::Out o;
  o.i64(v);
  return o.bytes();
}
inline std::string str_bytes(const std::string& s) {
  weightsync::detail::c10d::Out o;
  o.str(s);
  return o.bytes();
}

// A scripted peer on a free port: accepts one connection and runs `script` on it.
struct FakePeer {
  weightsync::detail::Fd listener = weightsync::detail::listen_tcp("127.0.0.1", 0);
  int port = weightsync::detail::local_port(listener.get());
  std::thread t;
  template <class F>
  void run(F script) {
    t = std::thread([this, script] {
      try {
        auto fd = weightsync::detail::accept_tcp(
            listener.get(), weightsync::detail::Deadline::after(std::chrono::milliseconds(5000)));
        if (fd) script(fd);
      } catch (...) {
      }
    });
  }
  ~FakePeer() {
    if (t.joinable()) t.join();
  }
};
// Reads torch 2.4's opening (VALIDATE + PING) and answers the PING.
inline void answer_handshake(const weightsync::detail::Fd& fd) {
  char b[10];
  weightsync::detail::recv_all(fd.get(), b, 10,
                               weightsync::detail::Deadline::after(std::chrono::milliseconds(2000)),
                               "fake", 0);
  raw_send(fd, std::string(b + 6, 4));
}
inline std::string recv_n(const weightsync::detail::Fd& fd, std::size_t n,
                          std::chrono::milliseconds t = std::chrono::milliseconds(2000)) {
  std::string b(n, '\0');
  weightsync::detail::recv_all(fd.get(), b.data(), n, weightsync::detail::Deadline::after(t),
                               "test", 0);
  return b;
}
inline std::chrono::milliseconds since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                               t0);
}

}  // namespace ws_test::tcp_store
