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

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <stop_token>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "weightsync/detail/format.hpp"
#include "weightsync/detail/rendezvous_messages.hpp"
#include "weightsync/detail/rendezvous_root.hpp"
#include "weightsync/detail/socket.hpp"
#include "weightsync/detail/wire.hpp"
#include "weightsync/error.hpp"
#include "weightsync/host/control_channel.hpp"
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
  //! Rank 0 only: a stop requested here ends its wait within about 50 ms (state_error).
  std::stop_token stop;

  void validate() const {
    if (world_size < 1)
      throw config_error("world_size", detail::cat("must be >= 1, got ", world_size));
    if (rank < 0 || rank >= world_size)
      throw config_error("rank", detail::cat("must be in 0..", world_size - 1, ", got ", rank));
    if (port < 0 || port > 65535)
      throw config_error("master_port", detail::cat("must be in 0..65535, got ", port));
    if (rank != 0 && port == 0) throw config_error("master_port", "ranks > 0 need rank 0's port");
    if (timeout.count() <= 0) throw config_error("timeout", "must be > 0");
  }
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

//! The hello of rank o.rank (kept for callers of the earlier signature).
inline std::string hello_payload(const RendezvousOptions& o, const std::string& blob) {
  return hello_payload(o.rank, o.world_size, o.token, blob);
}

//! Rank 0's side: accept, vet and answer every peer (RendezvousRoot).
inline RendezvousResult rendezvous_root(const RendezvousOptions& o, const std::string& blob) {
  auto joined = RendezvousRoot({o.address, o.port, o.world_size, o.token, o.timeout,
                                o.hello_timeout, o.max_blob_bytes, o.stop},
                               blob)
                    .run();
  RendezvousResult res;
  res.rank = 0;
  res.world_size = o.world_size;
  res.session = joined.session;
  res.blobs = std::move(joined.blobs);
  res.addresses = std::move(joined.addresses);
  res.control = ControlChannel(0, std::move(joined.peers));
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
                              " but got no answer within ", o.timeout.count(), " ms (are all ",
                              o.world_size, " ranks started?)"));
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
    throw config_error(
        "blob", detail::cat(blob.size(), " bytes exceeds max_blob_bytes ", o.max_blob_bytes));
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
