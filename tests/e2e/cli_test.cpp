// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// The example binaries' command lines (issue 27) and the trainer's errors (issue 28): --help
// starts nothing, a bad argument is named, a byte count reads 1M as 1 MiB, and a trainer whose
// server is missing or refuses its token fails at once with that reason.
#include <weightsync/detail/socket.hpp>

#include <string>
#include <vector>

#include "demo_process.hpp"
#include "progress_line.hpp"
#include "support/catch.hpp"
#include "support/process.hpp"

// (a namespace per test source: the sources build as unity translation units)
namespace ws_test_cli_test {

using namespace std::chrono_literals;
using ws_e2e::Proc;
using ws_e2e::start;

namespace {
// Runs argv to completion (at most `limit`); returns its exit code and output.
std::pair<int, std::string> run(const std::vector<std::string>& args,
                                std::chrono::milliseconds limit = 10000ms) {
  Proc p = start(args);
  const int rc = p.wait(limit);
  return {rc, p.output()};
}
bool has(const std::string& s, const std::string& needle) {
  return s.find(needle) != std::string::npos;
}
}  // namespace

TEST_CASE("examples: --help prints usage and exits 0 at once", "[e2e][cli]") {
  for (const char* bin :
       {WEIGHTSYNC_DEMO_SERVER, WEIGHTSYNC_DEMO_TRAINER, WEIGHTSYNC_PLAN_LAYOUT}) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto [rc, out] = run({bin, "--help"});
    INFO(bin << ":\n" << out);
    CHECK(rc == 0);
    CHECK(has(out, "usage:"));
    CHECK_FALSE(has(out, "serving"));  // the server did not start
    CHECK(std::chrono::steady_clock::now() - t0 < 3s);
  }
}

TEST_CASE("examples: a bad argument is an error naming it", "[e2e][cli]") {
  {
    const auto [rc, out] = run({WEIGHTSYNC_DEMO_SERVER, "--port", "abc"});
    CHECK(rc == 2);
    CHECK(has(out, "--port: expected an integer in 0..65535, got 'abc'"));
    CHECK_FALSE(has(out, "stoi"));
  }
  {
    const auto [rc, out] = run({WEIGHTSYNC_DEMO_SERVER, "--port"});
    CHECK(rc == 2);
    CHECK(has(out, "--port: needs a value"));
  }
  {
    const auto [rc, out] = run({WEIGHTSYNC_DEMO_SERVER, "--max-body-bytes", "12Q"});
    CHECK(rc == 2);
    CHECK(has(out, "--max-body-bytes"));
  }
  {
    const auto [rc, out] = run({WEIGHTSYNC_DEMO_TRAINER, "--syncs", "two"});
    CHECK(rc == 2);
    CHECK(has(out, "--syncs: expected an integer"));
  }
  {
    const auto [rc, out] = run({WEIGHTSYNC_DEMO_TRAINER, "--server", "127.0.0.1:8000"});
    CHECK(rc == 2);
    CHECK(has(out, "--server: expected http://host:port"));
  }
  {
    const auto [rc, out] = run({WEIGHTSYNC_PLAN_LAYOUT, "small1b", "1X"});
    CHECK(rc == 2);
    CHECK(has(out, "B: expected a byte count"));
  }
}

TEST_CASE("plan_layout: 1M is one MiB", "[e2e][cli]") {
  const auto [rc, out] = run({WEIGHTSYNC_PLAN_LAYOUT, "small1b", "1M"});
  INFO(out);
  CHECK(rc == 0);
  CHECK(has(out, "B = 1048576,"));
}

TEST_CASE("trainer: no server at the URL fails at once, naming it and 'connection refused'",
          "[e2e][cli][demo]") {
  const int port = ws_test::free_port();  // nothing listens there
  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  const auto t0 = std::chrono::steady_clock::now();
  const auto [rc, out] = run({WEIGHTSYNC_DEMO_TRAINER, "--server", url}, 20000ms);
  INFO(out);
  CHECK(rc == 2);
  CHECK(has(out, url));
  CHECK(has(out, "connection refused"));
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
}

