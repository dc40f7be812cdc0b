// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Must not compile: a vector<int> is not a range of SourceTensor.
#include <weightsync/host/communicator.hpp>
#include <weightsync/packed_broadcast.hpp>

#include <vector>

int main() {
  weightsync::HostCommunicator comm;
  std::vector<weightsync::TensorMeta> metas;
  std::vector<int> items;
  weightsync::packed_broadcast_producer(metas, items, comm, 0);
}
