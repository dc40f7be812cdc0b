// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Must not compile: NotAComm has no stream_type and no broadcast().
#include <weightsync/host/device_policy.hpp>
#include <weightsync/packed_broadcast.hpp>

#include <vector>

struct NotAComm {
  int rank() const { return 0; }
  int size() const { return 2; }
};

int main() {
  NotAComm comm;
  std::vector<weightsync::TensorMeta> metas;
  std::vector<weightsync::SourceTensorRef> items;
  weightsync::packed_broadcast_producer(metas, items, comm, 0);
}
