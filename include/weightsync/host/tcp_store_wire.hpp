// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The wire of torch.distributed's c10d TCPStore, as torch's own clients and servers speak it.
//! Learned from torch's TCPStore.cpp / TCPStoreBackend.cpp / TCPStoreLibUvBackend.cpp; written here
//! from that description. Every integer is little-endian (torch sends host-order bytes; every
//! platform torch ships on is little-endian). A request is one query byte and its arguments:
//!
//!   string / bytes : uint64 length, then that many bytes
//!   key list       : uint64 count, then `count` strings
//!
//! | query (2.x byte / 1.13 byte) | arguments                    | reply                          |
//! |------------------------------|------------------------------|--------------------------------|
//! | VALIDATE (0 / -)             | uint32 0x3C85F7CE            | none                           |
//! | SET (1 / 0)                  | key, value                   | none                           |
//! | COMPARE_SET (2 / 1)          | key, expected, desired       | bytes (value after the op)     |
//! | GET (3 / 2)                  | key                          | bytes (empty when missing)     |
//! | ADD (4 / 3)                  | key, int64                   | int64 (new value)              |
//! | CHECK (5 / 4)                | key list                     | uint8 0 READY / 1 NOT_READY    |
//! | WAIT (6 / 5)                 | key list                     | uint8 0 STOP_WAITING, when all |
//! | GETNUMKEYS (7 / 6)           | -                            | int64                          |
//! | DELETE_KEY (8 / 8)           | key                          | int64 (0 or 1)                 |
//! | APPEND (9 / 9)               | key, value                   | none                           |
//! | MULTI_GET (10 / 10)          | key list                     | one bytes per key              |
//! | MULTI_SET (11 / 11)          | uint64 n, n x (key, value)   | none                           |
//! | CANCEL_WAIT (12 / 12)        | -                            | uint8 1 WAIT_CANCELED          |
//! | PING (13 / -)                | uint32 nonce                 | uint32 nonce                   |
//! | QUEUE_PUSH (14 / -)          | key, value                   | none                           |
//! | QUEUE_POP (15 / -)           | key                          | int64 n, then bytes if n > 0   |
//! | QUEUE_LEN (16 / -)           | key                          | int64                          |
//! | LIST_KEYS (17 / -)           | -                            | int64 n, n strings             |
//! | BARRIER (18 / -)             | key, int64 world             | uint8 0 when `world` arrived   |
//!
//! Two dialects. torch >= 2.0 clients open every connection with VALIDATE (and, since 2.4, a PING);
//! torch 1.13 clients have no VALIDATE, and their query bytes are shifted (SET is 0, byte 7 was
//! WATCH_KEY, never sent by the Python API and refused here). A server tells them apart by the
//! first five bytes of a connection: 0x00 followed by the magic is 2.x; anything else is 1.13 (a
//! 1.13 SET of a key whose length's low 32 bits equal the magic would exceed every key bound).
//! The Python API's keys travel with a "/" prefix (torch's TCPStore prepends it); the workers'
//! join counter "init/" travels bare.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "weightsync/detail/format.hpp"

