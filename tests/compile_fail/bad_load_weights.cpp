// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Must not compile: load_weights takes one view, not a batch and a stream.
#include <weightsync/host/communicator.hpp>
#include <weightsync/packed_broadcast.hpp>

#include <vector>

int main() {
  weightsync::HostCommunicator comm;
  std::vector<weightsync::TensorMeta> metas;
  weightsync::packed_broadcast_consumer(metas, comm, 0, [](const weightsync::TensorView&) {});
}
