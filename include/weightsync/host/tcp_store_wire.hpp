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
//! | query       | 2.1+ | 2.0 | 1.13 | arguments                  | reply                        |
//! |-------------|------|-----|------|----------------------------|------------------------------|
//! | VALIDATE    | 0    | -   | -    | uint32 0x3C85F7CE          | none                         |
//! | SET         | 1    | 0   | 0    | key, value                 | none                         |
//! | COMPARE_SET | 2    | 1   | 1    | key, expected, desired     | bytes (value after the op)   |
//! | GET         | 3    | 2   | 2    | key                        | bytes (empty when missing)   |
//! | ADD         | 4    | 3   | 3    | key, int64                 | int64 (new value)            |
//! | CHECK       | 5    | 4   | 4    | key list                   | uint8 0 READY / 1 NOT_READY  |
//! | WAIT        | 6    | 5   | 5    | key list                   | uint8 0 STOP_WAITING         |
//! | GETNUMKEYS  | 7    | 6   | 6    | -                          | int64                        |
//! | DELETE_KEY  | 8    | 8   | 8    | key                        | int64 (0 or 1)               |
//! | APPEND      | 9    | 9   | -    | key, value                 | none                         |
//! | MULTI_GET   | 10   | 10  | -    | key list                   | one bytes per key            |
//! | MULTI_SET   | 11   | 11  | -    | uint64 n, n x (key, value) | none                         |
//! | CANCEL_WAIT | 12   | 12  | -    | -                          | uint8 1 WAIT_CANCELED        |
//! | PING        | 13   | -   | -    | uint32 nonce               | uint32 nonce                 |
//! | QUEUE_PUSH  | 14   | -   | -    | key, value                 | none                         |
//! | QUEUE_POP   | 15   | -   | -    | key                        | int64 n, then bytes if n > 0 |
//! | QUEUE_LEN   | 16   | -   | -    | key                        | int64                        |
//! | LIST        | 17   | -   | -    | -                          | int64 n, n strings           |
//!
//! Byte 7 of the two older tables is WATCH_KEY (torch 1.x watch callbacks, never sent by the Python
//! API): refused here. torch's QueryType ends at LIST (17); every other byte is refused.
//!
//! Three dialects. torch >= 2.1 clients open every connection with VALIDATE (pytorch#107607, Aug
//! 2023; since 2.4 also a PING) and use the 2.1+ column. WAIT answers once all its keys exist.
//! Older clients send no handshake and use the 2.0 / 1.13 columns: torch 1.13's server knows the
//! query bytes 0..8 only (it resets the connection on byte 9; checked against Debian's torch 1.13),
//! torch 2.0 added APPEND, MULTI_GET, MULTI_SET and CANCEL_WAIT as 9..12. A server tells the
//! handshake apart by the first five bytes of a connection: 0x00 followed by the magic is torch
//! >= 2.1; anything else is an older client (a torch 2.0 / 1.13 SET of a key whose length's low 32
//! bits equal the magic would exceed every key bound), served with the torch 2.0 table (1.13
//! clients never send bytes above 8). The Python API's keys travel with a "/" prefix (torch's
//! TCPStore prepends it); the workers' join counter "init/" travels bare.

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
  torch2,     //!< torch >= 2.1: VALIDATE handshake, query bytes 0..17 (first column above)
  torch1_13,  //!< torch 1.13: no handshake, query bytes 0..8 (SET..DELETE_KEY)
  torch2_0,   //!< torch 2.0: no handshake, 1.13's bytes plus APPEND..CANCEL_WAIT (9..12)
};

//! The name of a dialect, for messages.
inline const char* tcp_store_wire_name(TcpStoreWire w) {
  switch (w) {
    case TcpStoreWire::torch2:
      return "torch >= 2.1 (VALIDATE handshake)";
    case TcpStoreWire::torch2_0:
      return "torch 2.0 (no handshake)";
    case TcpStoreWire::torch1_13:
      return "torch 1.13 (no handshake)";
  }
  return "?";
}

