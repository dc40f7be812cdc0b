// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! A c10d TCPStore client: joins a store hosted by torch.distributed.TCPStore (torch's legacy or
//! libuv server) or by TcpStoreServer, and sends what torch's own client sends: VALIDATE and PING
//! on connect (torch 2.x dialect), then set/get/add/... Keys get torch's "/" prefix, so
//! `client.set("k")` and Python's `store.set("k")` name the same entry. Every call is bounded by
//! the client's timeout (connect, each request, WAIT); a WAIT that times out is cancelled the way
//! torch cancels it. Not thread-safe: one request at a time per client.

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "weightsync/detail/format.hpp"
#include "weightsync/detail/socket.hpp"
#include "weightsync/error.hpp"
#include "weightsync/host/tcp_store_wire.hpp"

namespace weightsync {

struct TcpStoreClientOptions {
  std::string host = "127.0.0.1";
  int port = 0;
  std::chrono::milliseconds timeout{300000};  //!< connect, each request, each wait
  //! torch1_13 for a torch 1.13 server: no VALIDATE/PING, no APPEND/MULTI_*/CANCEL_WAIT (a timed
  //! out wait closes the connection, as torch 1.13's own client does).
  TcpStoreWire wire = TcpStoreWire::torch2;
  bool ping = true;               //!< torch >= 2.4 clients ping after VALIDATE (torch2 only)
  std::string key_prefix = "/";   //!< what torch's TCPStore prepends to the Python API's keys
  TcpStoreLimits limits;          //!< bounds on the replies this client accepts
};

class TcpStoreClient {
 public:
  TcpStoreClient() = default;

  //! Connects (retrying a refused connection until the timeout, as the server may start later)
  //! and validates. @throws timeout_error("store connect"), protocol_error when the peer is no
  //! TCPStore (wrong PING answer), peer_error when it closes the connection.
  static TcpStoreClient connect(TcpStoreClientOptions o) {
    TcpStoreClient c;
    c.o_ = std::move(o);
    if (c.o_.port < 1 || c.o_.port > 65535)
      throw config_error("master_port", detail::cat("must be in 1..65535, got ", c.o_.port));
    const auto deadline = detail::Deadline::after(c.o_.timeout);
    c.fd_ = detail::connect_tcp(c.o_.host, c.o_.port, deadline, "store connect", 0);
    if (c.o_.wire == TcpStoreWire::torch2) {
      detail::c10d::Out q;
      q.u8(0).u32(detail::c10d::kValidationMagic);
      if (c.o_.ping) {
        const auto nonce = static_cast<std::uint32_t>(::getpid());
        q.u8(13).u32(nonce);
        c.send(q.bytes(), "PING");
        std::uint32_t back = 0;
        c.recv(&back, 4, "PING");
        if (back != nonce)
          throw protocol_error(0, detail::cat("the TCPStore at ", c.where(), " answered PING ", nonce,
                                              " with ", back, ": not a torch TCPStore server"));
      } else {
        c.send(q.bytes(), "VALIDATE");
      }
    }
    return c;
  }

  const TcpStoreClientOptions& options() const noexcept { return o_; }
  bool connected() const noexcept { return static_cast<bool>(fd_); }

