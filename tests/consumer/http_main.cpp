// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// A consumer of weightsync::http: includes the HTTP control plane and makes cpp-httplib's server
// and client do one request, so that the program must link cpp-httplib's definitions (a split
// build's library) with the same compile definitions it was built with.
#include <weightsync/vllm/control_plane.hpp>

#include <cstdio>
#include <string>
#include <thread>

int main() {
  httplib::Server server;
  server.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok", "text/plain");
  });
  const int port = server.bind_to_any_port("127.0.0.1");
  if (port <= 0) return 1;
  std::thread t([&] { server.listen_after_bind(); });
  httplib::Client client("127.0.0.1", port);
  // weightsync's own client of the vLLM routes (constructed only: nothing listens there).
  weightsync::http::VllmClient trainer_side("http://127.0.0.1:" + std::to_string(port));
  const auto res = client.Get("/health");
  server.stop();
  t.join();
  const bool ok = res && res->status == 200 && res->body == "ok";
  std::printf("weightsync %s HTTP consumer: GET /health -> %s\n", WEIGHTSYNC_VERSION_STRING,
              ok ? "ok" : "failed");
  return ok ? 0 : 1;
}
