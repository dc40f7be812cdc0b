// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Must not compile: SendOnly can send whole tensors but not receive them.
#include <weightsync/engine/transport.hpp>

#include <span>
#include <string>

using namespace weightsync;

struct SendOnly {
  using stream_type = int;
  int rank() const { return 0; }
  int size() const { return 2; }
  bool healthy() const { return true; }
  void check() {}
  void abort(const std::string&) noexcept {}
  TransferStats send(std::span<const TensorMeta>, AnyTensorRange&, const TransferOptions&) {
    return {};
  }
};

int main() {
  auto make = [](const GroupInfo&, int, const EngineOptions&) { return SendOnly{}; };
  TransportBackend<SendOnly, decltype(make)> b("send-only", make);
}
