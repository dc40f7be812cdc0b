// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! A c10d TCPStore client: joins a store hosted by torch.distributed.TCPStore (torch's legacy or
//! libuv server) or by TcpStoreServer, and sends what torch's own client sends: VALIDATE and PING
//! on connect (torch >= 2.1 dialect), then set/get/add/... Keys get torch's "/" prefix, so
//! `client.set("k")` and Python's `store.set("k")` name the same entry. Every call is bounded:
//! connect and validation share one deadline (the timeout), each request gets the timeout, a WAIT
//! its own timeout, after which it is cancelled the way torch cancels it. Replies are bounded by
//! `limits` (a value's length, a reply's total). Not thread-safe: one request at a time per client.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "weightsync/c10d/detail/store_connect.hpp"
#include "weightsync/c10d/wire.hpp"
#include "weightsync/detail/format.hpp"
#include "weightsync/detail/socket.hpp"
#include "weightsync/error.hpp"

namespace weightsync {

struct TcpStoreClientOptions {
  std::string host = "127.0.0.1";
  int port = 0;
  std::chrono::milliseconds timeout{300000};  //!< connect + validation together, each request, WAIT
  //! torch >= 2.1 (torch2, ping on): how long connect waits for the store to answer VALIDATE +
  //! PING, at most `timeout`, retrying connections the store resets meanwhile (torch's client
  //! retries a full listen backlog the same way). A store of torch < 2.1 never answers torch 2.x's
  //! handshake (1.13 resets it): the error then says which dialect to use.
  std::chrono::milliseconds validate_timeout{10000};
  //! torch2_0 / torch1_13 for a store of torch 2.0 / 1.13: no VALIDATE/PING; 1.13 also lacks
  //! APPEND, MULTI_*, CANCEL_WAIT (a timed-out wait closes the connection, as 1.13's client does).
  TcpStoreWire wire = TcpStoreWire::torch2;
  bool ping = true;              //!< torch >= 2.4 clients ping after VALIDATE (torch2 only)
  std::string key_prefix = "/";  //!< what torch's TCPStore prepends to the Python API's keys
  TcpStoreLimits limits;         //!< bounds on the replies this client accepts
};

class TcpStoreClient {
 public:
  TcpStoreClient() = default;

