// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The state machine behind TcpStoreServer, without sockets: connections feed it bytes, it
//! answers with bytes for any connection (a SET wakes other connections' WAITs). Pure and
//! single-threaded, so that tests and fuzzers can drive it directly (store_fuzz_one).
//!
//! Waking follows presence, not torch's counters: a WAIT is answered once every key it names
//! exists (a key, or a non-empty queue), whatever happened in between. torch's servers count
//! down one per SET of an awaited key instead, and libuv's also wakes on every COMPARE_SET, even
//! one that leaves the key missing, after which the client's GET reads empty bytes; here such a
//! waiter keeps waiting. QUEUE_PUSH wakes one waiter whose keys all exist (libuv's
//! wakeupOneWaitingClient), so that one pushed item is popped by one client.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "weightsync/detail/c10d/request_scan.hpp"
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
  explicit StoreEngine(TcpStoreLimits lim = {}, bool accept_old_clients = true)
      : lim_(lim), accept_old_(accept_old_clients) {}

  void open(int conn) { conns_[conn] = Conn{}; }
  //! Forgets a connection and the keys it was waiting for.
  void close(int conn) {
    stop_wait(conn);
    conns_.erase(conn);
  }
  std::size_t connections() const { return conns_.size(); }
  std::size_t num_keys() const { return kv_.size(); }
  //! Queues that hold at least one item (an empty queue is not stored).
  std::size_t num_queues() const { return queues_.size(); }
  //! What the stored keys, values and queue items cost against max_store_bytes.
  std::size_t stored_bytes() const { return bytes_; }
  //! The dialect a connection turned out to speak (torch2 until it has sent anything; torch2_0
  //! for every client without the VALIDATE handshake, torch 1.13's included).
  TcpStoreWire wire(int conn) const {
    auto it = conns_.find(conn);
    return it == conns_.end() ? TcpStoreWire::torch2 : it->second.wire;
  }
  //! True while a connection holds an incomplete request (the server bounds how long).
  bool partial(int conn) const {
    auto it = conns_.find(conn);
    return it != conns_.end() && !it->second.in.empty();
  }
  //! Tests only: called before each request runs; whatever it throws stands for a request that
  //! fails half-way (bad_alloc, say).
  std::function<void(Cmd)> fault_hook;

  //! Feeds bytes received on `conn`; appends the replies to `out`. Returns "" or, when the
  //! connection must be dropped (garbage, over a bound, a bad handshake, a request that threw,
  //! a request after more than `reply_budget` bytes of replies to `conn` from these bytes: a
  //! peer that sends requests without reading the answers), the reason; the caller then closes it.
  //! A request that throws (bad_alloc, say) is a returned reason too, and its bytes are gone:
  //! requests are consumed before they run, so that none is ever executed twice.
  std::string feed(int conn, std::string_view bytes, std::vector<Reply>& out,
                   std::size_t reply_budget = static_cast<std::size_t>(-1)) {
    auto it = conns_.find(conn);
    if (it == conns_.end()) return "unknown connection";
    Conn& c = it->second;
    std::string why;
    try {
      c.in.append(bytes);
      why = drain(conn, c, out, reply_budget);
    } catch (const std::exception& e) {
      why = e.what();
      why.insert(0, "the request failed on the server: ");
    } catch (...) {
      why = "the request failed on the server";
    }
    if (!why.empty()) {
      c.in.clear();
      c.scan = {};
    }
    return why;
  }

  //! "" when the engine's bookkeeping is consistent, else what is wrong (store_fuzz_one aborts):
  //! the byte count equals what the entries cost, no entry is above a limit, no queue is empty,
  //! and every pending WAIT is registered under exactly its keys with the right missing count.
  std::string check_invariants() const {
    std::size_t sum = 0;
    for (const auto& [k, v] : kv_) {
      sum += cost(k) + cost(v);
      if (k.size() > lim_.max_key_bytes) return cat("key '", k, "' over max_key_bytes");
      if (v.size() > lim_.max_value_bytes) return cat("value of '", k, "' over max_value_bytes");
    }
    for (const auto& [k, q] : queues_) {
      if (q.empty()) return cat("empty queue '", k, "' stored");
      sum += cost(k);
      for (const auto& v : q) {
        sum += cost(v);
        if (v.size() > lim_.max_value_bytes) return cat("item of '", k, "' over max_value_bytes");
      }
    }
    if (sum != bytes_) return cat("stored_bytes ", bytes_, " but the entries cost ", sum);
    if (bytes_ > lim_.max_store_bytes) return cat("stored_bytes ", bytes_, " over the bound");
    std::size_t registrations = 0, wait_bytes = 0;
    for (const auto& [id, c] : conns_) {
      if (!c.waiting) {
        if (!c.wait_keys.empty() || c.missing) return cat("conn ", id, ": stale wait state");
        continue;
      }
      std::size_t missing = 0;
      for (const auto& k : c.wait_keys) {
        missing += present(k) ? 0 : 1;
        wait_bytes += cost(k);
        auto w = waiters_.find(k);
        if (w == waiters_.end() || std::count(w->second.begin(), w->second.end(), id) != 1)
          return cat("conn ", id, " waits for '", k, "' but is not registered once under it");
      }
      registrations += c.wait_keys.size();
      if (missing != c.missing)
        return cat("conn ", id, " counts ", c.missing, " missing keys, ", missing, " are missing");
    }
    std::size_t listed = 0;
    for (const auto& [k, ids] : waiters_) {
      if (ids.empty()) return cat("empty waiter list for '", k, "'");
      listed += ids.size();
    }
    if (listed != registrations)
      return cat(listed, " waiter registrations, ", registrations, " expected");
    if (wait_bytes != wait_bytes_)
      return cat("wait_bytes ", wait_bytes_, ", expected ", wait_bytes);
    return {};
  }

 private:
  struct Conn {
    std::string in;
    ScanState scan;
    bool greeted = false;
    TcpStoreWire wire = TcpStoreWire::torch2;
    bool waiting = false;                // a WAIT is pending
    std::vector<std::string> wait_keys;  // its distinct keys
    std::size_t missing = 0;             // how many of them do not exist
  };

  static std::string stop_waiting() { return std::string(1, '\0'); }
  static std::size_t cost(const std::string& s) { return s.size() + kStoreEntryOverhead; }

  std::string drain(int conn, Conn& c, std::vector<Reply>& out, std::size_t budget) {
    std::size_t pos = 0, replied = 0;
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
          why =
              cat("the first query is not torch 2.x's VALIDATE (byte ", int(std::uint8_t(rest[0])),
                  "); clients of torch < 2.1 are not accepted by this server");
          break;
        }
        c.wire = TcpStoreWire::torch2_0;
      }
      if (replied > budget) {
        why = cat(replied, " bytes of replies pile up unread, over the limit of ", budget,
                  " (the peer sends requests without reading the answers)");
        break;
      }
      if (rest.size() < c.scan.need) break;  // the request's next field is not all here yet
      const auto s = scan_request(rest, c.wire, lim_, c.scan);
      if (s.status == Parse::need_more) break;
      if (s.status == Parse::bad) {
        why = s.error;
        break;
      }
      Request q = decode_request(rest.substr(0, s.used), c.scan.cmd);
      c.scan = {};
      pos += s.used;
      if (fault_hook) fault_hook(q.cmd);
      const std::size_t mark = out.size();
      why = execute(conn, q, out);
      if (!why.empty()) break;
      for (std::size_t i = mark; i < out.size(); ++i)
        if (out[i].conn == conn) replied += out[i].bytes.size();
    }
    c.in.erase(0, pos);
    return why;
  }

  std::string execute(int conn, Request& q, std::vector<Reply>& out) {
    switch (q.cmd) {
      case Cmd::check:
      case Cmd::wait:
      case Cmd::cancel_wait:
      case Cmd::queue_push:
      case Cmd::queue_pop:
      case Cmd::queue_len:
        return execute_sync(conn, q, out);
      default:
        return execute_data(conn, q, out);
    }
  }

  //! Commands on keys and values.
  std::string execute_data(int conn, Request& q, std::vector<Reply>& out) {
    Out o;
    switch (q.cmd) {
      case Cmd::validate:
        return cat("VALIDATE after the connection's first query (magic 0x", std::hex, q.u32, ")");
      case Cmd::ping:
        o.u32(q.u32);
        break;
      case Cmd::set:
        return set(q.keys[0], std::move(q.values[0]), out);
      case Cmd::multi_set:
        for (std::size_t i = 0; i < q.keys.size(); ++i)
          if (auto e = set(q.keys[i], std::move(q.values[i]), out); !e.empty()) return e;
        return {};
      case Cmd::append: {
        auto it = kv_.find(q.keys[0]);
        std::string v = it == kv_.end() ? std::string() : it->second;
        if (v.size() + q.values[0].size() > lim_.max_value_bytes)
          return cat("APPEND would grow '", q.keys[0], "' to ", v.size() + q.values[0].size(),
                     " bytes, over the limit of ", lim_.max_value_bytes);
        v += q.values[0];
        return set(q.keys[0], std::move(v), out);
      }
      case Cmd::compare_set: {
        // torch's answer: the value after the operation, or `expected` for a missing key that
        // was not created. libuv wakes the key's waiters in every branch; presence decides here.
        const bool was = present(q.keys[0]);
        auto it = kv_.find(q.keys[0]);
        if (it == kv_.end()) {
          if (q.values[0].empty()) {
            if (auto e = put(q.keys[0], q.values[1]); !e.empty()) return e;
            o.str(q.values[1]);
          } else {
            o.str(q.values[0]);
          }
        } else {
          if (it->second == q.values[0]) {
            if (auto e = put(q.keys[0], q.values[1]); !e.empty()) return e;
          }
          o.str(kv_.at(q.keys[0]));
        }
        out.push_back({conn, std::move(o.bytes())});
        changed(q.keys[0], was, false, out);
        return {};
      }
      case Cmd::get:
        o.str(lookup(q.keys[0]));
        break;
      case Cmd::multi_get: {
        std::size_t total = 0;
        for (const auto& k : q.keys) total += 8 + lookup(k).size();
        if (total > lim_.max_reply_bytes)
          return cat("MULTI_GET of ", q.keys.size(), " keys would answer ", total,
                     " bytes, over the limit of ", lim_.max_reply_bytes);
        o.bytes().reserve(total);
        for (const auto& k : q.keys) o.str(lookup(k));
        break;
      }
      case Cmd::add: {
        const bool was = present(q.keys[0]);
        std::int64_t v = 0;
        if (auto e = counter(q.keys[0], v); !e.empty()) return e;
        v = static_cast<std::int64_t>(static_cast<std::uint64_t>(v) +
                                      static_cast<std::uint64_t>(q.number));
        if (auto e = put(q.keys[0], std::to_string(v)); !e.empty()) return e;
        o.i64(v);
        out.push_back({conn, std::move(o.bytes())});
        changed(q.keys[0], was, false, out);
        return {};
      }
      case Cmd::num_keys:
        o.i64(static_cast<std::int64_t>(kv_.size()));
        break;
      case Cmd::delete_key: {
        const bool was = present(q.keys[0]);
        auto it = kv_.find(q.keys[0]);
        std::int64_t n = 0;
        if (it != kv_.end()) {
          bytes_ -= cost(it->first) + cost(it->second);
          kv_.erase(it);
          n = 1;
        }
        o.i64(n);
        out.push_back({conn, std::move(o.bytes())});
        changed(q.keys[0], was, false, out);
        return {};
      }
      case Cmd::list: {
        std::size_t total = 8;
        for (const auto& kv : kv_) total += 8 + kv.first.size();
        if (total > lim_.max_reply_bytes)
          return cat("LIST of ", kv_.size(), " keys would answer ", total,
                     " bytes, over the limit of ", lim_.max_reply_bytes);
        o.bytes().reserve(total);
        o.i64(static_cast<std::int64_t>(kv_.size()));
        for (const auto& kv : kv_) o.str(kv.first);
        break;
      }
      default:
        return cat("unsupported query ", cmd_name(q.cmd));
    }
    if (!o.bytes().empty()) out.push_back({conn, std::move(o.bytes())});
    return {};
  }

  //! WAIT, CHECK, CANCEL_WAIT and the queues: the commands that park or wake connections.
  std::string execute_sync(int conn, Request& q, std::vector<Reply>& out) {
    Out o;
    Conn& c = conns_.at(conn);
    switch (q.cmd) {
      case Cmd::check:
        o.u8(all_present(q.keys) ? 0 : 1);
        break;
      case Cmd::wait: {
        if (c.waiting) return "WAIT while a previous WAIT is still pending";
        if (all_present(q.keys)) {
          o.u8(0);
          break;
        }
        std::sort(q.keys.begin(), q.keys.end());
        q.keys.erase(std::unique(q.keys.begin(), q.keys.end()), q.keys.end());
        std::size_t more = 0;
        for (const auto& k : q.keys) more += cost(k);
        if (wait_bytes_ + more > lim_.max_store_bytes)
          return cat("WAIT on ", q.keys.size(), " keys: the pending WAITs' keys would exceed ",
                     lim_.max_store_bytes, " bytes");
        wait_bytes_ += more;
        for (const auto& k : q.keys) {
          waiters_[k].push_back(conn);
          c.missing += present(k) ? 0 : 1;
        }
        c.wait_keys = std::move(q.keys);
        c.waiting = true;
        break;
      }
      case Cmd::cancel_wait:
        stop_wait(conn);
        o.u8(1);
        break;
      case Cmd::queue_push: {
        const std::string& k = q.keys[0];
        const bool was = present(k);
        auto it = queues_.find(k);
        const std::size_t more = cost(q.values[0]) + (it == queues_.end() ? cost(k) : 0);
        if (bytes_ + more > lim_.max_store_bytes) return full(k);
        if (it == queues_.end()) it = queues_.emplace(k, std::deque<std::string>{}).first;
        it->second.push_back(std::move(q.values[0]));
        bytes_ += more;
        changed(k, was, true, out);
        return {};
      }
      case Cmd::queue_pop: {
        const std::string& k = q.keys[0];
        auto it = queues_.find(k);  // a pop on a missing queue creates nothing
        if (it == queues_.end()) {
          o.i64(0);
          break;
        }
        const bool was = present(k);
        auto& dq = it->second;
        o.i64(static_cast<std::int64_t>(dq.size()));
        o.str(dq.front());
        bytes_ -= cost(dq.front());
        dq.pop_front();
        if (dq.empty()) {
          bytes_ -= cost(k);
          queues_.erase(it);
        }
        out.push_back({conn, std::move(o.bytes())});
        changed(k, was, true, out);  // items left: the next ready waiter may pop one
        return {};
      }
      case Cmd::queue_len: {
        auto it = queues_.find(q.keys[0]);
        o.i64(it == queues_.end() ? 0 : static_cast<std::int64_t>(it->second.size()));
        break;
      }
      default:
        return cat("unsupported query ", cmd_name(q.cmd));
    }
    if (!o.bytes().empty()) out.push_back({conn, std::move(o.bytes())});
    return {};
  }

  bool present(const std::string& k) const { return kv_.count(k) != 0 || queues_.count(k) != 0; }
  bool all_present(const std::vector<std::string>& keys) const {
    return std::all_of(keys.begin(), keys.end(), [&](const std::string& k) { return present(k); });
  }
  const std::string& lookup(const std::string& k) const {
    static const std::string empty;
    auto it = kv_.find(k);
    return it == kv_.end() ? empty : it->second;
  }
  std::string full(const std::string& k) const {
    return cat("storing '", k, "' would exceed the store's bound of ", lim_.max_store_bytes,
               " bytes");
  }
  std::string put(const std::string& k, std::string v) {
    auto it = kv_.find(k);
    const std::size_t old = it == kv_.end() ? 0 : cost(k) + cost(it->second);
    if (bytes_ - old + cost(k) + cost(v) > lim_.max_store_bytes) return full(k);
    bytes_ = bytes_ - old + cost(k) + cost(v);
    if (it == kv_.end())
      kv_.emplace(k, std::move(v));
    else
      it->second = std::move(v);
    return {};
  }
  std::string set(const std::string& k, std::string v, std::vector<Reply>& out) {
    const bool was = present(k);
    if (auto e = put(k, std::move(v)); !e.empty()) return e;
    changed(k, was, false, out);
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
      return cat("ADD on key '", k, "' whose value is not an integer");
    try {
      v = std::stoll(s);
    } catch (...) {
      return cat("ADD on key '", k, "' whose value is out of range");
    }
    return {};
  }
  //! Key `k` was written, deleted or popped (`was`: whether it existed before). Updates the
  //! missing counts of the connections waiting for it and wakes those whose keys all exist: all
  //! of them, or with `one` (QUEUE_PUSH) the first.
  void changed(const std::string& k, bool was, bool one, std::vector<Reply>& out) {
    auto it = waiters_.find(k);
    if (it == waiters_.end()) return;
    const bool now = present(k);
    if (now != was)
      for (int id : it->second) {
        Conn& c = conns_.at(id);
        c.missing = now ? c.missing - 1 : c.missing + 1;
      }
    if (!now) return;
    std::vector<int> ready;
    for (int id : it->second)
      if (conns_.at(id).missing == 0) {
        ready.push_back(id);
        if (one) break;
      }
    for (int id : ready) {
      stop_wait(id);
      out.push_back({id, stop_waiting()});
    }
  }
  //! Forgets a connection's pending WAIT (answered, cancelled or closed).
  void stop_wait(int conn) {
    auto ci = conns_.find(conn);
    if (ci == conns_.end() || !ci->second.waiting) return;
    Conn& c = ci->second;
    for (const auto& k : c.wait_keys) {
      wait_bytes_ -= cost(k);
      auto it = waiters_.find(k);
      if (it == waiters_.end()) continue;
      std::erase(it->second, conn);
      if (it->second.empty()) waiters_.erase(it);
    }
    c.wait_keys.clear();
    c.missing = 0;
    c.waiting = false;
  }

  TcpStoreLimits lim_;
  bool accept_old_;
  std::unordered_map<int, Conn> conns_;
  std::map<std::string, std::string> kv_;
  std::unordered_map<std::string, std::vector<int>> waiters_;        // key -> its pending WAITs
  std::unordered_map<std::string, std::deque<std::string>> queues_;  // never empty
  std::size_t bytes_ = 0;                                            // what kv_ and queues_ cost
  std::size_t wait_bytes_ = 0;  // what the pending WAITs' keys cost
};

}  // namespace weightsync::detail::c10d