//! Bounds every length a peer may announce. The first three are the bounds of torch's libuv
//! server (MAX_STRING_LEN, MAX_PAYLOAD_LEN, MAX_KEY_COUNT); torch has none of the others.
struct TcpStoreLimits {
  std::size_t max_key_bytes = 8 * 1024;
  std::size_t max_value_bytes = 8 * 1024 * 1024;  //!< also bounds what APPEND may grow a value to
  std::size_t max_keys_per_request = 128 * 1024;
  //! One request's size, every field together (a MULTI_SET of many large values).
  std::size_t max_request_bytes = std::size_t(64) << 20;
  //! One reply's size (a MULTI_GET naming one large value many times, a LIST of many keys).
  std::size_t max_reply_bytes = std::size_t(64) << 20;
  //! Keys, values and queue items together, each counted with kStoreEntryOverhead more bytes;
  //! the keys of pending WAITs are bounded by the same number, separately.
  std::size_t max_store_bytes = std::size_t(1) << 30;
  std::size_t max_connections = 1024;
};

//! What every stored key, value and queue item costs against TcpStoreLimits::max_store_bytes on
//! top of its bytes (so that empty values and empty keys are not free).
inline constexpr std::size_t kStoreEntryOverhead = 64;

namespace detail::c10d {

inline constexpr std::uint32_t kValidationMagic = 0x3C85F7CEu;

//! The commands, in the order of torch's QueryType (so that a torch >= 2.1 byte is its Cmd).
enum class Cmd : std::uint8_t {
  validate,
  set,
  compare_set,
  get,
  add,
  check,
  wait,
  num_keys,
  delete_key,
  append,
  multi_get,
  multi_set,
  cancel_wait,
  ping,
  queue_push,
  queue_pop,
  queue_len,
  list,
  watch_key,
  invalid
};
static_assert(static_cast<int>(Cmd::list) == 17, "torch's QueryType::LIST is byte 17");

inline const char* cmd_name(Cmd c) {
  static constexpr const char* kNames[] = {
      "VALIDATE",   "SET",        "COMPARE_SET", "GET",       "ADD",       "CHECK",       "WAIT",
      "GETNUMKEYS", "DELETE_KEY", "APPEND",      "MULTI_GET", "MULTI_SET", "CANCEL_WAIT", "PING",
      "QUEUE_PUSH", "QUEUE_POP",  "QUEUE_LEN",   "LIST",      "WATCH_KEY", "invalid"};
  return kNames[static_cast<int>(c)];
}

//! The command a query byte means in `wire` (Cmd::invalid: no such byte in that dialect).
inline Cmd cmd_of(std::uint8_t b, TcpStoreWire wire) {
  if (wire == TcpStoreWire::torch2) return b <= 17 ? static_cast<Cmd>(b) : Cmd::invalid;
  static constexpr Cmd kOld[] = {Cmd::set,        Cmd::compare_set, Cmd::get,       Cmd::add,
                                 Cmd::check,      Cmd::wait,        Cmd::num_keys,  Cmd::watch_key,
                                 Cmd::delete_key, Cmd::append,      Cmd::multi_get, Cmd::multi_set,
                                 Cmd::cancel_wait};
  const std::size_t n = wire == TcpStoreWire::torch1_13 ? 9 : sizeof kOld / sizeof kOld[0];
  return b < n ? kOld[b] : Cmd::invalid;
}

//! The query byte of `c` in `wire` (commands the dialect lacks have none: -1).
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
  std::int64_t number = 0;          //!< ADD delta
  std::uint32_t u32 = 0;            //!< VALIDATE magic, PING nonce
};

enum class Parse { need_more, done, bad };

//! How far the scan of an incomplete request got. More bytes resume the scan where it stopped, so
//! a request that arrives in many pieces is read once, not once per piece.
struct ScanState {
  std::size_t pos = 0;     //!< bytes of the request already scanned (complete fields)
  std::size_t need = 0;    //!< scanning again is pointless before this many bytes are there
  Cmd cmd = Cmd::invalid;  //!< the query (once pos > 0)
  std::uint8_t field = 0;  //!< next field of the command's layout
  bool in_list = false;    //!< the list's count has been read
  bool in_value = false;   //!< list of pairs: the current item's value is next
  std::uint64_t left = 0;  //!< list items still to scan
};

struct ScanResult {
  Parse status = Parse::need_more;
  std::size_t used = 0;  //!< bytes of the request (when done)
  std::string error;     //!< why it is refused (when bad)
};

