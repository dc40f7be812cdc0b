// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! The demo's processes for the end-to-end tests: start one (output to a temporary log), wait for
//! it with a limit, kill it when the test is over.

#include <weightsync/vllm/control_plane.hpp>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "support/catch.hpp"
#include "support/child.hpp"
#include "support/process.hpp"

namespace ws_e2e {

using namespace std::chrono_literals;
namespace ws = weightsync;

using Proc = ws_test::Child;

//! Starts `args` (argv[0] a path), output to a temporary log removed with the handle.
inline Proc start(const std::vector<std::string>& args) { return Proc(args, "/tmp/ws_e2e_XXXXXX"); }

//! Starts the demo server on 127.0.0.1:`port` (plus `extra` options) and waits until it answers.
inline Proc start_server(int port, std::vector<std::string> extra = {}) {
  std::vector<std::string> args{WEIGHTSYNC_DEMO_SERVER, "--port", std::to_string(port)};
  args.insert(args.end(), extra.begin(), extra.end());
  Proc p = start(std::move(args));
  ws::http::VllmClient c("http://127.0.0.1:" + std::to_string(port), 2s);
  for (int i = 0; i < 200; ++i) {  // wait until it answers
    try {
      (void)c.weight_version();
      return p;
    } catch (const ws::error&) {
      std::this_thread::sleep_for(25ms);
    }
  }
  FAIL("the inference server did not come up:\n" << p.output());
  return p;
}

}  // namespace ws_e2e
