// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Reading c10d TCPStore requests (the wire of weightsync/c10d/wire.hpp): an incremental
//! scanner that checks every announced length against TcpStoreLimits before its bytes are awaited
//! and resumes where it stopped when more bytes arrive, and a decoder for the requests it found
//! complete.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "weightsync/c10d/wire.hpp"
#include "weightsync/detail/format.hpp"

namespace weightsync::detail::c10d {

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

//! One call of scan_request: the bytes, the bounds, the state it advances and what it answers.
//! Every step returns true when it completed its field; false when the scan stops there, with
//! `st.need` set (need_more) or the result marked bad.
class RequestScan {
 public:
  RequestScan(std::string_view in, TcpStoreWire wire, const TcpStoreLimits& lim, ScanState& st)
      : in_(in), wire_(wire), lim_(lim), st_(st) {}

  ScanResult run() {
    if (st_.pos == 0 && !query()) return r_;
    const Field* fields = layout(st_.cmd);
    for (; fields[st_.field] != Field::end; ++st_.field)
      if (!field(fields[st_.field])) return r_;
    r_.status = Parse::done;
    r_.used = st_.pos;
    return r_;
  }

 private:
  bool need(std::size_t n) {
    st_.need = n;
    return false;
  }
  bool bad(std::string why) {
    r_.status = Parse::bad;
    r_.error = std::move(why);
    return false;
  }

  //! The query byte: the command, in this dialect.
  bool query() {
    if (in_.empty()) return need(1);
    const auto q = static_cast<std::uint8_t>(in_[0]);
    st_.cmd = cmd_of(q, wire_);
    if (st_.cmd == Cmd::watch_key)
      return bad("WATCH_KEY (torch 1.x watch callbacks) is not supported");
    if (st_.cmd == Cmd::invalid)
      return bad(cat("unknown query byte ", int(q), " (", tcp_store_wire_name(wire_), " dialect)"));
    st_.pos = 1;
    return true;
  }

  bool field(Field f) {
    switch (f) {
      case Field::end:
        return true;
      case Field::u32:
        return fixed(4);
      case Field::i64:
        return fixed(8);
      case Field::key:
        return string("key", lim_.max_key_bytes);
      case Field::value:
        return string("value", lim_.max_value_bytes);
      case Field::keys:
      case Field::pairs:
        return list(f == Field::pairs);
    }
    return true;
  }

  bool fixed(std::size_t n) {
    if (in_.size() < st_.pos + n) return need(st_.pos + n);
    st_.pos += n;
    return true;
  }

  //! A length-prefixed field, its length checked against `max` and the request's bound.
  bool string(const char* what, std::size_t max) {
    if (in_.size() < st_.pos + 8) return need(st_.pos + 8);
    std::uint64_t n = 0;
    std::memcpy(&n, in_.data() + st_.pos, 8);
    if (n > max)
      return bad(cat(cmd_name(st_.cmd), ": ", what, " length ", n, " exceeds the limit of ", max,
                     " bytes"));
    if (n > lim_.max_request_bytes || st_.pos + 8 + n > lim_.max_request_bytes)
      return bad(cat(cmd_name(st_.cmd), ": the request grows past ", st_.pos + 8 + n,
                     " bytes, over the limit of ", lim_.max_request_bytes, " bytes per request"));
    if (in_.size() < st_.pos + 8 + n) return need(st_.pos + 8 + static_cast<std::size_t>(n));
    st_.pos += 8 + static_cast<std::size_t>(n);
    return true;
  }

  //! A key list, or (`pairs`) a list of key-value pairs: the count, then the items.
  bool list(bool pairs) {
    if (!st_.in_list) {
      if (in_.size() < st_.pos + 8) return need(st_.pos + 8);
      std::uint64_t n = 0;
      std::memcpy(&n, in_.data() + st_.pos, 8);
      if (n > lim_.max_keys_per_request)
        return bad(cat(cmd_name(st_.cmd), ": ", n, " keys exceed the limit of ",
                       lim_.max_keys_per_request, " per request"));
      st_.pos += 8;
      st_.left = n;
      st_.in_list = true;
    }
    while (st_.left > 0) {
      if (!st_.in_value) {
        if (!string("key", lim_.max_key_bytes)) return false;
        st_.in_value = pairs;
        if (pairs) continue;
      } else {
        if (!string("value", lim_.max_value_bytes)) return false;
        st_.in_value = false;
      }
      --st_.left;
    }
    return true;
  }

  std::string_view in_;
  TcpStoreWire wire_;
  const TcpStoreLimits& lim_;
  ScanState& st_;
  ScanResult r_;
};
}  // namespace scan_detail

//! Scans the request at the start of `in` (which holds `st.pos` bytes already scanned, and maybe
//! more) without copying anything: checks every announced length against the limits before its
//! bytes are awaited, and the request's running total against max_request_bytes. On need_more
//! `st` remembers the progress; on done `used` is the request's size; on bad `error` says why.
inline ScanResult scan_request(std::string_view in, TcpStoreWire wire, const TcpStoreLimits& lim,
                               ScanState& st) {
  return scan_detail::RequestScan(in, wire, lim, st).run();
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

}  // namespace weightsync::detail::c10d
