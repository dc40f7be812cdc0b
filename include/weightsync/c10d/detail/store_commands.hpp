// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! What each c10d TCPStore command does to StoreEngine's state: the keys and queues (StoreData)
//! and the pending WAITs (StoreWaiters), and the replies it produces, its own and those of the
//! WAITs it wakes. No sockets, no parsing: a decoded Request in, Replies out.

#include <cstddef>
#include <cstdint>
#include <ios>
#include <string>
#include <utility>
#include <vector>

#include "weightsync/c10d/detail/request_scan.hpp"
#include "weightsync/c10d/detail/store_data.hpp"
#include "weightsync/c10d/detail/store_waiters.hpp"
#include "weightsync/c10d/wire.hpp"
#include "weightsync/detail/format.hpp"

namespace weightsync::detail::c10d {

//! Bytes to send to one connection.
struct Reply {
  int conn;
  std::string bytes;
};

class StoreCommands {
 public:
  explicit StoreCommands(TcpStoreLimits lim) : data_(lim) {}

  void open(int conn) { waiters_.open(conn); }
  //! Forgets a connection and the keys it was waiting for.
  void close(int conn) { waiters_.close(conn); }
  //! Whether `conn` (an open connection) has a WAIT pending.
  bool waiting(int conn) const { return waiters_.waiting(conn); }
  const StoreData& data() const { return data_; }

  //! "" when the bookkeeping of the keys and of the WAITs is consistent, else what is wrong.
  std::string check_invariants() const {
    if (auto e = data_.check_invariants(); !e.empty()) return e;
    return waiters_.check_invariants(data_);
  }

  //! Runs request `q` of the open connection `conn`, appending its reply and those of the WAITs it
  //! wakes to `out`. Returns "" or, when the connection must be dropped, why.
  std::string execute(int conn, Request& q, std::vector<Reply>& out) {
    switch (q.cmd) {
      case Cmd::validate:
        return cat("VALIDATE after the connection's first query (magic 0x", std::hex, q.u32, ")");
      case Cmd::ping:
        return answer(conn, Out().u32(q.u32), out);
      case Cmd::set:
        return set(q.keys[0], std::move(q.values[0]), out);
      case Cmd::multi_set:
        return multi_set(q, out);
      case Cmd::append:
        return append(q.keys[0], q.values[0], out);
      case Cmd::compare_set:
        return compare_set(conn, q, out);
      case Cmd::get:
        return answer(conn, Out().str(data_.lookup(q.keys[0])), out);
      case Cmd::multi_get:
        return multi_get(conn, q, out);
      case Cmd::add:
        return add(conn, q.keys[0], q.number, out);
      case Cmd::num_keys:
        return answer(conn, Out().i64(static_cast<std::int64_t>(data_.kv().size())), out);
      case Cmd::delete_key:
        return delete_key(conn, q.keys[0], out);
      case Cmd::list:
        return list(conn, out);
      case Cmd::check:
        return answer(conn, Out().u8(data_.all_present(q.keys) ? 0 : 1), out);
      case Cmd::wait:
        return wait(conn, q, out);
      case Cmd::cancel_wait:
        waiters_.stop(conn);
        return answer(conn, Out().u8(1), out);
      case Cmd::queue_push:
        return queue_push(q.keys[0], std::move(q.values[0]), out);
      case Cmd::queue_pop:
        return queue_pop(conn, q.keys[0], out);
      case Cmd::queue_len:
        return answer(conn, Out().i64(static_cast<std::int64_t>(data_.queue_len(q.keys[0]))), out);
      default:
        return cat("unsupported query ", cmd_name(q.cmd));
    }
  }

 private:
  static std::string stop_waiting() { return std::string(1, '\0'); }

  //! Queues `o` for `conn`; an empty answer (MULTI_GET of no keys, as torch's server) sends
  //! nothing.
  static std::string answer(int conn, Out& o, std::vector<Reply>& out) {
    if (!o.bytes().empty()) out.push_back({conn, std::move(o.bytes())});
    return {};
  }

  //! Key `k` was written, deleted or popped (`was`: whether it existed before): answers the WAITs
  //! this completes, all of them or with `one` (QUEUE_PUSH) the first.
  void changed(const std::string& k, bool was, bool one, std::vector<Reply>& out) {
    for (int id : waiters_.changed(k, was, one, data_)) out.push_back({id, stop_waiting()});
  }

  std::string set(const std::string& k, std::string v, std::vector<Reply>& out) {
    const bool was = data_.present(k);
    if (auto e = data_.put(k, std::move(v)); !e.empty()) return e;
    changed(k, was, false, out);
    return {};
  }

