// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The state machine behind TcpStoreServer, without sockets: connections feed it bytes, it
//! answers with bytes for any connection (a SET wakes other connections' WAITs). Pure and
//! single-threaded, so that tests and fuzzers can drive it directly (store_fuzz_one).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "weightsync/detail/format.hpp"
#include "weightsync/host/tcp_store_wire.hpp"

namespace weightsync::detail::c10d {

//! Bytes to send to one connection.
struct Reply {
  int conn;
  std::string bytes;
};

class StoreEngine {
 public:
  explicit StoreEngine(TcpStoreLimits lim = {}, bool accept_torch1_13 = true)
      : lim_(lim), accept_old_(accept_torch1_13) {}

  void open(int conn) { conns_[conn] = Conn{}; }
  //! Forgets a connection and the keys it was waiting for.
  void close(int conn) {
    clear_waits(conn);
    conns_.erase(conn);
  }
  std::size_t connections() const { return conns_.size(); }
  std::size_t num_keys() const { return kv_.size(); }
  //! The dialect a connection turned out to speak (torch2 until it has sent anything).
  TcpStoreWire wire(int conn) const {
    auto it = conns_.find(conn);
    return it == conns_.end() ? TcpStoreWire::torch2 : it->second.wire;
  }
  //! True while a connection holds an incomplete request (the server bounds how long).
  bool partial(int conn) const {
    auto it = conns_.find(conn);
    return it != conns_.end() && !it->second.in.empty();
  }
  //! Bytes of keys and values held, as counted against TcpStoreLimits::max_store_bytes.
  std::size_t stored_bytes() const { return bytes_; }

  //! Recounts the state: "" when it is consistent, else what is not (for tests and the fuzzer).
  //! The byte count matches what is stored and stays within its bound; no empty queue or waiter
  //! list is kept (each would be memory no bound counts); every waiter is an open connection
  //! that still waits.
  std::string check_invariants() const {
    std::size_t n = 0;
    for (const auto& [k, v] : kv_) n += k.size() + v.size();
    for (const auto& [k, dq] : queues_) {
      if (dq.empty()) return cat("an empty queue '", k, "' is kept");
      for (const auto& v : dq) n += v.size();
    }
    if (n != bytes_) return cat("the store counts ", bytes_, " bytes but holds ", n);
    if (bytes_ > lim_.max_store_bytes)
      return cat("the store holds ", bytes_, " bytes, over its bound of ", lim_.max_store_bytes);
    for (const auto& [k, conns] : waiters_) {
      if (conns.empty()) return cat("an empty waiter list for '", k, "' is kept");
      for (int c : conns) {
        auto it = conns_.find(c);
        if (it == conns_.end()) return cat("connection ", c, " waits for '", k, "' but is closed");
        if (it->second.awaited == 0)
          return cat("connection ", c, " is listed as waiting for '", k, "' but waits for nothing");
      }
    }
    return {};
  }

  //! Feeds bytes received on `conn`; appends the replies to `out`. Returns "" or, when the
  //! connection must be dropped (garbage, over a bound, a bad handshake), the reason.
  std::string feed(int conn, std::string_view bytes, std::vector<Reply>& out) {
    auto it = conns_.find(conn);
    if (it == conns_.end()) return "unknown connection";
    Conn& c = it->second;
    c.in.append(bytes);
    std::size_t pos = 0;
    std::string why;
    while (pos < c.in.size()) {
      const std::string_view rest = std::string_view(c.in).substr(pos);
      if (!c.greeted) {
        if (rest.size() < 5 && rest[0] == 0) break;  // could still be VALIDATE
        std::uint32_t magic = 0;
        if (rest.size() >= 5) std::memcpy(&magic, rest.data() + 1, 4);
        c.greeted = true;
        if (rest[0] == 0 && magic == kValidationMagic) {
          c.wire = TcpStoreWire::torch2;
          pos += 5;
          continue;
        }
        if (!accept_old_) {
          why = cat("the first query is not torch 2.x's VALIDATE (byte ", int(std::uint8_t(rest[0])),
                    "); torch 1.13 clients are not accepted by this server");
          break;
        }
        c.wire = TcpStoreWire::torch1_13;
      }
      auto r = parse_request(rest, c.wire, lim_);
      if (r.status == Parse::need_more) break;
      if (r.status == Parse::bad) {
        why = r.error;
        break;
      }
      pos += r.used;
      why = execute(conn, r.req, out);
      if (!why.empty()) break;
    }
    c.in.erase(0, pos);
    return why;
  }

 private:
  struct Conn {
    std::string in;
    bool greeted = false;
    TcpStoreWire wire = TcpStoreWire::torch2;
    std::size_t awaited = 0;  // keys this connection's WAIT/BARRIER still waits for
  };

