// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Rank 0's side of the rendezvous: one poll loop accepts connections, reads each one's hello
//! without ever blocking on it, vets it (magic, version, world size, rank, token, duplicates) and
//! drops a bad or silent peer with a logged reason; once every rank joined, it answers each with
//! the welcome. A flood of strangers cannot lock the real ranks out: past kMaxPendingHellos
//! connections awaiting their hello, the oldest is dropped.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <ios>
#include <string>
#include <string_view>
#include <stop_token>
#include <utility>
#include <vector>

#include "weightsync/detail/format.hpp"
#include "weightsync/detail/rendezvous_messages.hpp"
#include "weightsync/detail/socket.hpp"
#include "weightsync/detail/wire.hpp"
#include "weightsync/error.hpp"
#include "weightsync/log.hpp"

namespace weightsync::detail {

//! Connections rank 0 keeps waiting for a hello at once; past it, the oldest is dropped.
inline constexpr std::size_t kMaxPendingHellos = 64;

//! What rank 0 needs to know of the rendezvous it hosts.
struct RootSettings {
  std::string address;
  int port = 0;
  int world_size = 1;
  std::string token;
  std::chrono::milliseconds timeout{60000};
  std::chrono::milliseconds hello_timeout{5000};
  std::size_t max_blob_bytes = 4096;
  std::stop_token stop;  //!< a stop requested ends the wait (state_error)
};

class RendezvousRoot {
 public:
  //! What rank 0 ends with: every rank's blob and address, a connection to every peer.
  struct Joined {
    std::uint64_t session = 0;
    std::vector<std::string> blobs, addresses;
    std::vector<Fd> peers;
  };

  RendezvousRoot(RootSettings s, const std::string& blob)
      : o_(std::move(s)),
        deadline_(Deadline::after(o_.timeout)),
        listener_(listen_tcp(o_.address, o_.port)),
        joined_(static_cast<std::size_t>(o_.world_size)),
        blobs_(static_cast<std::size_t>(o_.world_size)),
        addresses_(static_cast<std::size_t>(o_.world_size)) {
    blobs_[0] = blob;
    addresses_[0] = o_.address;
  }

  //! Waits until every rank joined, then welcomes them. @throws timeout_error naming the ranks
  //! that never joined (and the reasons of the last rejections).
  Joined run() {
    while (count_ < o_.world_size) {
      if (deadline_.expired()) throw missing_ranks();
      if (o_.stop.stop_requested())
        throw state_error(cat("rendezvous: rank 0 on ", o_.address, ":", local_port(listener_.get()),
                              " stopped waiting (a stop was requested), ", count_, " of ",
                              o_.world_size, " ranks joined"));
      poll_once();
    }
    listener_.reset();  // late strangers get "connection refused"
    for (auto& p : pending_) reject(p, "rendezvous already complete", true);
    return welcome();
  }

 private:
  struct Pending {
    Fd fd;
    Deadline until;
    std::string buf;
    std::string from;
    std::string host;
  };

  //! One wait on the listener and every pending connection.
  void poll_once() {
    std::vector<pollfd> fds{{listener_.get(), POLLIN, 0}};
    int wait_ms = deadline_.poll_ms();
    if (o_.stop.stop_possible()) wait_ms = std::min(wait_ms, 50);  // (to see a stop request)
    for (auto& p : pending_) {
      fds.push_back({p.fd.get(), POLLIN, 0});
      wait_ms = std::min(wait_ms, p.until.poll_ms());
    }
    const int rc = ::poll(fds.data(), fds.size(), std::max(wait_ms, 1));
    if (rc < 0 && errno != EINTR) throw system_error("poll: " + errno_string(errno), errno);
    for (std::size_t i = 1; i < fds.size(); ++i)
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) pump(pending_[i - 1]);
    for (auto& p : pending_)
      if (p.fd && p.until.expired())
        reject(p, cat("no complete hello within ", o_.hello_timeout.count(), " ms"), false);
    std::erase_if(pending_, [](const Pending& p) { return !p.fd; });
    if (fds[0].revents & POLLIN) accept_all();
  }

  //! Accepts every connection waiting on the listener.
  void accept_all() {
    while (true) {
      sockaddr_storage ss{};
      socklen_t len = sizeof ss;
      Fd fd(::accept4(listener_.get(), reinterpret_cast<sockaddr*>(&ss), &len,
                      SOCK_CLOEXEC | SOCK_NONBLOCK));
      if (!fd) break;
      set_socket_options(fd.get());
      const auto [host, port] = peer_of(ss);
      Pending p{std::move(fd),
                Deadline::after(o_.hello_timeout),
                {},
                cat(" from ", host, ":", port),
                host};
      // A real peer sends its hello right after connecting: often it is already here.
      pump(p);
      if (!p.fd) continue;
      // A flood of silent connections must not lock the real ranks out: past the bound, the
      // oldest connection still without a hello makes room (a real peer's is seconds younger).
      std::erase_if(pending_, [](const Pending& q) { return !q.fd; });
      if (pending_.size() >= kMaxPendingHellos) {
        reject(pending_.front(),
               cat("dropped: more than ", kMaxPendingHellos,
                   " connections awaiting their hello, this one the oldest"),
               false);
        pending_.erase(pending_.begin());
      }
      pending_.push_back(std::move(p));
    }
  }

