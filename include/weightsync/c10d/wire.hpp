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
//!
//! This header holds the dialects, the bounds and the command table, and writes requests and
//! replies (Out). Reading them, incrementally and within the bounds, is
//! weightsync/c10d/detail/request_scan.hpp.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

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

//! What TcpStoreServer sends a connection it refuses (the store is full, or out of file
//! descriptors) before it closes it: this, the reason, a newline. Not torch's: TcpStoreClient
//! reports it as the store's refusal; a torch client reads it as a wrong answer and fails too.
//! No reply of the wire starts with it: as a PING answer its first four bytes are a nonce above
//! every pid, as a length its first eight are over every bound.
inline constexpr std::string_view kRefusedPrefix = "TCPStore refused this connection: ";

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