  static std::string stop_waiting() { return std::string(1, '\0'); }

  std::string execute(int conn, Request& q, std::vector<Reply>& out) {
    switch (q.cmd) {
      case Cmd::check:
      case Cmd::wait:
      case Cmd::cancel_wait:
      case Cmd::barrier:
      case Cmd::queue_push:
      case Cmd::queue_pop:
      case Cmd::queue_len: return execute_sync(conn, q, out);
      default: return execute_data(conn, q, out);
    }
  }

  //! Commands on keys and values.
  std::string execute_data(int conn, Request& q, std::vector<Reply>& out) {
    Out o;
    switch (q.cmd) {
      case Cmd::validate:
        return cat("VALIDATE after the connection's first query (magic 0x", std::hex, q.u32, ")");
      case Cmd::ping: o.u32(q.u32); break;
      case Cmd::set:
        if (auto e = put(q.keys[0], std::move(q.values[0])); !e.empty()) return e;
        wake(q.keys[0], out);
        return {};
      case Cmd::multi_set:
        for (std::size_t i = 0; i < q.keys.size(); ++i) {
          if (auto e = put(q.keys[i], std::move(q.values[i])); !e.empty()) return e;
          wake(q.keys[i], out);
        }
        return {};
      case Cmd::append: {
        auto it = kv_.find(q.keys[0]);
        std::string v = it == kv_.end() ? std::string() : it->second;
        v += q.values[0];
        if (auto e = put(q.keys[0], std::move(v)); !e.empty()) return e;
        wake(q.keys[0], out);
        return {};
      }
      case Cmd::compare_set: {
        auto it = kv_.find(q.keys[0]);
        if (it == kv_.end()) {
          if (q.values[0].empty()) {
            if (auto e = put(q.keys[0], q.values[1]); !e.empty()) return e;
            o.str(q.values[1]);
          } else {
            o.str(q.values[0]);  // torch answers the expected value for a missing key
          }
        } else {
          if (it->second == q.values[0]) {
            if (auto e = put(q.keys[0], q.values[1]); !e.empty()) return e;
          }
          o.str(kv_[q.keys[0]]);
        }
        wake(q.keys[0], out);
        break;
      }
      case Cmd::get: o.str(lookup(q.keys[0])); break;
      case Cmd::multi_get:
        for (const auto& k : q.keys) o.str(lookup(k));
        break;
      case Cmd::add: {
        std::int64_t v = 0;
        if (auto e = counter(q.keys[0], v); !e.empty()) return e;
        v = static_cast<std::int64_t>(static_cast<std::uint64_t>(v) + static_cast<std::uint64_t>(q.number));
        if (auto e = put(q.keys[0], std::to_string(v)); !e.empty()) return e;
        o.i64(v);
        out.push_back({conn, std::move(o.bytes())});
        wake(q.keys[0], out);
        return {};
      }
      case Cmd::num_keys: o.i64(static_cast<std::int64_t>(kv_.size())); break;
      case Cmd::delete_key: {
        auto it = kv_.find(q.keys[0]);
        std::int64_t n = 0;
        if (it != kv_.end()) {
          bytes_ -= it->first.size() + it->second.size();
          kv_.erase(it);
          n = 1;
        }
        o.i64(n);
        break;
      }
      case Cmd::list_keys:
        o.i64(static_cast<std::int64_t>(kv_.size()));
        for (const auto& [k, v] : kv_) o.str(k);
        break;
      case Cmd::watch_key:
      case Cmd::invalid: return "unsupported query";
      default: return "unsupported query";
    }
    if (!o.bytes().empty()) out.push_back({conn, std::move(o.bytes())});
    return {};
  }

