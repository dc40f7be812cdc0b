// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! TCP rendezvous. Rank 0 listens on master_address:master_port; ranks 1..world_size-1 connect
//! (retrying until the deadline, since they may start first) and say hello with their rank, the
//! world size, the optional shared token and a small blob of their own. When every rank has joined,
//! rank 0 answers each with every rank's blob (rank 0's blob is the bootstrap: an ncclUniqueId, or
//! the host transport's own address). Every read has a deadline and a bounded length; a connection
//! that sends garbage, a wrong magic or version, a duplicate rank, a rank outside the world, a
//! different world size or a wrong token is rejected with a logged reason and does not take rank 0
//! down. The connections stay open afterwards as a control channel: it tells a rank at once when a
//! peer process is gone, and carries abort notices.

#include <poll.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "weightsync/detail/format.hpp"
#include "weightsync/detail/socket.hpp"
#include "weightsync/detail/wire.hpp"
#include "weightsync/error.hpp"
#include "weightsync/log.hpp"

namespace weightsync {

//! Where and how to meet.
struct RendezvousOptions {
  std::string address = "127.0.0.1";  //!< rank 0's address (master_address)
  int port = 0;                       //!< rank 0's port (master_port)
  int rank = 0;
  int world_size = 1;
  std::string token;  //!< optional shared secret; peers with another token are refused
  std::chrono::milliseconds timeout{60000};       //!< whole rendezvous, on every rank
  std::chrono::milliseconds hello_timeout{5000};  //!< a connection silent this long is dropped
  std::size_t max_blob_bytes = 4096;              //!< bound on each rank's blob

  void validate() const {
    if (world_size < 1) throw config_error("world_size", detail::cat("must be >= 1, got ", world_size));
    if (rank < 0 || rank >= world_size)
      throw config_error("rank", detail::cat("must be in 0..", world_size - 1, ", got ", rank));
    if (port < 0 || port > 65535)
      throw config_error("master_port", detail::cat("must be in 0..65535, got ", port));
    if (rank != 0 && port == 0) throw config_error("master_port", "ranks > 0 need rank 0's port");
    if (timeout.count() <= 0) throw config_error("timeout", "must be > 0");
  }
};

//! Open connections to the peers met at rendezvous (rank 0: one per rank; others: one to rank 0).
//! check() reports a peer that is gone or aborted; abort() tells them we are.
class ControlChannel {
 public:
  ControlChannel() = default;
  ControlChannel(int rank, std::vector<detail::Fd> peers) : rank_(rank), peers_(std::move(peers)) {
    departed_.assign(peers_.size(), false);
  }
  ControlChannel(ControlChannel&&) noexcept = default;
  ControlChannel& operator=(ControlChannel&&) noexcept = default;
  ~ControlChannel() { close(); }

  bool empty() const noexcept {
    for (const auto& p : peers_)
      if (p) return false;
    return true;
  }

  //! Non-blocking. @throws peer_error when a peer's connection closed without a goodbye,
  //! remote_error when a peer sent an abort notice.
  void check() {
    for (std::size_t r = 0; r < peers_.size(); ++r) {
      if (!peers_[r] || departed_[r]) continue;
      pollfd pf{peers_[r].get(), POLLIN, 0};
      if (::poll(&pf, 1, 0) <= 0) continue;
      const int peer = static_cast<int>(r);
      char hdr[detail::kMsgHeaderBytes];
      const ssize_t k = ::recv(peers_[r].get(), hdr, sizeof hdr, MSG_PEEK | MSG_DONTWAIT);
      if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        peers_[r].reset();
        throw peer_error(peer, detail::cat("rank ", peer,
                                           " is gone: its control connection closed (process "
                                           "exited or was killed)"));
      }
      if (k < static_cast<ssize_t>(sizeof hdr)) continue;  // header still arriving
      const auto h = detail::parse_header(hdr);
      if (h.magic != detail::kWireMagic || h.length > 64 * 1024) {
        peers_[r].reset();
        throw protocol_error(peer, detail::cat("garbage on the control connection of rank ", peer));
      }
      std::string msg(detail::kMsgHeaderBytes + h.length, '\0');
      detail::recv_all(peers_[r].get(), msg.data(), msg.size(),
                       detail::Deadline::after(std::chrono::milliseconds(1000)), "control", peer);
      detail::Reader rd(std::string_view(msg).substr(detail::kMsgHeaderBytes), peer, "control");
      if (h.type == static_cast<std::uint16_t>(detail::MsgType::goodbye)) {
        departed_[r] = true;
        continue;
      }
      if (h.type == static_cast<std::uint16_t>(detail::MsgType::abort)) {
        const std::string reason = rd.str(4096);
        peers_[r].reset();
        throw remote_error(peer, detail::cat("rank ", peer, " aborted: ", reason));
      }
      peers_[r].reset();
      throw protocol_error(peer, detail::cat("unexpected message type ", h.type,
                                             " on the control connection of rank ", peer));
    }
  }