TEST_CASE("trainer with --token: a wrong or missing token is the server's 401, at once",
          "[e2e][cli][demo]") {
  const int port = ws_test::free_port();
  Proc server = ws_e2e::start_server(port, {"--token", "right"});
  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  for (const std::vector<std::string>& tok :
       {std::vector<std::string>{}, std::vector<std::string>{"--token", "wrong"}}) {
    std::vector<std::string> args{WEIGHTSYNC_DEMO_TRAINER, "--server", url, "--syncs", "1"};
    args.insert(args.end(), tok.begin(), tok.end());
    const auto t0 = std::chrono::steady_clock::now();
    const auto [rc, out] = run(args, 20000ms);
    INFO(out);
    CHECK(rc == 2);
    CHECK(has(out, "answered 401"));
    CHECK_FALSE(has(out, "never joined"));
    CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  }
  const auto [rc, out] =
      run({WEIGHTSYNC_DEMO_TRAINER, "--server", url, "--syncs", "1", "--token", "right"}, 60000ms);
  INFO(out << "\nserver:\n" << server.output());
  CHECK(rc == 0);
  CHECK(has(out, "answers match the trainer's"));
}

TEST_CASE("trainer: a server that never answers is a timeout within the trainer's deadline",
          "[e2e][cli][demo]") {
  // A listener nobody accepts on: connections complete in the kernel, no answer ever comes.
  auto l = weightsync::detail::listen_tcp("127.0.0.1", 0);
  const std::string url =
      "http://127.0.0.1:" + std::to_string(weightsync::detail::local_port(l.get()));
  const auto t0 = std::chrono::steady_clock::now();
  const auto [rc, out] =
      run({WEIGHTSYNC_DEMO_TRAINER, "--server", url, "--timeout-s", "1"}, 20000ms);
  INFO(out);
  CHECK(rc == 2);
  CHECK(has(out, url));
  CHECK(has(out, "timed out"));
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);  // --timeout-s 1 + the HTTP grace of 5 s
}

TEST_CASE("examples: an unknown option is 'unknown option', even as the last argument",
          "[e2e][cli]") {
  for (const char* bin : {WEIGHTSYNC_DEMO_SERVER, WEIGHTSYNC_DEMO_TRAINER}) {
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{bin, "--bogus"}, std::vector<std::string>{bin, "--bogus", "1"}}) {
      const auto [rc, out] = run(args);
      INFO(bin << ":\n" << out);
      CHECK(rc != 0);
      CHECK(has(out, "--bogus"));
      CHECK(has(out, "unknown option (known: "));
      CHECK_FALSE(has(out, "needs a value"));
    }
    // A known option without its value is still told so.
    const auto [rc, out] = run({bin, "--backend"});
    INFO(bin << ":\n" << out);
    CHECK(rc != 0);
    CHECK(has(out, "--backend"));
    CHECK(has(out, "needs a value"));
  }
}

TEST_CASE("demo summary: a data phase of microseconds reads as such, with no rate",
          "[e2e][cli]") {
  weightsync::TransferStats st;
  st.tensors = 12;
  st.bytes = 1196;
  st.chunks = 1;
  st.total = 310us;
  st.handshake = 250us;
  st.data = 4600ns;  // (eager: the bytes came inside the handshake)
  const auto eager = demo::summary(st);
  INFO(eager);
  CHECK(has(eager, "310.0 us (handshake 250.0 us, data 4.6 us)"));
  CHECK_FALSE(has(eager, "GB/s"));
  CHECK_FALSE(has(eager, "0.00 ms"));
  st.bytes = 1000000000;
  st.data = 10ms;
  st.total = 12ms;
  const auto big = demo::summary(st);
  INFO(big);
  CHECK(has(big, "12.00 ms (handshake 250.0 us, data 10.00 ms at 100.000 GB/s)"));
}

}  // namespace ws_test_cli_test
