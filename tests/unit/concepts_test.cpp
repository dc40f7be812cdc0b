// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#include <weightsync/concepts.hpp>
#include <weightsync/engine/comm_backend.hpp>
#include <weightsync/engine/transport.hpp>
#include <weightsync/host/communicator.hpp>

#include <vector>

#include "support/catch.hpp"

// (a namespace per test source: the sources build as unity translation units)
namespace ws_test_concepts_test {

using namespace weightsync;

namespace {
struct NoStream {
  int rank() const { return 0; }
  int size() const { return 1; }
  void broadcast(void*, std::size_t, int, int) {}
};
struct MiniComm {
  using stream_type = int;
  int rank() const { return 0; }
  int size() const { return 1; }
  void broadcast(void*, std::size_t, int, int) {}
};
struct NoData {
  const TensorMeta& meta() const;
};
}  // namespace

TEST_CASE("concept models and non-models", "[unit][concepts]") {
  STATIC_REQUIRE(Communicator<HostCommunicator>);
  STATIC_REQUIRE(MonitoredCommunicator<HostCommunicator>);
  STATIC_REQUIRE(GroupedCommunicator<HostCommunicator>);  // a group of one broadcast per rank is an allgather
  STATIC_REQUIRE(!GroupedCommunicator<MiniComm>);
  STATIC_REQUIRE(Communicator<MiniComm>);
  STATIC_REQUIRE(!MonitoredCommunicator<MiniComm>);
  STATIC_REQUIRE(!Communicator<NoStream>);
  STATIC_REQUIRE(!Communicator<int>);
  STATIC_REQUIRE(Transport<CollectiveTransport<HostCommunicator>>);
  STATIC_REQUIRE(!Transport<HostCommunicator>);
  STATIC_REQUIRE(!Transport<int>);
  STATIC_REQUIRE(SourceTensor<SourceTensorRef>);
  STATIC_REQUIRE(!SourceTensor<NoData>);
  STATIC_REQUIRE(TensorIterator<std::vector<SourceTensorRef>>);
  STATIC_REQUIRE(TensorIterator<std::vector<SourceTensorRef>&>);
  STATIC_REQUIRE(!TensorIterator<std::vector<int>>);
  STATIC_REQUIRE(!TensorIterator<SourceTensorRef>);
  auto load = [](std::span<const TensorView>, HostStream) {};
  STATIC_REQUIRE(LoadWeightsFn<decltype(load), HostStream>);
  auto wrong = [](const TensorView&) {};
  STATIC_REQUIRE(!LoadWeightsFn<decltype(wrong), HostStream>);
}

}  // namespace ws_test_concepts_test
