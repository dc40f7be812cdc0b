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
//!
//! The parts: the keys and queues and their bounds (c10d/detail/store_data.hpp), the pending
//! WAITs (store_waiters.hpp), what each command does (store_commands.hpp), and reading requests
//! (request_scan.hpp). This header holds the connections: the handshake, the dialect, the bytes
//! not yet read, the reply budget.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "weightsync/c10d/detail/request_scan.hpp"
#include "weightsync/c10d/detail/store_commands.hpp"
#include "weightsync/c10d/wire.hpp"
#include "weightsync/detail/format.hpp"

namespace weightsync::detail::c10d {

class StoreEngine {
 public:
  explicit StoreEngine(TcpStoreLimits lim = {}, bool accept_old_clients = true)
      : lim_(lim), accept_old_(accept_old_clients), store_(lim) {}

  void open(int conn) {
    conns_[conn] = Conn{};
    store_.open(conn);
  }
  //! Forgets a connection and the keys it was waiting for.
  void close(int conn) {
    store_.close(conn);
    conns_.erase(conn);
  }
  std::size_t connections() const { return conns_.size(); }
  std::size_t num_keys() const { return store_.data().kv().size(); }
  //! Queues that hold at least one item (an empty queue is not stored).
  std::size_t num_queues() const { return store_.data().num_queues(); }
  //! What the stored keys, values and queue items cost against max_store_bytes.
  std::size_t stored_bytes() const { return store_.data().bytes(); }
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
  //! The bytes of `conn`'s incomplete request held so far (the server's memory budget counts them).
  std::size_t pending_bytes(int conn) const {
    auto it = conns_.find(conn);
    return it == conns_.end() ? 0 : it->second.in.size();
  }
  //! Whether `conn` has a WAIT pending (it may then be silent for as long as the WAIT lasts).
  bool waiting(int conn) const { return conns_.count(conn) != 0 && store_.waiting(conn); }
  //! Whether `conn` has had a request run other than VALIDATE and PING (a SET, GET, ADD, WAIT...):
  //! what a rank does, and a flood of idle or PINGing connections does not.
  bool worked(int conn) const {
    auto it = conns_.find(conn);
    return it != conns_.end() && it->second.worked;
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
  std::string check_invariants() const { return store_.check_invariants(); }

 private:
  struct Conn {
    std::string in;
    ScanState scan;
    bool greeted = false;
    bool worked = false;  // a request other than VALIDATE and PING ran
    TcpStoreWire wire = TcpStoreWire::torch2;
  };

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
      why = store_.execute(conn, q, out);
      if (!why.empty()) break;
      c.worked = c.worked || q.cmd != Cmd::ping;
      for (std::size_t i = mark; i < out.size(); ++i)
        if (out[i].conn == conn) replied += out[i].bytes.size();
    }
    c.in.erase(0, pos);
    if (c.in.empty() && c.in.capacity() > (std::size_t{64} << 10)) std::string().swap(c.in);
    return why;
  }

  TcpStoreLimits lim_;
  bool accept_old_;
  std::unordered_map<int, Conn> conns_;
  StoreCommands store_;
};

}  // namespace weightsync::detail::c10d

namespace weightsync::detail {

namespace c10d {

//! Feeds `stream` to a fresh connection of a fresh engine in pieces of `piece` bytes until it is
//! dropped; returns the replies back to back, and the drop reason in `why`.
inline std::string store_fuzz_replies(const TcpStoreLimits& lim, std::string_view stream,
                                      std::size_t piece, std::string& why) {
  StoreEngine e(lim);
  e.open(1);
  std::vector<Reply> out;
  std::string replies;
  for (std::size_t pos = 0; pos < stream.size() && why.empty(); pos += piece) {
    why = e.feed(1, stream.substr(pos, piece), out);
    for (auto& r : out) replies += r.bytes;
    out.clear();
  }
  return replies;
}

}  // namespace c10d

//! libFuzzer-friendly entry: feeds `data` to a fresh StoreEngine as two interleaved connections
//! (split at the first byte's value), in small pieces, then checks what must hold whatever the
//! input: the engine's bookkeeping (StoreEngine::check_invariants), replies only to open
//! connections, a fresh torch 2.x connection still answered (VALIDATE, then PING), and, fed to one
//! connection, the same replies and verdict whether the stream comes at once or in pieces. Never
//! throws. Returns 0; on a violation, 1 with `why` set when `why` is given, else std::abort()
//! (which libFuzzer reports).
inline int store_fuzz_one(const std::uint8_t* data, std::size_t size, std::string* why = nullptr) {
  bool violated = false;
  auto fail = [&](const std::string& what) {
    if (!why) std::abort();
    if (!violated) *why = what;
    violated = true;
  };
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
    if (auto bad = e.check_invariants(); !bad.empty()) fail(bad);
    for (const auto& r : out)
      if (r.conn < 1 || r.conn > 2 || !alive[r.conn] || r.bytes.empty())
        fail(cat("a reply to connection ", r.conn, ", which is not open or sent nothing"));
    out.clear();
  };
  for (std::size_t pos = 0, turn = 0; pos < in.size() && !violated; pos += split, ++turn) {
    const int c = 1 + static_cast<int>(turn % 2);
    if (!alive[c]) continue;
    const std::string reason = e.feed(c, in.substr(pos, split), out);
    check();  // before closing: the replies of a connection's last good requests are legitimate
    if (!reason.empty()) {
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
  if (!e.feed(3, hello.bytes(), out).empty()) fail("a well-behaved client was refused");
  if (out.size() != 1 || out[0].conn != 3 || out[0].bytes != std::string("\x34\x12\xed\x5e", 4))
    fail("a well-behaved client's PING was not answered");
  out.clear();
  e.close(3);
  if (!e.check_invariants().empty() || e.connections() != 0) fail("state left after every close");
  // One connection: the answers do not depend on how the stream is cut.
  std::string why_whole, why_cut;
  const auto whole = c10d::store_fuzz_replies(lim, in, in.size() + 1, why_whole);
  const auto cut = c10d::store_fuzz_replies(lim, in, split, why_cut);
  if (whole != cut || why_whole != why_cut)
    fail(cat("the replies differ when the stream is cut in pieces of ", split, " bytes"));
  return violated ? 1 : 0;
}

}  // namespace weightsync::detail