namespace scan_detail {
enum class Field : std::uint8_t { end, u32, i64, key, value, keys, pairs };

//! The arguments of each command, in order (at most three; lists are always last).
inline const Field* layout(Cmd c) {
  using F = Field;
  static constexpr F kNone[] = {F::end};
  static constexpr F kU32[] = {F::u32, F::end};
  static constexpr F kKey[] = {F::key, F::end};
  static constexpr F kKeyValue[] = {F::key, F::value, F::end};
  static constexpr F kCompareSet[] = {F::key, F::value, F::value, F::end};
  static constexpr F kAdd[] = {F::key, F::i64, F::end};
  static constexpr F kKeys[] = {F::keys, F::end};
  static constexpr F kPairs[] = {F::pairs, F::end};
  switch (c) {
    case Cmd::validate:
    case Cmd::ping:
      return kU32;
    case Cmd::set:
    case Cmd::append:
    case Cmd::queue_push:
      return kKeyValue;
    case Cmd::compare_set:
      return kCompareSet;
    case Cmd::get:
    case Cmd::delete_key:
    case Cmd::queue_pop:
    case Cmd::queue_len:
      return kKey;
    case Cmd::add:
      return kAdd;
    case Cmd::check:
    case Cmd::wait:
    case Cmd::multi_get:
      return kKeys;
    case Cmd::multi_set:
      return kPairs;
    case Cmd::num_keys:
    case Cmd::cancel_wait:
    case Cmd::list:
      return kNone;
    case Cmd::watch_key:
    case Cmd::invalid:
      break;
  }
  return nullptr;
}
}  // namespace scan_detail

//! Scans the request at the start of `in` (which holds `st.pos` bytes already scanned, and maybe
//! more) without copying anything: checks every announced length against the limits before its
//! bytes are awaited, and the request's running total against max_request_bytes. On need_more
//! `st` remembers the progress; on done `used` is the request's size; on bad `error` says why.
inline ScanResult scan_request(std::string_view in, TcpStoreWire wire, const TcpStoreLimits& lim,
                               ScanState& st) {
  using scan_detail::Field;
  ScanResult r;
  auto need = [&](std::size_t n) {
    st.need = n;
    return r;  // need_more
  };
  auto bad = [&](std::string why) {
    r.status = Parse::bad;
    r.error = std::move(why);
    return r;
  };
  if (st.pos == 0) {
    if (in.empty()) return need(1);
    const auto q = static_cast<std::uint8_t>(in[0]);
    st.cmd = cmd_of(q, wire);
    if (st.cmd == Cmd::watch_key)
      return bad("WATCH_KEY (torch 1.x watch callbacks) is not supported");
    if (st.cmd == Cmd::invalid)
      return bad(cat("unknown query byte ", int(q), " (", tcp_store_wire_name(wire), " dialect)"));
    st.pos = 1;
  }
  const Field* fields = scan_detail::layout(st.cmd);
  auto fixed = [&](std::size_t n) {
    if (in.size() < st.pos + n) return false;
    st.pos += n;
    return true;
  };
  // A length-prefixed field: true when complete (st.pos past it); `ok` false when refused.
  auto string = [&](const char* what, std::size_t max, bool& ok) {
    if (in.size() < st.pos + 8) {
      st.need = st.pos + 8;
      return false;
    }
    std::uint64_t n = 0;
    std::memcpy(&n, in.data() + st.pos, 8);
    if (n > max) {
      ok = false;
      r.error =
          cat(cmd_name(st.cmd), ": ", what, " length ", n, " exceeds the limit of ", max, " bytes");
      return false;
    }
    if (n > lim.max_request_bytes || st.pos + 8 + n > lim.max_request_bytes) {
      ok = false;
      r.error = cat(cmd_name(st.cmd), ": the request grows past ", st.pos + 8 + n,
                    " bytes, over the limit of ", lim.max_request_bytes, " bytes per request");
      return false;
    }
    if (in.size() < st.pos + 8 + n) {
      st.need = st.pos + 8 + static_cast<std::size_t>(n);
      return false;
    }
    st.pos += 8 + static_cast<std::size_t>(n);
    return true;
  };
  for (bool ok = true; fields[st.field] != Field::end; ++st.field) {
    switch (fields[st.field]) {
      case Field::end:
        break;
      case Field::u32:
        if (!fixed(4)) return need(st.pos + 4);
        break;
      case Field::i64:
        if (!fixed(8)) return need(st.pos + 8);
        break;
      case Field::key:
        if (!string("key", lim.max_key_bytes, ok)) return ok ? r : bad(r.error);
        break;
      case Field::value:
        if (!string("value", lim.max_value_bytes, ok)) return ok ? r : bad(r.error);
        break;
      case Field::keys:
      case Field::pairs: {
        const bool pairs = fields[st.field] == Field::pairs;
        if (!st.in_list) {
          if (in.size() < st.pos + 8) return need(st.pos + 8);
          std::uint64_t n = 0;
          std::memcpy(&n, in.data() + st.pos, 8);
          if (n > lim.max_keys_per_request)
            return bad(cat(cmd_name(st.cmd), ": ", n, " keys exceed the limit of ",
                           lim.max_keys_per_request, " per request"));
          st.pos += 8;
          st.left = n;
          st.in_list = true;
        }
        while (st.left > 0) {
          if (!st.in_value) {
            if (!string("key", lim.max_key_bytes, ok)) return ok ? r : bad(r.error);
            st.in_value = pairs;
            if (pairs) continue;
          } else {
            if (!string("value", lim.max_value_bytes, ok)) return ok ? r : bad(r.error);
            st.in_value = false;
          }
          --st.left;
        }
        break;
      }
    }
  }
  r.status = Parse::done;
  r.used = st.pos;
  return r;
}

