// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#include <weightsync/concepts.hpp>
#include <weightsync/engine/comm_backend.hpp>
#include <weightsync/engine/transport.hpp>
#include <weightsync/host/communicator.hpp>

#include <span>
#include <string>
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
// A transport of whole tensors only: it counts its sends and receives.
struct WholeOnly {
  using stream_type = HostStream;
  int* calls;
  int rank() const { return 0; }
  int size() const { return 2; }
  bool healthy() const { return true; }
  void check() {}
  void abort(const std::string&) noexcept {}
  TransferStats send(std::span<const TensorMeta>, AnyTensorRange&, const TransferOptions&) {
    ++*calls;
    return {};
  }
  TransferStats receive(std::span<const TensorMeta>, const TransferOptions&,
                        const LoadOn<HostStream>&) {
    ++*calls;
    return {};
  }
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
  STATIC_REQUIRE(ShardedTransport<CollectiveTransport<HostCommunicator>>);
  STATIC_REQUIRE(Transport<WholeOnly>);  // sharding is a refinement
  STATIC_REQUIRE(!ShardedTransport<WholeOnly>);
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

TEST_CASE("a transport without sharded transfers serves whole ones and refuses a ShardLayout",
          "[unit][concepts][engine]") {
  static int calls = 0;
  calls = 0;
  auto backend = make_transport_backend(
      "whole-only", [](const GroupInfo&, int, const EngineOptions&) { return WholeOnly{&calls}; });
  GroupInfo g;
  g.world_size = 2;
  g.master_address = "127.0.0.1";
  g.master_port = 1;
  backend->init(g, 0, EngineOptions{});
  const std::vector<TensorMeta> metas = {{"w", DType::float32, {4}}};
  AnyTensorRange none([](SourceTensorRef&) { return false; });
  AnyLoadWeights load = [](std::span<const TensorView>, void*) {};
  backend->send(metas, none, TransferOptions{});
  backend->receive(metas, TransferOptions{}, load);
  CHECK(calls == 2);
  const std::vector<ShardSpec> specs(1);
  const ShardLayout layout{specs, 2};
  try {
    backend->send(metas, none, TransferOptions{}, &layout);
    FAIL("a layout was accepted");
  } catch (const config_error& e) {
    CHECK(std::string(e.what()).find("whole-only backend: sharded transfers are not implemented") !=
          std::string::npos);
  }
  CHECK_THROWS_AS(backend->receive(metas, TransferOptions{}, load, &layout), config_error);
  CHECK(calls == 2);
}

}  // namespace ws_test_concepts_test