  void set(std::string_view key, std::string_view value) {
    auto q = start(detail::c10d::Cmd::set);
    q.str(full(key)).str(value);
    send(q.bytes(), "SET");
  }
  //! Blocks (bounded) until the key exists, like torch's get.
  std::string get(std::string_view key) {
    wait({std::string(key)});
    auto q = start(detail::c10d::Cmd::get);
    q.str(full(key));
    send(q.bytes(), "GET");
    return recv_bytes("GET", o_.limits.max_value_bytes);
  }
  std::int64_t add(std::string_view key, std::int64_t delta) { return add_raw(full(key), delta); }
  //! ADD on a key sent as is (torch's join counter "init/" has no prefix).
  std::int64_t add_raw(const std::string& wire_key, std::int64_t delta) {
    auto q = start(detail::c10d::Cmd::add);
    q.str(wire_key).i64(delta);
    send(q.bytes(), "ADD");
    std::int64_t v = 0;
    recv(&v, 8, "ADD");
    return v;
  }
  std::string compare_set(std::string_view key, std::string_view expected, std::string_view desired) {
    auto q = start(detail::c10d::Cmd::compare_set);
    q.str(full(key)).str(expected).str(desired);
    send(q.bytes(), "COMPARE_SET");
    return recv_bytes("COMPARE_SET", o_.limits.max_value_bytes);
  }
  bool check(const std::vector<std::string>& keys) {
    auto q = key_list(detail::c10d::Cmd::check, keys);
    send(q.bytes(), "CHECK");
    std::uint8_t r = 0;
    recv(&r, 1, "CHECK");
    if (r > 1) throw protocol_error(0, detail::cat("CHECK answered ", int(r), " (expected 0 or 1)"));
    return r == 0;
  }
  //! Waits until every key exists. @throws timeout_error("store wait") naming the keys.
  void wait(const std::vector<std::string>& keys) { wait(keys, o_.timeout); }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
    auto q = key_list(detail::c10d::Cmd::wait, keys);
    send(q.bytes(), "WAIT");
    std::uint8_t r = 0;
    if (recv_or_timeout(&r, timeout)) {
      if (r != 0) throw protocol_error(0, detail::cat("WAIT answered ", int(r), " (expected 0)"));
      return;
    }
    std::string names;
    for (const auto& k : keys) names += (names.empty() ? "'" : ", '") + k + "'";
    if (o_.wire == TcpStoreWire::torch1_13) {
      // torch 1.13 has no CANCEL_WAIT: like its own client, give the connection up.
      fd_.reset();
      throw timeout_error("store wait", 0,
                          detail::cat("key(s) ", names, " not set in the TCPStore at ", where(),
                                      " within ", timeout.count(),
                                      " ms (torch 1.13 dialect: the connection is closed)"));
    }
    // Cancel, as torch does: the server answers WAIT_CANCELED, possibly after a late STOP_WAITING.
    auto c = start(detail::c10d::Cmd::cancel_wait);
    send(c.bytes(), "CANCEL_WAIT");
    recv(&r, 1, "CANCEL_WAIT");
    if (r == 0) recv(&r, 1, "CANCEL_WAIT");
    if (r != 1) throw protocol_error(0, detail::cat("CANCEL_WAIT answered ", int(r)));
    throw timeout_error("store wait", 0, detail::cat("key(s) ", names, " not set in the TCPStore at ",
                                                     where(), " within ", timeout.count(), " ms"));
  }
  std::int64_t num_keys() {
    send(start(detail::c10d::Cmd::num_keys).bytes(), "GETNUMKEYS");
    std::int64_t v = 0;
    recv(&v, 8, "GETNUMKEYS");
    return v;
  }
  bool delete_key(std::string_view key) {
    auto q = start(detail::c10d::Cmd::delete_key);
    q.str(full(key));
    send(q.bytes(), "DELETE_KEY");
    std::int64_t v = 0;
    recv(&v, 8, "DELETE_KEY");
    return v == 1;
  }
  void append(std::string_view key, std::string_view value) {
    auto q = start(detail::c10d::Cmd::append);
    q.str(full(key)).str(value);
    send(q.bytes(), "APPEND");
  }
  //! Values of keys that exist now (a missing key reads as empty, as torch's servers answer).
  std::vector<std::string> multi_get(const std::vector<std::string>& keys) {
    auto q = key_list(detail::c10d::Cmd::multi_get, keys);
    send(q.bytes(), "MULTI_GET");
    std::vector<std::string> v;
    for (std::size_t i = 0; i < keys.size(); ++i) v.push_back(recv_bytes("MULTI_GET", o_.limits.max_value_bytes));
    return v;
  }
  void multi_set(const std::vector<std::pair<std::string, std::string>>& kv) {
    auto q = start(detail::c10d::Cmd::multi_set);
    q.u64(kv.size());
    for (const auto& [k, v] : kv) q.str(full(k)).str(v);
    send(q.bytes(), "MULTI_SET");
  }
  //! Round trip with a nonce. torch2 dialect only.
  void ping(std::uint32_t nonce) {
    auto q = start(detail::c10d::Cmd::ping);
    q.u32(nonce);
    send(q.bytes(), "PING");
    std::uint32_t back = 0;
    recv(&back, 4, "PING");
    if (back != nonce) throw protocol_error(0, detail::cat("PING ", nonce, " answered ", back));
  }

  //! Sends raw bytes (tests: garbage, truncated requests).
  void send_raw(std::string_view bytes) { send(bytes, "raw"); }

 private:
  std::string where() const { return detail::cat(o_.host, ":", o_.port); }
  std::string full(std::string_view key) const { return o_.key_prefix + std::string(key); }

  detail::c10d::Out start(detail::c10d::Cmd c) const {
    const int b = detail::c10d::byte_of(c, o_.wire);
    // torch 1.13's server knows the query bytes 0..8 only (APPEND and later came with 2.0).
    if (b < 0 || (o_.wire == TcpStoreWire::torch1_13 && b > 8))
      throw state_error(detail::cat("TCPStore: ", detail::c10d::cmd_name(c),
                                    " does not exist in torch 1.13's dialect"));
    if (!fd_) throw state_error("TCPStore client used before connect() or after a failure");
    detail::c10d::Out q;
    q.u8(static_cast<std::uint8_t>(b));
    return q;
  }
  detail::c10d::Out key_list(detail::c10d::Cmd c, const std::vector<std::string>& keys) const {
    auto q = start(c);
    q.u64(keys.size());
    for (const auto& k : keys) q.str(full(k));
    return q;
  }
  template <class F>
  auto guarded(F&& f) {
    try {
      return f();
    } catch (...) {
      fd_.reset();  // the stream is out of step after any failure: no further use
      throw;
    }
  }
  void send(std::string_view b, const char* what) {
    guarded([&] {
      detail::send_all(fd_.get(), b.data(), b.size(), detail::Deadline::after(o_.timeout),
                       detail::cat("store ", what), 0);
    });
  }
  void recv(void* p, std::size_t n, const char* what) {
    guarded([&] {
      detail::recv_all(fd_.get(), p, n, detail::Deadline::after(o_.timeout), detail::cat("store ", what), 0);
    });
  }
  std::string recv_bytes(const char* what, std::size_t max) {
    std::uint64_t n = 0;
    recv(&n, 8, what);
    if (n > max) {
      fd_.reset();
      throw protocol_error(0, detail::cat(what, " reply announces ", n, " bytes, over the limit of ",
                                          max, " (is ", where(), " a TCPStore?)"));
    }
    std::string s(static_cast<std::size_t>(n), '\0');
    recv(s.data(), s.size(), what);
    return s;
  }
  bool recv_or_timeout(std::uint8_t* b, std::chrono::milliseconds t) {
    return guarded([&] {
      try {
        detail::recv_all(fd_.get(), b, 1, detail::Deadline::after(t), "store WAIT", 0);
        return true;
      } catch (const timeout_error&) {
        return false;
      }
    });
  }

  TcpStoreClientOptions o_;
  detail::Fd fd_;
};

}  // namespace weightsync
