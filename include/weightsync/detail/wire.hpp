// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! Little-endian encoding of the control messages (rendezvous, control channel, host data headers).
//! Readers are bounds-checked: a truncated or oversized field is a protocol_error, never a crash.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "weightsync/detail/format.hpp"
#include "weightsync/error.hpp"

namespace weightsync::detail {

//! Magic of every control message: "WSRV" read as a little-endian u32.
inline constexpr std::uint32_t kWireMagic = 0x56525357u;
//! Bumped on any incompatible change of the control messages, frames or handshake.
//! 3: the handshake carries small transfers (eager). 4: frames are a header and one body per kind;
//! the agreed settings travel at full width; one handshake for whole and sharded transfers.
//! 5: one schedule for whole and sharded transfers: a root's chunk of empty pieces sends no status
//! frame (as whole-tensor chunks never did), and sharded transfers carry direct pieces, launch
//! splits, checksums and eager bytes. 6: a status frame's checksum is the chunk digest
//! (detail/digest.hpp: lanes and blocks hashed in parallel, on the GPU too), not Hash64.
//! 7: a handshake block is at most a frame and 4 KiB of eager bytes (kHandshakeBlockMax).
//! 8: after a handshake that agreed on a sync of up to 32 KiB, the roots' blocks in the next
//! handshake are wide (HandshakeLayout, WireState).
inline constexpr std::uint16_t kProtocolVersion = 8;

enum class MsgType : std::uint16_t { hello = 1, welcome = 2, reject = 3, abort = 4, goodbye = 5, link = 6 };

//! Fixed 12-byte header in front of every control message.
struct MsgHeader {
  std::uint32_t magic = kWireMagic;
  std::uint16_t version = kProtocolVersion;
  std::uint16_t type = 0;
  std::uint32_t length = 0;  //!< payload bytes that follow
};
inline constexpr std::size_t kMsgHeaderBytes = 12;

class Writer {
 public:
  void u8(std::uint8_t v) { buf_.push_back(static_cast<char>(v)); }
  void u16(std::uint16_t v) { put(v, 2); }
  void u32(std::uint32_t v) { put(v, 4); }
  void u64(std::uint64_t v) { put(v, 8); }
  void i32(std::int32_t v) { u32(static_cast<std::uint32_t>(v)); }
  void str(std::string_view s) {
    u32(static_cast<std::uint32_t>(s.size()));
    buf_.append(s.data(), s.size());
  }
  const std::string& bytes() const { return buf_; }

  //! header + payload, ready to send.
  static std::string message(MsgType type, const std::string& payload) {
    Writer w;
    w.u32(kWireMagic);
    w.u16(kProtocolVersion);
    w.u16(static_cast<std::uint16_t>(type));
    w.u32(static_cast<std::uint32_t>(payload.size()));
    return w.buf_ + payload;
  }

 private:
  void put(std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) buf_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  std::string buf_;
};

class Reader {
 public:
  Reader(std::string_view data, int peer, std::string what)
      : data_(data), peer_(peer), what_(std::move(what)) {}
  std::uint8_t u8() { return static_cast<std::uint8_t>(get(1)); }
  std::uint16_t u16() { return static_cast<std::uint16_t>(get(2)); }
  std::uint32_t u32() { return static_cast<std::uint32_t>(get(4)); }
  std::uint64_t u64() { return get(8); }
  std::int32_t i32() { return static_cast<std::int32_t>(u32()); }
  std::string str(std::size_t max_len) {
    const std::uint32_t n = u32();
    if (n > max_len)
      throw protocol_error(peer_, cat(what_, ": string field of ", n, " bytes exceeds the limit of ",
                                      max_len));
    need(n);
    std::string s(data_.substr(pos_, n));
    pos_ += n;
    return s;
  }
  bool done() const { return pos_ == data_.size(); }
  std::size_t remaining() const { return data_.size() - pos_; }
  void expect_done() const {
    if (!done())
      throw protocol_error(peer_, cat(what_, ": ", data_.size() - pos_, " unexpected trailing bytes"));
  }

 private:
  void need(std::size_t n) const {
    if (data_.size() - pos_ < n) throw protocol_error(peer_, what_ + ": message is truncated");
  }
  std::uint64_t get(int n) {
    need(static_cast<std::size_t>(n));
    std::uint64_t v = 0;
    for (int i = 0; i < n; ++i)
      v |= std::uint64_t(static_cast<unsigned char>(data_[pos_ + static_cast<std::size_t>(i)])) << (8 * i);
    pos_ += static_cast<std::size_t>(n);
    return v;
  }
  std::string_view data_;
  std::size_t pos_ = 0;
  int peer_;
  std::string what_;
};

inline MsgHeader parse_header(const char* p) {
  Reader r(std::string_view(p, kMsgHeaderBytes), -1, "header");
  MsgHeader h;
  h.magic = r.u32();
  h.version = r.u16();
  h.type = r.u16();
  h.length = r.u32();
  return h;
}

}  // namespace weightsync::detail