  static std::pair<std::string, int> peer_of(const sockaddr_storage& ss) {
    char host[INET6_ADDRSTRLEN] = {};
    int port = 0;
    if (ss.ss_family == AF_INET) {
      const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
      ::inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
      port = ntohs(a->sin_port);
    } else if (ss.ss_family == AF_INET6) {
      const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
      ::inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
      port = ntohs(a->sin6_port);
    }
    return {host, port};
  }

  //! Reads what a pending connection has sent (never blocks) and handles a complete hello.
  void pump(Pending& p) {
    char buf[4096];
    const ssize_t k = ::recv(p.fd.get(), buf, sizeof buf, MSG_DONTWAIT);
    if (k <= 0) {
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
      return reject(p, "connection closed before a complete hello", false);
    }
    p.buf.append(buf, static_cast<std::size_t>(k));
    handle(p);
  }

  //! Vets the message in p.buf once its header (and then all of it) has arrived.
  void handle(Pending& p) {
    if (p.buf.size() < kMsgHeaderBytes) return;
    const auto h = parse_header(p.buf.data());
    if (h.magic != kWireMagic) return reject(p, cat("bad magic 0x", std::hex, h.magic), false);
    if (h.version != kProtocolVersion)
      return reject(p, cat("protocol version ", h.version, ", rank 0 speaks ", kProtocolVersion),
                    true);
    if (h.type != static_cast<std::uint16_t>(MsgType::hello))
      return reject(p, cat("expected a hello, got message type ", h.type), true);
    const std::size_t max_len = 16 + 4 + o_.token.size() + 4 + o_.max_blob_bytes + 256;
    if (h.length > max_len)
      return reject(p, cat("length prefix ", h.length, " exceeds the limit of ", max_len), false);
    if (p.buf.size() < kMsgHeaderBytes + h.length) return;
    try {
      admit(p, parse_hello(std::string_view(p.buf).substr(kMsgHeaderBytes, h.length),
                           o_.max_blob_bytes));
    } catch (const protocol_error& e) {
      reject(p, e.what(), true);
    }
  }

  //! A well-formed hello: joins, or is refused with the reason.
  void admit(Pending& p, Hello hello) {
    const int rank = hello.rank;
    if (hello.world_size != o_.world_size)
      return reject(
          p,
          cat("rank ", rank, " has world_size ", hello.world_size, ", rank 0 has ", o_.world_size),
          true);
    if (rank < 1 || rank >= o_.world_size)
      return reject(p, cat("rank ", rank, " is outside 1..", o_.world_size - 1), true);
    if (hello.token != o_.token) return reject(p, cat("rank ", rank, " sent a wrong token"), true);
    const auto r = static_cast<std::size_t>(rank);
    if (joined_[r])
      return reject(p, cat("rank ", rank, " has already joined (duplicate rank)"), true);
    joined_[r] = std::move(p.fd);
    blobs_[r] = std::move(hello.blob);
    addresses_[r] = p.host;
    ++count_;
    log(LogLevel::debug, cat("rendezvous: rank ", rank, " joined", p.from));
  }

  //! Drops a connection with a logged reason, telling the peer why when `answer`.
  void reject(Pending& p, const std::string& why, bool answer) {
    log(LogLevel::warning, cat("rendezvous: rank 0 rejected a connection", p.from, ": ", why));
    if (rejected_.size() < 8) rejected_.push_back(why);
    if (answer) {
      Writer w;
      w.str(why);
      const auto msg = Writer::message(MsgType::reject, w.bytes());
      try {
        send_all(p.fd.get(), msg.data(), msg.size(),
                 Deadline::after(std::chrono::milliseconds(200)), "rendezvous", -1);
      } catch (...) {
      }
    }
    p.fd.reset();
  }

  timeout_error missing_ranks() const {
    std::string missing;
    int first_missing = -1;
    for (int r = 1; r < o_.world_size; ++r)
      if (!joined_[static_cast<std::size_t>(r)]) {
        missing += cat(missing.empty() ? "" : ", ", r);
        if (first_missing < 0) first_missing = r;
      }
    std::string rej;
    for (const auto& s : rejected_) rej += "; rejected: " + s;
    return timeout_error("rendezvous", first_missing,
                         cat("rank 0 waited ", o_.timeout.count(), " ms on ", o_.address, ":",
                             local_port(listener_.get()), "; rank(s) ", missing, " of ",
                             o_.world_size, " never joined", rej));
  }

  //! Answers every joined rank with every rank's blob and address.
  Joined welcome() {
    Joined out;
    out.session = random_u64();
    Writer w;
    w.i32(o_.world_size);
    w.u64(out.session);
    for (const auto& b : blobs_) w.str(b);
    for (const auto& a : addresses_) w.str(a);
    const auto msg = Writer::message(MsgType::welcome, w.bytes());
    for (int r = 1; r < o_.world_size; ++r)
      send_all(joined_[static_cast<std::size_t>(r)].get(), msg.data(), msg.size(), deadline_,
               "rendezvous", r);
    out.blobs = std::move(blobs_);
    out.addresses = std::move(addresses_);
    out.peers = std::move(joined_);
    return out;
  }

  RootSettings o_;
  Deadline deadline_;
  Fd listener_;
  std::vector<Pending> pending_;
  std::vector<Fd> joined_;
  std::vector<std::string> blobs_, addresses_;
  int count_ = 1;
  std::vector<std::string> rejected_;
};

}  // namespace weightsync::detail