namespace weightsync::detail {

//! libFuzzer-friendly entry: feeds `data` to a fresh StoreEngine as two interleaved connections
//! (split at the first byte's value), in small pieces, then checks what must hold whatever the
//! input: the engine's bookkeeping (StoreEngine::check_invariants), replies only to open
//! connections, and a fresh torch 2.x connection still answered (VALIDATE, then PING). Any
//! violation calls std::abort(), which libFuzzer reports. Never throws; returns 0 like
//! LLVMFuzzerTestOneInput.
inline int store_fuzz_one(const std::uint8_t* data, std::size_t size) {
  TcpStoreLimits lim;
  lim.max_key_bytes = 256;
  lim.max_value_bytes = 4096;
  lim.max_keys_per_request = 64;
  lim.max_request_bytes = 16384;
  lim.max_reply_bytes = 16384;
  lim.max_store_bytes = 1 << 16;
  c10d::StoreEngine e(lim);
  e.open(1);
  e.open(2);
  std::vector<c10d::Reply> out;
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const std::size_t split = size ? (data[0] % 8) + 1 : 1;
  bool alive[3] = {false, true, true};
  auto check = [&] {
    if (!e.check_invariants().empty()) std::abort();
    for (const auto& r : out)
      if (r.conn < 1 || r.conn > 2 || !alive[r.conn] || r.bytes.empty()) std::abort();
    out.clear();
  };
  for (std::size_t pos = 0, turn = 0; pos < in.size(); pos += split, ++turn) {
    const int c = 1 + static_cast<int>(turn % 2);
    if (!alive[c]) continue;
    const std::string why = e.feed(c, in.substr(pos, split), out);
    check();  // before closing: the replies of a connection's last good requests are legitimate
    if (!why.empty()) {
      e.close(c);
      alive[c] = false;
      check();
    }
  }
  e.close(1);
  e.close(2);
  alive[1] = alive[2] = false;
  check();
  // Whatever came before, a well-behaved client is served.
  e.open(3);
  c10d::Out hello;
  hello.u8(0).u32(c10d::kValidationMagic).u8(13).u32(0x5eed1234u);
  if (!e.feed(3, hello.bytes(), out).empty()) std::abort();
  if (out.size() != 1 || out[0].conn != 3 || out[0].bytes != std::string("\x34\x12\xed\x5e", 4))
    std::abort();
  out.clear();
  e.close(3);
  if (!e.check_invariants().empty() || e.connections() != 0) std::abort();
  return 0;
}

}  // namespace weightsync::detail
