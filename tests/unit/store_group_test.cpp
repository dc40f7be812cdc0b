// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// The TCPStore group (vLLM's StatelessProcessGroup over c10d): a rank that never joins, and a
// unique id that is not vLLM's pickle.
#include <weightsync/c10d/client.hpp>
#include <weightsync/c10d/store_group.hpp>

#include <chrono>
#include <string>
#include <thread>

#include "support/catch.hpp"
#include "support/process.hpp"

// (a namespace per test source: the sources build as unity translation units)
namespace ws_test_store_group_test {

using namespace weightsync;
using namespace std::chrono_literals;

TEST_CASE(
    "store group: rank 0 names a rank that never joins, a rank > 0 refuses a value that is "
    "not vLLM's pickle",
    "[unit][tcp_store][vllm]") {
  StoreGroupOptions o;
  o.world_size = 3;
  o.timeout = 300ms;
  try {
    (void)StoreGroup::create(o);  // rank 0 hosts on a free port; nobody else comes
    FAIL("no timeout");
  } catch (const timeout_error& e) {
    CHECK(std::string(e.what()).find("1 of 3 ranks joined") != std::string::npos);
  }
  // Two C++ ranks: rank 0 stores something else under vLLM's key.
  o.world_size = 2;
  o.timeout = 5000ms;
  o.port = ws_test::free_port();
  std::string host_error;
  std::thread host([&] {
    try {
      auto g = StoreGroup::create(o);  // returns once rank 1 joined
      g.broadcast("not a pickle", 0);
      g.store().wait({"r1/done"});
    } catch (const std::exception& e) {
      host_error = e.what();
    }
  });
  StoreGroupOptions o1 = o;
  o1.rank = 1;
  auto g1 = StoreGroup::create(o1);
  try {
    (void)vllm_exchange_unique_id(g1, {});
    FAIL("accepted");
  } catch (const protocol_error& e) {
    CHECK(std::string(e.what()).find("12 bytes, expected 247") != std::string::npos);
  }
  g1.store().set("r1/done", "1");
  host.join();
  CHECK(host_error.empty());
}

}  // namespace ws_test_store_group_test