  //! Connects (retrying a refused connection, as the server may start later) and validates, all
  //! within `timeout`. @throws timeout_error("store connect") naming the address when nobody
  //! accepts; timeout_error("store validate") / protocol_error naming the dialect when the peer
  //! does not answer torch 2.x's handshake within validate_timeout; protocol_error when it answers
  //! PING wrongly (no TCPStore); peer_error, at once, when the store refused the connection (a
  //! TcpStoreServer that is full says so; without PING, the first request's answer says so).
  static TcpStoreClient connect(TcpStoreClientOptions o) {
    TcpStoreClient c;
    c.o_ = std::move(o);
    if (c.o_.port < 1 || c.o_.port > 65535)
      throw config_error("master_port", detail::cat("must be in 1..65535, got ", c.o_.port));
    const auto deadline = detail::Deadline::after(c.o_.timeout);
    if (c.o_.wire != TcpStoreWire::torch2 || !c.o_.ping) {
      c.fd_ = detail::connect_tcp(c.o_.host, c.o_.port, deadline, "store connect", 0);
      c.unanswered_ = true;  // a refusal, if any, comes before the first answer
      if (c.o_.wire == TcpStoreWire::torch2) {
        detail::c10d::Out q;
        q.u8(0).u32(detail::c10d::kValidationMagic);
        c.deadline_ = deadline;
        c.send(q.bytes(), "VALIDATE");
      }
      return c;
    }
    // The validation window opens with the first accepted connection, inside the deadline.
    const auto window_ms = std::min(c.o_.validate_timeout, c.o_.timeout);
    c.fd_ = detail::c10d::connect_validated(c.o_.host, c.o_.port, deadline, window_ms);
    c.deadline_ = detail::Deadline::after(c.o_.timeout);
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
  std::string compare_set(std::string_view key, std::string_view expected,
                          std::string_view desired) {
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
    if (r > 1)
      throw protocol_error(0, detail::cat("CHECK answered ", int(r), " (expected 0 or 1)"));
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
    if (detail::c10d::byte_of(detail::c10d::Cmd::cancel_wait, o_.wire) < 0) {
      // torch 1.13 has no CANCEL_WAIT: like its own client, give the connection up.
      fd_.reset();
      throw timeout_error(
          "store wait", 0,
          detail::cat("key(s) ", names, " not set in the TCPStore at ", where(), " within ",
                      timeout.count(), " ms (torch 1.13 dialect: the connection is closed)"));
    }
    // Cancel, as torch does: the server answers WAIT_CANCELED, possibly after a late STOP_WAITING.
    auto c = start(detail::c10d::Cmd::cancel_wait);
    send(c.bytes(), "CANCEL_WAIT");
    recv(&r, 1, "CANCEL_WAIT");
    if (r == 0) recv(&r, 1, "CANCEL_WAIT");
    if (r != 1) {
      fd_.reset();
      throw protocol_error(0, detail::cat("CANCEL_WAIT answered ", int(r), " (expected 1)"));
    }
    throw timeout_error("store wait", 0,
                        detail::cat("key(s) ", names, " not set in the TCPStore at ", where(),
                                    " within ", timeout.count(), " ms"));
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
  //! Waits (bounded) until every key exists, then reads them in one request, as torch's
  //! multi_get does (torch's legacy server drops a connection that MULTI_GETs a missing key).
  //! @throws timeout_error("store wait") naming the keys; protocol_error when the reply exceeds
  //! limits.max_reply_bytes.
  std::vector<std::string> multi_get(const std::vector<std::string>& keys) {
    auto q = key_list(detail::c10d::Cmd::multi_get, keys);  // refuses old dialects first
    wait(keys);
    deadline_ = detail::Deadline::after(o_.timeout);
    send(q.bytes(), "MULTI_GET");
    std::vector<std::string> v;
    v.reserve(keys.size());
    std::size_t total = 0;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      v.push_back(recv_bytes("MULTI_GET", o_.limits.max_value_bytes));
      total += 8 + v.back().size();
      if (total > o_.limits.max_reply_bytes) {
        fd_.reset();
        throw protocol_error(0, detail::cat("MULTI_GET reply from ", where(), " exceeds ",
                                            o_.limits.max_reply_bytes, " bytes"));
      }
    }
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

  //! Appends `value` to the queue `key` (torch's queue_push). torch2 dialect; torch's libuv
  //! server or TcpStoreServer (torch's legacy server has no queues and drops the connection).
  void queue_push(std::string_view key, std::string_view value) {
    auto q = start(detail::c10d::Cmd::queue_push);
    q.str(full(key)).str(value);
    send(q.bytes(), "QUEUE_PUSH");
  }
  //! Pops the oldest item of queue `key` without waiting; std::nullopt when it is empty (torch's
  //! queue_pop(block=False) raises instead).
  std::optional<std::string> try_queue_pop(std::string_view key) {
    auto q = start(detail::c10d::Cmd::queue_pop);
    q.str(full(key));
    send(q.bytes(), "QUEUE_POP");
    std::int64_t n = 0;
    recv(&n, 8, "QUEUE_POP");
    if (n < 0) {
      fd_.reset();
      throw protocol_error(0, detail::cat("QUEUE_POP answered a length of ", n));
    }
    if (n == 0) return std::nullopt;
    return recv_bytes("QUEUE_POP", o_.limits.max_value_bytes);
  }
  //! Waits up to `timeout` for an item of queue `key` and pops it, as torch's queue_pop(block=True)
  //! does (WAIT, then QUEUE_POP; waits again when another client popped the item first).
  //! @throws timeout_error("store queue_pop") naming the queue.
  std::string queue_pop(std::string_view key, std::chrono::milliseconds timeout) {
    const auto deadline = detail::Deadline::after(timeout);
    while (true) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline.at - detail::Clock::now());
      try {
        wait({std::string(key)}, std::max(left, std::chrono::milliseconds(0)));
      } catch (const timeout_error&) {
        throw timeout_error("store queue_pop", 0,
                            detail::cat("queue '", key, "' in the TCPStore at ", where(),
                                        " got no item within ", timeout.count(), " ms"));
      }
      if (auto v = try_queue_pop(key)) return std::move(*v);
    }
  }
  std::string queue_pop(std::string_view key) { return queue_pop(key, o_.timeout); }
  //! Items in queue `key` (0 for a queue never pushed to).
  std::int64_t queue_len(std::string_view key) {
    auto q = start(detail::c10d::Cmd::queue_len);
    q.str(full(key));
    send(q.bytes(), "QUEUE_LEN");
    std::int64_t v = 0;
    recv(&v, 8, "QUEUE_LEN");
    return v;
  }
  //! LIST: the keys under this client's key_prefix, the prefix removed, as torch's
  //! TCPStore.list() returns them (keys outside the prefix, such as "init/", are left out).
  //! @throws protocol_error when the reply exceeds limits.max_reply_bytes.
  std::vector<std::string> list_keys() {
    send(start(detail::c10d::Cmd::list).bytes(), "LIST");
    std::int64_t n = 0;
    recv(&n, 8, "LIST");
    if (n < 0 || static_cast<std::uint64_t>(n) > o_.limits.max_reply_bytes / 8) {
      fd_.reset();
      throw protocol_error(
          0, detail::cat("LIST reply from ", where(), " announces ", n,
                         " keys, over the reply bound of ", o_.limits.max_reply_bytes, " bytes"));
    }
    std::vector<std::string> keys;
    std::size_t total = 8;
    for (std::int64_t i = 0; i < n; ++i) {
      std::string k = recv_bytes("LIST", o_.limits.max_key_bytes);
      total += 8 + k.size();
      if (total > o_.limits.max_reply_bytes) {
        fd_.reset();
        throw protocol_error(0, detail::cat("LIST reply from ", where(), " exceeds ",
                                            o_.limits.max_reply_bytes, " bytes"));
      }
      if (k.compare(0, o_.key_prefix.size(), o_.key_prefix) == 0)
        keys.push_back(k.substr(o_.key_prefix.size()));
    }
    return keys;
  }