  //! Best effort, never throws, never blocks for long: tells every peer we abort, then closes.
  void abort(const std::string& reason) noexcept { say_and_close(detail::MsgType::abort, reason); }

  //! Tells every peer we leave cleanly (so that they do not take our exit for a crash), then closes.
  void close() noexcept { say_and_close(detail::MsgType::goodbye, ""); }

 private:
  void say_and_close(detail::MsgType type, const std::string& reason) noexcept {
    try {
      detail::Writer w;
      if (type == detail::MsgType::abort) w.str(reason.substr(0, 1024));
      const auto msg = detail::Writer::message(type, w.bytes());
      for (auto& p : peers_) {
        if (!p) continue;
        try {
          detail::send_all(p.get(), msg.data(), msg.size(),
                           detail::Deadline::after(std::chrono::milliseconds(200)), "control", -1);
        } catch (...) {
        }
        p.reset();
      }
    } catch (...) {
    }
    peers_.clear();
  }

  [[maybe_unused]] int rank_ = 0;  // (for debugging; clang warns on unused private fields)
  std::vector<detail::Fd> peers_;
  std::vector<bool> departed_;
};

//! What every rank learns at rendezvous.
struct RendezvousResult {
  int rank = 0;
  int world_size = 1;
  std::uint64_t session = 0;       //!< random id chosen by rank 0 for this group
  std::vector<std::string> blobs;  //!< blobs[r]: what rank r contributed; blobs[0] is the bootstrap
  //! addresses[r]: where rank r is reachable (rank 0: master_address; others: as rank 0 saw them)
  std::vector<std::string> addresses;
  ControlChannel control;
};

