// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <string>

namespace ws_test {
//! Set when this test binary runs as a peer process of a multi-process test (see process.hpp).
struct Role {
  int rank = -1;
  int world = 0;
  int port = 0;
  std::string arg;
  bool is_peer() const { return rank >= 0; }
};
inline Role& role() {
  static Role r;
  return r;
}
}  // namespace ws_test