  //! Sends raw bytes (tests: garbage, truncated requests).
  void send_raw(std::string_view bytes) {
    deadline_ = detail::Deadline::after(o_.timeout);
    send(bytes, "raw");
  }

 private:
  std::string where() const { return detail::cat(o_.host, ":", o_.port); }
  std::string full(std::string_view key) const { return o_.key_prefix + std::string(key); }

  //! Starts a request: checks the dialect has the command and opens the request's deadline.
  detail::c10d::Out start(detail::c10d::Cmd c) {
    const int b = detail::c10d::byte_of(c, o_.wire);
    if (b < 0)
      throw state_error(detail::cat("TCPStore: ", detail::c10d::cmd_name(c), " does not exist in ",
                                    tcp_store_wire_name(o_.wire), "'s dialect"));
    if (!fd_) throw state_error("TCPStore client used before connect() or after a failure");
    deadline_ = detail::Deadline::after(o_.timeout);
    detail::c10d::Out q;
    q.u8(static_cast<std::uint8_t>(b));
    return q;
  }
  detail::c10d::Out key_list(detail::c10d::Cmd c, const std::vector<std::string>& keys) {
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
      detail::send_all(fd_.get(), b.data(), b.size(), deadline_, detail::cat("store ", what), 0);
    });
  }
  void recv(void* p, std::size_t n, const char* what) {
    guarded([&] {
      check_refusal(deadline_);
      detail::recv_all(fd_.get(), p, n, deadline_, detail::cat("store ", what), 0);
    });
  }
  //! Before a connection's first answer (it opened without PING): a refusal, if that is what came.
  void check_refusal(detail::Deadline d) {
    if (!unanswered_) return;
    const std::string why = detail::c10d::store_refusal(fd_.get(), d);
    if (!why.empty()) throw detail::c10d::store_refused(where(), why);
    unanswered_ = d.expired();  // something else came: an answer
  }
  std::string recv_bytes(const char* what, std::size_t max) {
    std::uint64_t n = 0;
    recv(&n, 8, what);
    if (n > max) {
      fd_.reset();
      throw protocol_error(
          0, detail::cat(what, " reply announces ", n, " bytes, over the limit of ", max, " (is ",
                         where(), " a TCPStore?)"));
    }
    std::string s(static_cast<std::size_t>(n), '\0');
    recv(s.data(), s.size(), what);
    return s;
  }
  bool recv_or_timeout(std::uint8_t* b, std::chrono::milliseconds t) {
    return guarded([&] {
      try {
        const auto d = detail::Deadline::after(t);
        check_refusal(d);
        detail::recv_all(fd_.get(), b, 1, d, "store WAIT", 0);
        return true;
      } catch (const timeout_error&) {
        return false;
      }
    });
  }

  TcpStoreClientOptions o_;
  detail::Fd fd_;
  detail::Deadline deadline_{};  // the current request's
  bool unanswered_ = false;      // opened without PING and nothing read yet
};

}  // namespace weightsync
