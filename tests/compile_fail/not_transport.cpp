// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Must not compile: HalfTransport can send and receive whole tensors but not shards.
#include <weightsync/engine/transport.hpp>

#include <span>
#include <string>

using namespace weightsync;

struct HalfTransport {
  int rank() const { return 0; }
  int size() const { return 2; }
  bool healthy() const { return true; }
  void check() {}
  void abort(const std::string&) noexcept {}
  TransferStats send(std::span<const TensorMeta>, AnyTensorRange&, const TransferOptions&) {
    return {};
  }
  TransferStats receive(std::span<const TensorMeta>, const TransferOptions&,
                        const AnyLoadWeights&) {
    return {};
  }
};

int main() {
  auto make = [](const NcclInitInfo&, int, const EngineOptions&) { return HalfTransport{}; };
  TransportBackend<HalfTransport, decltype(make)> b("half", make);
}