namespace weightsync {

//! Which TCPStore dialect a connection speaks.
enum class TcpStoreWire : std::uint8_t {
  torch2,       //!< torch >= 2.0: VALIDATE handshake, query bytes of the 2.x table
  torch1_13,    //!< torch 1.13: no handshake, the older query bytes
};

//! Bounds every length a peer may announce. The defaults are torch's libuv server's bounds.
struct TcpStoreLimits {
  std::size_t max_key_bytes = 8 * 1024;
  std::size_t max_value_bytes = 8 * 1024 * 1024;
  std::size_t max_keys_per_request = 4096;
  std::size_t max_store_bytes = std::size_t(1) << 30;  //!< all keys and values together
  std::size_t max_connections = 1024;
};

namespace detail::c10d {

inline constexpr std::uint32_t kValidationMagic = 0x3C85F7CEu;

//! The commands, independent of the dialect's byte values.
enum class Cmd : std::uint8_t {
  validate, set, compare_set, get, add, check, wait, num_keys, delete_key, append, multi_get,
  multi_set, cancel_wait, ping, queue_push, queue_pop, queue_len, list_keys, barrier, watch_key,
  invalid
};

inline const char* cmd_name(Cmd c) {
  static constexpr const char* kNames[] = {
      "VALIDATE", "SET",        "COMPARE_SET", "GET",        "ADD",        "CHECK",     "WAIT",
      "GETNUMKEYS", "DELETE_KEY", "APPEND",   "MULTI_GET",  "MULTI_SET",  "CANCEL_WAIT", "PING",
      "QUEUE_PUSH", "QUEUE_POP", "QUEUE_LEN",  "LIST_KEYS",  "BARRIER",    "WATCH_KEY", "invalid"};
  return kNames[static_cast<int>(c)];
}

//! The command a query byte means in `wire`.
inline Cmd cmd_of(std::uint8_t b, TcpStoreWire wire) {
  if (wire == TcpStoreWire::torch2) return b <= 18 ? static_cast<Cmd>(b) : Cmd::invalid;
  static constexpr Cmd kOld[] = {Cmd::set,       Cmd::compare_set, Cmd::get,       Cmd::add,
                                 Cmd::check,     Cmd::wait,        Cmd::num_keys,  Cmd::watch_key,
                                 Cmd::delete_key, Cmd::append,     Cmd::multi_get, Cmd::multi_set,
                                 Cmd::cancel_wait};
  return b < sizeof kOld / sizeof kOld[0] ? kOld[b] : Cmd::invalid;
}

//! The query byte of `c` in `wire` (commands 1.13 lacks have none: -1).
inline int byte_of(Cmd c, TcpStoreWire wire) {
  for (int b = 0; b < 256; ++b)
    if (cmd_of(static_cast<std::uint8_t>(b), wire) == c) return b;
  return -1;
}

//! One decoded request.
struct Request {
  Cmd cmd = Cmd::invalid;
  std::vector<std::string> keys;    //!< key, or key list
  std::vector<std::string> values;  //!< value(s); compare_set: expected, desired
  std::int64_t number = 0;          //!< ADD delta, BARRIER world size
  std::uint32_t u32 = 0;            //!< VALIDATE magic, PING nonce
};

enum class Parse { need_more, done, bad };

struct ParseResult {
  Parse status = Parse::need_more;
  std::size_t used = 0;  //!< bytes of the request (when done)
  Request req;
  std::string error;  //!< why it is refused (when bad)
};

//! Reads fixed-width fields off a byte range; every read checks what is left.
class Cursor {
 public:
  explicit Cursor(std::string_view in) : in_(in) {}
  bool u8(std::uint8_t& v) { return raw(&v, 1); }
  bool u32(std::uint32_t& v) { return raw(&v, 4); }
  bool u64(std::uint64_t& v) { return raw(&v, 8); }
  bool i64(std::int64_t& v) { return raw(&v, 8); }
  //! A length-prefixed string; `over` is set (and false returned) when the length exceeds `max`.
  bool str(std::string& s, std::size_t max, bool& over) {
    std::uint64_t n = 0;
    const std::size_t mark = pos_;
    if (!u64(n)) return false;
    if (n > max) {
      over = true;
      bad_len_ = n;
      return false;
    }
    if (in_.size() - pos_ < n) {
      pos_ = mark;
      return false;
    }
    s.assign(in_.substr(pos_, static_cast<std::size_t>(n)));
    pos_ += static_cast<std::size_t>(n);
    return true;
  }
  std::size_t pos() const { return pos_; }
  std::uint64_t bad_len() const { return bad_len_; }

