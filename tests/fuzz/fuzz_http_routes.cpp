// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// The HTTP route bodies: what every vLLM route does with a request before it reaches the engine
// (size limit, token, JSON body, the route's fields). The first byte picks the route; every input
// ends in 200 (valid) or a 4xx with a JSON {"error": ...}, never another exception.
#include <weightsync/http/control_plane.hpp>

#include "fuzz_support.hpp"

namespace ws = weightsync;
namespace d = weightsync::http::detail;

WS_FUZZ_ENTRY {
  if (size < 1) return 0;
  httplib::Request req;
  req.body.assign(reinterpret_cast<const char*>(data + 1), size - 1);
  if (data[0] & 0x80) req.set_header("Authorization", "Bearer " + req.body.substr(0, 8));
  httplib::Response res;
  ws::http::RouteOptions o;
  o.max_body_bytes = 4096;
  if (data[0] & 0x40) o.bearer_token = "s3cret-t";
  if (!d::admitted(o, req, res, true)) {
    ws_fuzz::require(res.status == 413 || res.status == 401, "refused with another status");
    ws_fuzz::require(nlohmann::json::parse(res.body).contains("error"), "refusal without an error");
    return 0;
  }
  auto body = d::body_json(req, res);
  if (!body) {
    ws_fuzz::require(res.status == 400, "bad JSON answered with another status");
    return 0;
  }
  d::guarded(res, "fuzz", [&] {
    switch (data[0] % 4) {
      case 0: (void)d::parse_init_body(*body); break;
      case 1: (void)d::parse_update_body(*body); break;
      case 2: (void)d::parse_finish_body(*body); break;
      default: {
        const std::string q = "keep";
        (void)d::parse_pause_body(*body, (data[0] & 0x20) ? &q : nullptr);
      }
    }
    d::reply(res, 200, {{"ok", true}});
  });
  ws_fuzz::require(res.status == 200 || res.status == 400, "route body answered neither 200 nor 400");
  ws_fuzz::require(nlohmann::json::parse(res.body).is_object(), "answer is not a JSON object");
  return 0;
}