  std::string multi_set(Request& q, std::vector<Reply>& out) {
    for (std::size_t i = 0; i < q.keys.size(); ++i)
      if (auto e = set(q.keys[i], std::move(q.values[i]), out); !e.empty()) return e;
    return {};
  }

  std::string append(const std::string& k, const std::string& more, std::vector<Reply>& out) {
    std::string v = data_.lookup(k);
    const std::size_t max = data_.limits().max_value_bytes;
    if (v.size() + more.size() > max)
      return cat("APPEND would grow '", k, "' to ", v.size() + more.size(),
                 " bytes, over the limit of ", max);
    v += more;
    return set(k, std::move(v), out);
  }

  //! torch's answer: the value after the operation, or `expected` for a missing key that was not
  //! created. libuv wakes the key's waiters in every branch; presence decides here.
  std::string compare_set(int conn, Request& q, std::vector<Reply>& out) {
    const std::string& k = q.keys[0];
    const std::string &expected = q.values[0], &desired = q.values[1];
    const bool was = data_.present(k);
    Out o;
    if (data_.kv().count(k) == 0) {
      if (expected.empty()) {
        if (auto e = data_.put(k, desired); !e.empty()) return e;
        o.str(desired);
      } else {
        o.str(expected);
      }
    } else {
      if (data_.lookup(k) == expected) {
        if (auto e = data_.put(k, desired); !e.empty()) return e;
      }
      o.str(data_.lookup(k));
    }
    answer(conn, o, out);
    changed(k, was, false, out);
    return {};
  }

  std::string multi_get(int conn, const Request& q, std::vector<Reply>& out) {
    std::size_t total = 0;
    for (const auto& k : q.keys) total += 8 + data_.lookup(k).size();
    const std::size_t max = data_.limits().max_reply_bytes;
    if (total > max)
      return cat("MULTI_GET of ", q.keys.size(), " keys would answer ", total,
                 " bytes, over the limit of ", max);
    Out o;
    o.bytes().reserve(total);
    for (const auto& k : q.keys) o.str(data_.lookup(k));
    return answer(conn, o, out);
  }

  std::string add(int conn, const std::string& k, std::int64_t delta, std::vector<Reply>& out) {
    const bool was = data_.present(k);
    std::int64_t v = 0;
    if (auto e = data_.counter(k, v); !e.empty()) return e;
    v = static_cast<std::int64_t>(static_cast<std::uint64_t>(v) +
                                  static_cast<std::uint64_t>(delta));
    if (auto e = data_.put(k, std::to_string(v)); !e.empty()) return e;
    answer(conn, Out().i64(v), out);
    changed(k, was, false, out);
    return {};
  }

  std::string delete_key(int conn, const std::string& k, std::vector<Reply>& out) {
    const bool was = data_.present(k);
    const std::int64_t n = data_.erase(k) ? 1 : 0;
    answer(conn, Out().i64(n), out);
    changed(k, was, false, out);
    return {};
  }

  std::string list(int conn, std::vector<Reply>& out) {
    const auto& kv = data_.kv();
    std::size_t total = 8;
    for (const auto& e : kv) total += 8 + e.first.size();
    const std::size_t max = data_.limits().max_reply_bytes;
    if (total > max)
      return cat("LIST of ", kv.size(), " keys would answer ", total, " bytes, over the limit of ",
                 max);
    Out o;
    o.bytes().reserve(total);
    o.i64(static_cast<std::int64_t>(kv.size()));
    for (const auto& e : kv) o.str(e.first);
    return answer(conn, o, out);
  }

  //! Answers at once when every key exists; else parks the connection until they all do.
  std::string wait(int conn, Request& q, std::vector<Reply>& out) {
    if (waiters_.waiting(conn)) return "WAIT while a previous WAIT is still pending";
    if (data_.all_present(q.keys)) return answer(conn, Out().u8(0), out);
    return waiters_.start(conn, std::move(q.keys), data_);
  }

  std::string queue_push(const std::string& k, std::string v, std::vector<Reply>& out) {
    const bool was = data_.present(k);
    if (auto e = data_.push(k, std::move(v)); !e.empty()) return e;
    changed(k, was, true, out);
    return {};
  }

  std::string queue_pop(int conn, const std::string& k, std::vector<Reply>& out) {
    const bool was = data_.present(k);
    std::string item;
    const std::size_t n = data_.pop(k, item);
    Out o;
    o.i64(static_cast<std::int64_t>(n));
    if (n == 0) return answer(conn, o, out);  // a missing queue: nothing popped, nobody to wake
    o.str(item);
    answer(conn, o, out);
    changed(k, was, true, out);  // items left: the next ready waiter may pop one
    return {};
  }

  StoreData data_;
  StoreWaiters waiters_;
};

}  // namespace weightsync::detail::c10d