  //! WAIT, CHECK, BARRIER and the queues: the commands that park or wake connections.
  std::string execute_sync(int conn, Request& q, std::vector<Reply>& out) {
    Out o;
    switch (q.cmd) {
      case Cmd::check: o.u8(all_present(q.keys) ? 0 : 1); break;
      case Cmd::wait: {
        if (conns_[conn].awaited != 0) return "WAIT while a previous WAIT is still pending";
        std::size_t n = 0;
        for (const auto& k : q.keys)
          if (!present(k)) {
            waiters_[k].push_back(conn);
            ++n;
          }
        if (n == 0) o.u8(0);
        conns_[conn].awaited = n;
        break;
      }
      case Cmd::cancel_wait:
        clear_waits(conn);
        o.u8(1);
        break;
      case Cmd::queue_push: {
        if (bytes_ + q.values[0].size() > lim_.max_store_bytes) return full(q.keys[0]);
        bytes_ += q.values[0].size();
        queues_[q.keys[0]].push_back(std::move(q.values[0]));
        wake_one(q.keys[0], out);
        return {};
      }
      case Cmd::queue_pop: {
        // (find, not []: a pop of a missing queue must not leave an entry that no bound counts)
        auto it = queues_.find(q.keys[0]);
        if (it == queues_.end()) {
          o.i64(0);
          break;
        }
        auto& dq = it->second;
        o.i64(static_cast<std::int64_t>(dq.size()));
        bytes_ -= dq.front().size();
        o.str(dq.front());
        dq.pop_front();
        if (dq.empty()) queues_.erase(it);
        break;
      }
      case Cmd::queue_len: {
        auto it = queues_.find(q.keys[0]);
        o.i64(it == queues_.end() ? 0 : static_cast<std::int64_t>(it->second.size()));
        break;
      }
      case Cmd::barrier: {
        if (conns_[conn].awaited != 0) return "BARRIER while a WAIT is still pending";
        std::int64_t n = 0;
        if (auto e = counter(q.keys[0], n); !e.empty()) return e;
        ++n;
        if (auto e = put(q.keys[0], std::to_string(n)); !e.empty()) return e;
        if (n >= q.number) {
          wake(q.keys[0], out);
          o.u8(0);
        } else {
          waiters_[q.keys[0]].push_back(conn);
          conns_[conn].awaited = 1;
        }
        break;
      }
      default: return "unsupported query";
    }
    if (!o.bytes().empty()) out.push_back({conn, std::move(o.bytes())});
    return {};
  }


  bool present(const std::string& k) const {
    if (kv_.count(k)) return true;
    auto it = queues_.find(k);
    return it != queues_.end() && !it->second.empty();
  }
  bool all_present(const std::vector<std::string>& keys) const {
    return std::all_of(keys.begin(), keys.end(), [&](const std::string& k) { return present(k); });
  }
  const std::string& lookup(const std::string& k) const {
    static const std::string empty;
    auto it = kv_.find(k);
    return it == kv_.end() ? empty : it->second;
  }
  std::string full(const std::string& k) const {
    return cat("storing '", k, "' would exceed the store's bound of ", lim_.max_store_bytes, " bytes");
  }
  std::string put(const std::string& k, std::string v) {
    auto it = kv_.find(k);
    const std::size_t old = it == kv_.end() ? 0 : k.size() + it->second.size();
    if (bytes_ - old + k.size() + v.size() > lim_.max_store_bytes) return full(k);
    bytes_ = bytes_ - old + k.size() + v.size();
    kv_[k] = std::move(v);
    return {};
  }
  //! The integer a counter key holds (absent: 0). torch stores counters as decimal text.
  std::string counter(const std::string& k, std::int64_t& v) const {
    auto it = kv_.find(k);
    if (it == kv_.end()) return {};
    const std::string& s = it->second;
    std::size_t i = (!s.empty() && s[0] == '-') ? 1 : 0;
    if (s.size() == i || s.size() > 20 ||
        !std::all_of(s.begin() + static_cast<std::ptrdiff_t>(i), s.end(),
                     [](char ch) { return ch >= '0' && ch <= '9'; }))
      return cat("ADD/BARRIER on key '", k, "' whose value is not an integer");
    try {
      v = std::stoll(s);
    } catch (...) {
      return cat("ADD/BARRIER on key '", k, "' whose value is out of range");
    }
    return {};
  }
  void wake(const std::string& k, std::vector<Reply>& out) {
    auto it = waiters_.find(k);
    if (it == waiters_.end()) return;
    for (int c : it->second) {
      auto ci = conns_.find(c);
      if (ci != conns_.end() && ci->second.awaited > 0 && --ci->second.awaited == 0)
        out.push_back({c, stop_waiting()});
    }
    waiters_.erase(it);
  }
  void wake_one(const std::string& k, std::vector<Reply>& out) {
    auto it = waiters_.find(k);
    if (it == waiters_.end()) return;
    auto& v = it->second;
    for (std::size_t i = 0; i < v.size(); ++i) {
      auto ci = conns_.find(v[i]);
      if (ci != conns_.end() && ci->second.awaited > 0 && --ci->second.awaited == 0) {
        out.push_back({v[i], stop_waiting()});
        v.erase(v.begin() + static_cast<std::ptrdiff_t>(i));
        break;
      }
    }
    if (v.empty()) waiters_.erase(it);
  }
  void clear_waits(int conn) {
    auto ci = conns_.find(conn);
    if (ci == conns_.end() || ci->second.awaited == 0) return;
    ci->second.awaited = 0;
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      std::erase(it->second, conn);
      it = it->second.empty() ? waiters_.erase(it) : std::next(it);
    }
  }