namespace detail {

inline std::uint64_t random_u64() {
  std::random_device rd;
  return (std::uint64_t(rd()) << 32) ^ rd();
}

inline std::string hello_payload(const RendezvousOptions& o, const std::string& blob) {
  Writer w;
  w.i32(o.rank);
  w.i32(o.world_size);
  w.str(o.token);
  w.str(blob);
  return w.bytes();
}

//! A peer's hello, as rank 0 reads it.
struct Hello {
  int rank = 0;
  int world_size = 0;
  std::string token;
  std::string blob;
};

//! Decodes a hello's payload (after the header). @throws protocol_error when it is truncated, has
//! trailing bytes, or a token/blob longer than the limits.
inline Hello parse_hello(std::string_view payload, std::size_t max_blob_bytes) {
  Reader r(payload, -1, "hello");
  Hello h;
  h.rank = r.i32();
  h.world_size = r.i32();
  h.token = r.str(4096);
  h.blob = r.str(max_blob_bytes);
  r.expect_done();
  return h;
}

//! What rank 0 answers every peer once all have joined.
struct Welcome {
  int world_size = 0;
  std::uint64_t session = 0;
  std::vector<std::string> blobs, addresses;
};

//! Decodes a welcome's payload for a rank of a `world_size` group. @throws protocol_error when it
//! is truncated, oversized, or for another world size.
inline Welcome parse_welcome(std::string_view payload, int world_size, std::size_t max_blob_bytes) {
  Reader r(payload, 0, "rendezvous answer");
  Welcome w;
  w.world_size = r.i32();
  if (w.world_size != world_size)
    throw protocol_error(0, cat("rank 0 has world_size ", w.world_size, ", this rank has ",
                                world_size));
  w.session = r.u64();
  for (int i = 0; i < world_size; ++i) w.blobs.push_back(r.str(max_blob_bytes));
  for (int i = 0; i < world_size; ++i) w.addresses.push_back(r.str(256));
  r.expect_done();
  return w;
}

//! Connections rank 0 keeps waiting for a hello at once; past it, the oldest is dropped.
inline constexpr std::size_t kMaxPendingHellos = 64;

//! Rank 0's side: accept, vet and answer every peer.
inline RendezvousResult rendezvous_root(const RendezvousOptions& o, const std::string& blob) {
  const auto deadline = Deadline::after(o.timeout);
  Fd listener = listen_tcp(o.address, o.port);
  struct Pending {
    Fd fd;
    Deadline until;
    std::string buf;
    std::string from;
    std::string host;
  };
  std::vector<Pending> pending;
  std::vector<Fd> joined(static_cast<std::size_t>(o.world_size));
  std::vector<std::string> blobs(static_cast<std::size_t>(o.world_size));
  std::vector<std::string> addresses(static_cast<std::size_t>(o.world_size));
  blobs[0] = blob;
  addresses[0] = o.address;
  int count = 1;
  std::vector<std::string> rejected;

  auto reject = [&](Pending& p, const std::string& why, bool answer) {
    log(LogLevel::warning, cat("rendezvous: rank 0 rejected a connection", p.from, ": ", why));
    if (rejected.size() < 8) rejected.push_back(why);
    if (answer) {
      Writer w;
      w.str(why);
      const auto msg = Writer::message(MsgType::reject, w.bytes());
      try {
        send_all(p.fd.get(), msg.data(), msg.size(), Deadline::after(std::chrono::milliseconds(200)),
                 "rendezvous", -1);
      } catch (...) {
      }
    }
    p.fd.reset();
  };

  // Returns true when the message in p.buf is complete (and handled).
  auto handle = [&](Pending& p) {
    if (p.buf.size() < kMsgHeaderBytes) return;
    const auto h = parse_header(p.buf.data());
    if (h.magic != kWireMagic) return reject(p, cat("bad magic 0x", std::hex, h.magic), false);
    if (h.version != kProtocolVersion)
      return reject(p, cat("protocol version ", h.version, ", rank 0 speaks ", kProtocolVersion),
                    true);
    if (h.type != static_cast<std::uint16_t>(MsgType::hello))
      return reject(p, cat("expected a hello, got message type ", h.type), true);
    const std::size_t max_len = 16 + 4 + o.token.size() + 4 + o.max_blob_bytes + 256;
    if (h.length > max_len)
      return reject(p, cat("length prefix ", h.length, " exceeds the limit of ", max_len), false);
    if (p.buf.size() < kMsgHeaderBytes + h.length) return;
    try {
      auto hello = parse_hello(std::string_view(p.buf).substr(kMsgHeaderBytes, h.length),
                               o.max_blob_bytes);
      const int rank = hello.rank;
      const int world = hello.world_size;
      const std::string& token = hello.token;
      std::string peer_blob = std::move(hello.blob);
      if (world != o.world_size)
        return reject(p, cat("rank ", rank, " has world_size ", world, ", rank 0 has ", o.world_size),
                      true);
      if (rank < 1 || rank >= o.world_size)
        return reject(p, cat("rank ", rank, " is outside 1..", o.world_size - 1), true);
      if (token != o.token) return reject(p, cat("rank ", rank, " sent a wrong token"), true);
      if (joined[static_cast<std::size_t>(rank)])
        return reject(p, cat("rank ", rank, " has already joined (duplicate rank)"), true);
      joined[static_cast<std::size_t>(rank)] = std::move(p.fd);
      blobs[static_cast<std::size_t>(rank)] = std::move(peer_blob);
      addresses[static_cast<std::size_t>(rank)] = p.host;
      ++count;
      log(LogLevel::debug, cat("rendezvous: rank ", rank, " joined", p.from));
    } catch (const protocol_error& e) {
      reject(p, e.what(), true);
    }
  };

  // Reads what a pending connection has sent (never blocks) and handles a complete hello.
  auto pump = [&](Pending& p) {
    char buf[4096];
    const ssize_t k = ::recv(p.fd.get(), buf, sizeof buf, MSG_DONTWAIT);
    if (k <= 0) {
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
      return reject(p, "connection closed before a complete hello", false);
    }
    p.buf.append(buf, static_cast<std::size_t>(k));
    handle(p);
  };

  while (count < o.world_size) {
    if (deadline.expired()) {
      std::string missing;
      int first_missing = -1;
      for (int r = 1; r < o.world_size; ++r)
        if (!joined[static_cast<std::size_t>(r)]) {
          missing += cat(missing.empty() ? "" : ", ", r);
          if (first_missing < 0) first_missing = r;
        }
      std::string rej;
      for (auto& s : rejected) rej += "; rejected: " + s;
      throw timeout_error("rendezvous", first_missing,
                          cat("rank 0 waited ", o.timeout.count(), " ms on ", o.address, ":",
                              local_port(listener.get()), "; rank(s) ", missing, " of ",
                              o.world_size, " never joined", rej));
    }
    std::vector<pollfd> fds{{listener.get(), POLLIN, 0}};
    int wait_ms = deadline.poll_ms();
    for (auto& p : pending) {
      fds.push_back({p.fd.get(), POLLIN, 0});
      wait_ms = std::min(wait_ms, p.until.poll_ms());
    }
    const int rc = ::poll(fds.data(), fds.size(), std::max(wait_ms, 1));
    if (rc < 0 && errno != EINTR) throw system_error("poll: " + errno_string(errno), errno);
    for (std::size_t i = 1; i < fds.size(); ++i)
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) pump(pending[i - 1]);
    for (auto& p : pending)
      if (p.fd && p.until.expired())
        reject(p, cat("no complete hello within ", o.hello_timeout.count(), " ms"), false);
    std::erase_if(pending, [](const Pending& p) { return !p.fd; });
    if (fds[0].revents & POLLIN) {
      while (true) {
        sockaddr_storage ss{};
        socklen_t len = sizeof ss;
        Fd fd(::accept4(listener.get(), reinterpret_cast<sockaddr*>(&ss), &len,
                        SOCK_CLOEXEC | SOCK_NONBLOCK));
        if (!fd) break;
        set_socket_options(fd.get());
        char host[INET6_ADDRSTRLEN] = {};
        int port = 0;
        if (ss.ss_family == AF_INET) {
          auto* a = reinterpret_cast<sockaddr_in*>(&ss);
          ::inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
          port = ntohs(a->sin_port);
        } else if (ss.ss_family == AF_INET6) {
          auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
          ::inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
          port = ntohs(a->sin6_port);
        }
        Pending p{std::move(fd), Deadline::after(o.hello_timeout), {}, cat(" from ", host, ":", port),
                  host};
        // A real peer sends its hello right after connecting: often it is already here.
        pump(p);
        if (!p.fd) continue;
        // A flood of silent connections must not lock the real ranks out: past the bound, the
        // oldest connection still without a hello makes room (a real peer's is seconds younger).
        std::erase_if(pending, [](const Pending& q) { return !q.fd; });
        if (pending.size() >= kMaxPendingHellos) {
          reject(pending.front(), cat("dropped: more than ", kMaxPendingHellos,
                                      " connections awaiting their hello, this one the oldest"),
                 false);
          pending.erase(pending.begin());
        }
        pending.push_back(std::move(p));
      }
    }
  }
  listener.reset();  // late strangers get "connection refused"
  for (auto& p : pending) reject(p, "rendezvous already complete", true);

