// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! Joining a world on 127.0.0.1 from a test: the rendezvous options of one rank, a host
//! communicator, and the init info an engine gets (address, port, world, rank offset).

#include <weightsync/host/communicator.hpp>
#include <weightsync/host/rendezvous.hpp>
#include <weightsync/vllm.hpp>

#include <chrono>

namespace ws_test {

//! Rank `rank` of `world` meeting on 127.0.0.1:`port`, giving up after `timeout`.
inline weightsync::RendezvousOptions loopback_rendezvous(int port, int rank, int world,
                                                         std::chrono::milliseconds timeout) {
  weightsync::RendezvousOptions o;
  o.address = "127.0.0.1";
  o.port = port;
  o.rank = rank;
  o.world_size = world;
  o.timeout = timeout;
  return o;
}

//! A HostCommunicator for rank `rank` of `world` on 127.0.0.1:`port`.
inline weightsync::HostCommunicator connect_host(int port, int rank, int world,
                                                 std::chrono::milliseconds rendezvous_timeout,
                                                 std::chrono::milliseconds op_timeout) {
  return weightsync::HostCommunicator::connect(
      loopback_rendezvous(port, rank, world, rendezvous_timeout), op_timeout);
}

//! What a trainer hands the engines to meet on 127.0.0.1:`port` (the transfer options keep their
//! defaults; the caller sets what its test needs).
inline weightsync::NcclInitInfo loopback_init_info(int port, int world, int rank_offset = 1) {
  weightsync::NcclInitInfo i;
  i.master_address = "127.0.0.1";
  i.master_port = port;
  i.world_size = world;
  i.rank_offset = rank_offset;
  return i;
}

}  // namespace ws_test