//! Reads fixed-width fields off a byte range; every read checks what is left.
class Cursor {
 public:
  explicit Cursor(std::string_view in) : in_(in) {}
  bool u8(std::uint8_t& v) { return raw(&v, 1); }
  bool u32(std::uint32_t& v) { return raw(&v, 4); }
  bool u64(std::uint64_t& v) { return raw(&v, 8); }
  bool i64(std::int64_t& v) { return raw(&v, 8); }
  //! A length-prefixed string (false when the range ends first).
  bool str(std::string& s) {
    std::uint64_t n = 0;
    const std::size_t mark = pos_;
    if (!u64(n)) return false;
    if (in_.size() - pos_ < n) {
      pos_ = mark;
      return false;
    }
    s.assign(in_.substr(pos_, static_cast<std::size_t>(n)));
    pos_ += static_cast<std::size_t>(n);
    return true;
  }
  std::size_t pos() const { return pos_; }

 private:
  bool raw(void* out, std::size_t n) {
    if (in_.size() - pos_ < n) return false;
    std::memcpy(out, in_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  std::string_view in_;
  std::size_t pos_ = 0;
};

//! Decodes one request that scan_request found complete (`in` is exactly its bytes).
inline Request decode_request(std::string_view in, Cmd cmd) {
  using scan_detail::Field;
  Request q;
  q.cmd = cmd;
  Cursor c(in.substr(1));
  for (const Field* f = scan_detail::layout(cmd); f && *f != Field::end; ++f) {
    switch (*f) {
      case Field::end:
        break;
      case Field::u32:
        c.u32(q.u32);
        break;
      case Field::i64:
        c.i64(q.number);
        break;
      case Field::key:
        c.str(q.keys.emplace_back());
        break;
      case Field::value:
        c.str(q.values.emplace_back());
        break;
      case Field::keys:
      case Field::pairs: {
        std::uint64_t n = 0;
        c.u64(n);
        q.keys.reserve(static_cast<std::size_t>(n));
        if (*f == Field::pairs) q.values.reserve(static_cast<std::size_t>(n));
        for (std::uint64_t i = 0; i < n; ++i) {
          c.str(q.keys.emplace_back());
          if (*f == Field::pairs) c.str(q.values.emplace_back());
        }
        break;
      }
    }
  }
  return q;
}

struct ParseResult {
  Parse status = Parse::need_more;
  std::size_t used = 0;  //!< bytes of the request (when done)
  Request req;
  std::string error;  //!< why it is refused (when bad)
};

//! Scans and decodes the request at the start of `in` in one go (tests, fuzzers). Never
//! allocates more than the limits allow: a length is checked before its bytes are awaited.
inline ParseResult parse_request(std::string_view in, TcpStoreWire wire,
                                 const TcpStoreLimits& lim) {
  ParseResult r;
  ScanState st;
  auto s = scan_request(in, wire, lim, st);
  r.status = s.status;
  r.error = std::move(s.error);
  if (s.status == Parse::done) {
    r.used = s.used;
    r.req = decode_request(in.substr(0, s.used), st.cmd);
  }
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
