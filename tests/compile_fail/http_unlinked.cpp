// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Must not compile: a target that links weightsync::weightsync (and sees <httplib.h>) but not
// weightsync::http includes the HTTP control plane. The build must stop with one line that names
// weightsync::http, not compile and then fail to link against cpp-httplib's library.
#include <weightsync/vllm/control_plane.hpp>

int main() {
  weightsync::http::VllmClient client("http://127.0.0.1:1");
  return client.url().empty() ? 1 : 0;
}
