// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The control messages of a pull transport over a HostCommunicator (host code): a blob of any
//! length from rank 0, one-byte hand-offs from every consumer, and the final outcome of every rank
//! as the library's 256-byte Frame. Every step has the communicator's deadline; a failure aborts
//! the channel so that no peer waits for a step this side will never take.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "weightsync/detail/format.hpp"
#include "weightsync/detail/frame.hpp"
#include "weightsync/error.hpp"
#include "weightsync/host/communicator.hpp"

namespace weightsync::detail {

//! Aborts the control channel when the scope is left by an exception (so that no peer waits for a
//! step this side will never take), unless disarmed for an orderly failure.
class AbortOnThrow {
 public:
  AbortOnThrow(HostCommunicator& c, const char* what)
      : c_(c), what_(what), uncaught_(std::uncaught_exceptions()) {}
  AbortOnThrow(const AbortOnThrow&) = delete;
  AbortOnThrow& operator=(const AbortOnThrow&) = delete;
  ~AbortOnThrow() {
    if (armed_ && std::uncaught_exceptions() > uncaught_) c_.abort(what_);
  }
  void disarm() noexcept { armed_ = false; }

 private:
  HostCommunicator& c_;
  const char* what_;
  int uncaught_;
  bool armed_ = true;
};

class ControlMessages {
 public:
  //! Ranks below `first_consumer` produce; the others consume.
  explicit ControlMessages(HostCommunicator& c, int first_consumer = 1)
      : c_(c), first_(first_consumer) {}

  //! `root` sends `s`. A 512-byte first packet holds the length and the start of the payload.
  void send_blob(const std::string& s, int root = 0) {
    std::string first(kFirst, '\0');
    const std::uint64_t n = s.size();
    std::memcpy(first.data(), &n, 8);
    std::memcpy(first.data() + 8, s.data(), std::min(s.size(), kFirst - 8));
    c_.broadcast(first.data(), kFirst, root);
    if (s.size() > kFirst - 8) {
      std::string rest = s.substr(kFirst - 8);
      c_.broadcast(rest.data(), rest.size(), root);
    }
  }
  //! Every other rank: receives `root`'s blob of at most `limit` bytes.
  std::string receive_blob(std::uint64_t limit, const char* what, int root = 0) {
    std::string first(kFirst, '\0');
    c_.broadcast(first.data(), kFirst, root);
    std::uint64_t n = 0;
    std::memcpy(&n, first.data(), 8);
    if (n > limit)
      throw protocol_error(root, cat(what, " of ", n, " bytes announced by rank ", root,
                                     " (not a peer of this transport?)"));
    std::string s(static_cast<std::size_t>(n), '\0');
    std::memcpy(s.data(), first.data() + 8, std::min<std::size_t>(s.size(), kFirst - 8));
    if (s.size() > kFirst - 8) c_.broadcast(s.data() + (kFirst - 8), s.size() - (kFirst - 8), root);
    return s;
  }

  //! A hand-off: every consumer says it is done with something (rank 0 passes through).
  void gather_acks() {
    guarded([&] {
      for (int r = first_; r < c_.size(); ++r) {
        std::uint8_t a = 0;
        c_.broadcast(&a, 1, r);
      }
    });
  }

  //! A rank's outcome: its frame, and the whole message (a frame holds only the first
  //! sizeof(AckBody::message) - 1 bytes).
  struct Outcome {
    Frame frame;
    std::string text;
    bool ok() const { return frame.ok(); }
    //! This rank's outcome (`why` cut to `max` bytes).
    static Outcome of(int rank, FrameCode code, const std::string& why, std::size_t max) {
      Outcome o;
      o.frame = Frame(FrameKind::ack, Role::consumer, rank);
      o.text = why.substr(0, max);
      o.frame.fail(code, o.text);  // (code ok: an empty text)
      o.frame.ack.message_bytes = o.text.size();
      return o;
    }
    //! Whether `frame` is rank r's outcome frame, announcing a message of at most `max` bytes.
    bool valid(int r, std::size_t max) const {
      return frame.head.magic == kFrameMagic && frame.kind() == FrameKind::ack &&
             frame.head.rank == r && frame.ack.message_bytes <= max;
    }
  };

  //! Every consumer's outcome, indexed by rank (rank 0's entry is ok): `code` and `why` are this
  //! rank's. A message longer than a frame holds follows it (at most kMaxMessage bytes).
  std::vector<Outcome> gather_outcomes(FrameCode code, const std::string& why) {
    std::vector<Outcome> out(static_cast<std::size_t>(c_.size()));
    guarded([&] {
      for (int r = first_; r < c_.size(); ++r) {
        Outcome& o = out[static_cast<std::size_t>(r)];
        if (r == c_.rank()) o = Outcome::of(r, code, why, kMaxMessage);
        Frame& f = o.frame;
        c_.broadcast(&f, sizeof f, r);
        if (!o.valid(r, kMaxMessage))
          throw protocol_error(r, cat("rank ", r, " sent no valid outcome frame"));
        if (r != c_.rank()) o.text = f.text();
        const auto bytes = static_cast<std::size_t>(f.ack.message_bytes);
        if (bytes > o.text.size() || (r == c_.rank() && bytes > f.text().size())) {
          o.text.resize(bytes);
          c_.broadcast(o.text.data(), o.text.size(), r);
        }
      }
    });
    return out;
  }

  //! Throws the first other consumer's failure: protocol_error for a mismatch, remote_error else.
  void raise_first(const std::vector<Outcome>& outcomes) const {
    for (int r = first_; r < c_.size(); ++r) {
      const Outcome& o = outcomes[static_cast<std::size_t>(r)];
      if (r == c_.rank() || o.ok()) continue;
      if (o.frame.head.code == static_cast<std::uint16_t>(FrameCode::mismatch))
        throw protocol_error(r, o.text);
      throw remote_error(r, o.text);
    }
  }

  //! Runs a control step; on a failure aborts the channel (so that peers fail fast too).
  template <class F>
  void guarded(F&& f) {
    try {
      f();
    } catch (const error& e) {
      c_.abort(e.what());
      throw;
    }
  }

 private:
  static constexpr std::size_t kFirst = 512;
  static constexpr std::size_t kMaxMessage = 4096;
  HostCommunicator& c_;
  int first_ = 1;
};

//! The producer's verdict after the outcomes (kIpcPlanVote): the first consumer that failed
//! (-1: none) and the start of its failure's text. On the wire: an i32, then the text.
struct IpcVerdict {
  std::int32_t first = -1;
  std::string text;

  //! At most this many bytes of the text travel.
  static constexpr std::size_t kTextBytes = 4000;
  //! The longest encoded verdict (what a consumer accepts).
  static constexpr std::size_t kMaxBytes = 4 + kTextBytes;

  std::string encode() const {
    std::string v(4, '\0');
    std::memcpy(v.data(), &first, 4);
    return v + text.substr(0, kTextBytes);
  }
  //! The verdict of a group of `size` ranks (consumers 1..size-1).
  //! @throws protocol_error(0) when it is shorter than its header or names no consumer and not -1.
  static IpcVerdict decode(const std::string& v, int size) {
    if (v.size() < 4) throw protocol_error(0, "ipc verdict: too short");
    IpcVerdict out;
    std::memcpy(&out.first, v.data(), 4);
    if (out.first != -1 && (out.first < 1 || out.first >= size))
      throw protocol_error(0, cat("ipc verdict: names rank ", out.first, " of ", size));
    out.text = v.substr(4);
    return out;
  }
};

}  // namespace weightsync::detail