  RendezvousResult res;
  res.rank = 0;
  res.world_size = o.world_size;
  res.session = random_u64();
  Writer w;
  w.i32(o.world_size);
  w.u64(res.session);
  for (const auto& b : blobs) w.str(b);
  for (const auto& a : addresses) w.str(a);
  const auto msg = Writer::message(MsgType::welcome, w.bytes());
  for (int r = 1; r < o.world_size; ++r)
    send_all(joined[static_cast<std::size_t>(r)].get(), msg.data(), msg.size(), deadline,
             "rendezvous", r);
  res.blobs = std::move(blobs);
  res.addresses = std::move(addresses);
  res.control = ControlChannel(0, std::move(joined));
  return res;
}

//! A peer's side: connect (retrying), say hello, wait for the welcome.
inline RendezvousResult rendezvous_peer(const RendezvousOptions& o, const std::string& blob) {
  const auto deadline = Deadline::after(o.timeout);
  const auto hello = Writer::message(MsgType::hello, hello_payload(o, blob));
  char hdr[kMsgHeaderBytes];
  Fd fd;
  while (true) {
    fd = connect_tcp(o.address, o.port, deadline, "rendezvous", 0);
    try {
      send_all(fd.get(), hello.data(), hello.size(), deadline, "rendezvous", 0);
      recv_all(fd.get(), hdr, sizeof hdr, deadline, "rendezvous", 0);
      break;
    } catch (const timeout_error&) {
      throw timeout_error("rendezvous", 0,
                          cat("rank ", o.rank, " connected to ", o.address, ":", o.port,
                              " but got no answer within ", o.timeout.count(),
                              " ms (are all ", o.world_size, " ranks started?)"));
    } catch (const peer_error& e) {
      // Closed without an answer: rank 0 dropped us among a flood of connections (or restarted).
      // A refusal always comes with a reason, so trying again is safe until the deadline.
      if (deadline.expired()) throw;
      log(LogLevel::info, cat("rendezvous: rank ", o.rank, " retries: ", e.what()));
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min(50, deadline.poll_ms())));
    }
  }
  const auto h = parse_header(hdr);
  if (h.magic != kWireMagic || h.version != kProtocolVersion)
    throw protocol_error(0, cat("rank 0 at ", o.address, ":", o.port,
                                " does not speak weightsync protocol ", kProtocolVersion));
  const std::size_t max_len = 64 + std::size_t(o.world_size) * (8 + 256 + o.max_blob_bytes);
  if (h.length > max_len)
    throw protocol_error(0, cat("rendezvous answer of ", h.length, " bytes exceeds ", max_len));
  std::string payload(h.length, '\0');
  recv_all(fd.get(), payload.data(), payload.size(), deadline, "rendezvous", 0);
  if (h.type == static_cast<std::uint16_t>(MsgType::reject)) {
    Reader r(payload, 0, "rendezvous answer");
    throw protocol_error(0, cat("rank 0 rejected rank ", o.rank, ": ", r.str(4096)));
  }
  if (h.type != static_cast<std::uint16_t>(MsgType::welcome))
    throw protocol_error(0, cat("unexpected rendezvous answer type ", h.type));
  auto welcome = parse_welcome(payload, o.world_size, o.max_blob_bytes);
  RendezvousResult res;
  res.rank = o.rank;
  res.world_size = welcome.world_size;
  res.session = welcome.session;
  res.blobs = std::move(welcome.blobs);
  res.addresses = std::move(welcome.addresses);
  std::vector<Fd> peers(static_cast<std::size_t>(o.world_size));
  peers[0] = std::move(fd);
  res.control = ControlChannel(o.rank, std::move(peers));
  return res;
}

}  // namespace detail

//! Meets the other ranks. `blob` is this rank's contribution (rank 0's is the bootstrap blob).
//! @throws timeout_error (phase "rendezvous") naming the missing ranks, protocol_error when rank 0
//!   rejects this rank (world size, token, duplicate), config_error for a taken port.
inline RendezvousResult rendezvous(const RendezvousOptions& o, const std::string& blob = {}) {
  o.validate();
  if (blob.size() > o.max_blob_bytes)
    throw config_error("blob", detail::cat(blob.size(), " bytes exceeds max_blob_bytes ", o.max_blob_bytes));
  if (o.world_size == 1) {
    RendezvousResult res;
    res.blobs = {blob};
    res.addresses = {o.address};
    res.session = detail::random_u64();
    return res;
  }
  return o.rank == 0 ? detail::rendezvous_root(o, blob) : detail::rendezvous_peer(o, blob);
}

}  // namespace weightsync