  TcpStoreLimits lim_;
  bool accept_old_;
  std::unordered_map<int, Conn> conns_;
  std::map<std::string, std::string> kv_;
  std::unordered_map<std::string, std::vector<int>> waiters_;
  std::unordered_map<std::string, std::deque<std::string>> queues_;
  std::size_t bytes_ = 0;
};

}  // namespace weightsync::detail::c10d

namespace weightsync::detail {

namespace c10d {

//! Feeds `stream` to connection `conn` of `e` in pieces of `piece` bytes until it is dropped;
//! returns the replies to `conn` back to back, the drop reason in `why`.
inline std::string store_fuzz_feed(StoreEngine& e, int conn, std::string_view stream,
                                   std::size_t piece, std::string& why) {
  std::vector<Reply> out;
  std::string replies;
  for (std::size_t pos = 0; pos < stream.size() && why.empty(); pos += piece) {
    why = e.feed(conn, stream.substr(pos, piece), out);
    for (auto& r : out) replies += r.bytes;
    out.clear();
  }
  return replies;
}

}  // namespace c10d

//! libFuzzer-friendly entry (tests/fuzz/fuzz_tcp_store.cpp, and a random-input unit test). Byte 0
//! chooses how the rest, a client's byte stream (a torch 2.x client opens with VALIDATE), is fed
//! to a fresh StoreEngine with small limits: in pieces of 1, 2, 3, 5, 8, 13, 64 bytes or at once
//! (bits 0-2), to one connection or, with bit 3, to two connections that send the same stream
//! interleaved piece by piece (one's SETs then wake the other's WAITs). Checks, after every piece,
//! that replies go only to open connections and that StoreEngine::check_invariants holds; for one
//! connection, that the replies and the verdict do not depend on how the stream was cut.
//! Returns 0, or 1 when a check failed (`why`, when given, says which). Never throws.
inline int store_fuzz_one(const std::uint8_t* data, std::size_t size, std::string* why = nullptr) {
  auto failed = [&](std::string what) {
    if (why) *why = std::move(what);
    return 1;
  };
  if (size == 0) return 0;
  TcpStoreLimits lim;
  lim.max_key_bytes = 64;
  lim.max_value_bytes = 512;
  lim.max_keys_per_request = 16;
  lim.max_store_bytes = 2048;
  static constexpr std::size_t kPieces[8] = {1, 2, 3, 5, 8, 13, 64, std::size_t(-1)};
  const std::size_t piece = kPieces[data[0] & 7];
  const bool two = (data[0] & 8) != 0;
  const std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (!two) {
    c10d::StoreEngine whole(lim), cut(lim);
    whole.open(1);
    cut.open(1);
    std::string why_whole, why_cut;
    const std::string a = c10d::store_fuzz_feed(whole, 1, in, in.size() + 1, why_whole);
    const std::string b = c10d::store_fuzz_feed(cut, 1, in, piece, why_cut);
    if (a != b) return failed(cat("replies differ when the stream is cut in pieces of ", piece));
    if (why_whole != why_cut)
      return failed(cat("verdict differs when cut in pieces of ", piece, ": '", why_whole,
                        "' vs '", why_cut, "'"));
    if (whole.num_keys() != cut.num_keys() || whole.stored_bytes() != cut.stored_bytes())
      return failed("the store differs when the stream is cut in pieces");
    for (auto* e : {&whole, &cut})
      if (auto bad = e->check_invariants(); !bad.empty()) return failed(bad);
    whole.close(1);
    cut.close(1);
    if (auto bad = cut.check_invariants(); !bad.empty()) return failed("after close: " + bad);
    return 0;
  }
  c10d::StoreEngine e(lim);
  e.open(1);
  e.open(2);
  bool alive[3] = {false, true, true};
  std::vector<c10d::Reply> out;
  for (std::size_t pos = 0; pos < in.size() && (alive[1] || alive[2]); pos += piece) {
    for (int c = 1; c <= 2; ++c) {
      if (!alive[c]) continue;
      const bool drop = !e.feed(c, in.substr(pos, piece), out).empty();
      for (const auto& r : out)
        if (r.conn < 1 || r.conn > 2 || !alive[r.conn])
          return failed(cat("a reply to connection ", r.conn, ", which is not open"));
      out.clear();
      if (drop) {
        e.close(c);
        alive[c] = false;
      }
      if (auto bad = e.check_invariants(); !bad.empty()) return failed(bad);
    }
  }
  e.close(1);
  e.close(2);
  if (e.connections() != 0) return failed("connections left after closing both");
  if (auto bad = e.check_invariants(); !bad.empty()) return failed("after close: " + bad);
  return 0;
}

}  // namespace weightsync::detail