 private:
  bool raw(void* out, std::size_t n) {
    if (in_.size() - pos_ < n) return false;
    std::memcpy(out, in_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  std::string_view in_;
  std::size_t pos_ = 0;
  std::uint64_t bad_len_ = 0;
};

//! Decodes the request at the start of `in`, without consuming anything on need_more. Never
//! allocates more than the limits allow: a length is checked before its bytes are awaited.
inline ParseResult parse_request(std::string_view in, TcpStoreWire wire, const TcpStoreLimits& lim) {
  ParseResult r;
  Cursor c(in);
  std::uint8_t q = 0;
  if (!c.u8(q)) return r;
  r.req.cmd = cmd_of(q, wire);
  bool over = false;
  auto bad = [&](std::string why) {
    r.status = Parse::bad;
    r.error = std::move(why);
    return r;
  };
  const char* over_what = "key";
  std::size_t over_max = 0;
  auto key = [&]() {
    r.req.keys.emplace_back();
    over_what = "key";
    over_max = lim.max_key_bytes;
    return c.str(r.req.keys.back(), lim.max_key_bytes, over);
  };
  auto value = [&]() {
    r.req.values.emplace_back();
    over_what = "value";
    over_max = lim.max_value_bytes;
    return c.str(r.req.values.back(), lim.max_value_bytes, over);
  };
  auto key_list = [&](bool with_values) {
    std::uint64_t n = 0;
    if (!c.u64(n)) return false;
    if (n > lim.max_keys_per_request) {
      over = true;
      r.error = cat(cmd_name(r.req.cmd), ": ", n, " keys exceed the limit of ",
                    lim.max_keys_per_request, " per request");
      return false;
    }
    for (std::uint64_t i = 0; i < n; ++i) {
      if (!key()) return false;
      if (with_values && !value()) return false;
    }
    return true;
  };
  bool ok = false;
  switch (r.req.cmd) {
    case Cmd::validate:
    case Cmd::ping: ok = c.u32(r.req.u32); break;
    case Cmd::set:
    case Cmd::append:
    case Cmd::queue_push: ok = key() && value(); break;
    case Cmd::compare_set: ok = key() && value() && value(); break;
    case Cmd::get:
    case Cmd::delete_key:
    case Cmd::queue_pop:
    case Cmd::queue_len: ok = key(); break;
    case Cmd::add: ok = key() && c.i64(r.req.number); break;
    case Cmd::barrier: ok = key() && c.i64(r.req.number); break;
    case Cmd::check:
    case Cmd::wait:
    case Cmd::multi_get: ok = key_list(false); break;
    case Cmd::multi_set: ok = key_list(true); break;
    case Cmd::num_keys:
    case Cmd::cancel_wait:
    case Cmd::list_keys: ok = true; break;
    case Cmd::watch_key:
      return bad("WATCH_KEY (torch 1.x watch callbacks) is not supported");
    case Cmd::invalid:
      return bad(cat("unknown query byte ", int(q), " (",
                     wire == TcpStoreWire::torch2 ? "torch 2.x" : "torch 1.13", " dialect)"));
  }
  if (over) {
    if (!r.error.empty()) return bad(r.error);
    return bad(cat(cmd_name(r.req.cmd), ": ", over_what, " length ", c.bad_len(),
                   " exceeds the limit of ", over_max, " bytes"));
  }
  if (!ok) {
    r.req = Request{};
    return r;  // need_more
  }
  r.status = Parse::done;
  r.used = c.pos();
  return r;
}

//! Appends little-endian fields and length-prefixed strings.
class Out {
 public:
  Out& u8(std::uint8_t v) { return raw(&v, 1); }
  Out& u32(std::uint32_t v) { return raw(&v, 4); }
  Out& u64(std::uint64_t v) { return raw(&v, 8); }
  Out& i64(std::int64_t v) { return raw(&v, 8); }
  Out& str(std::string_view s) {
    u64(s.size());
    buf_.append(s);
    return *this;
  }
  std::string& bytes() { return buf_; }

 private:
  Out& raw(const void* p, std::size_t n) {
    buf_.append(static_cast<const char*>(p), n);
    return *this;
  }
  std::string buf_;
};

}  // namespace detail::c10d
}  // namespace weightsync
