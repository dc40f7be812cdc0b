// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// The HTTP route bodies: what every vLLM route does with a request before it reaches the engine
// (size limit, token, JSON body and its depth limit, the route's fields). The first byte picks the
// route, the token, the depth limit (default, or 2..8) and whether /pause has a query mode (then
// the bytes after the input's last newline, any bytes: the server refuses a mode that is not
// UTF-8 before the route, the route must not trip on one either); every input ends in 200 (valid)
// or a 4xx with a JSON {"error": ...}, never another exception, and no accepted body nests deeper
// than the limit.
#include <weightsync/vllm/control_plane.hpp>

#include <algorithm>
#include <string>

#include "fuzz_support.hpp"

namespace ws = weightsync;
namespace d = weightsync::http::detail;

// Nesting depth of a parsed value (a scalar: 0).
static int depth(const nlohmann::json& j) {
  int d = 0;
  if (j.is_structured())
    for (const auto& x : j) d = std::max(d, depth(x));
  return j.is_structured() ? d + 1 : 0;
}

WS_FUZZ_ENTRY {
  if (size < 1) return 0;
  httplib::Request req;
  req.body.assign(reinterpret_cast<const char*>(data + 1), size - 1);
  std::string query = "keep";
  if ((data[0] & 0x20) && (data[0] % 4) == 3) {
    const std::size_t nl = req.body.rfind('\n');
    if (nl != std::string::npos) {
      query = req.body.substr(nl + 1);
      req.body.resize(nl);
    }
  }
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
  const int depth_bits = (data[0] >> 2) & 7;  // 0: the default limit (64)
  if (depth_bits) o.max_json_depth = 1 + depth_bits;
  auto body = d::body_json(req, res, o.max_json_depth);
  if (!body) {
    ws_fuzz::require(res.status == 400, "bad JSON answered with another status");
    return 0;
  }
  ws_fuzz::require(depth(*body) <= o.max_json_depth, "JSON deeper than the limit was accepted");
  d::guarded(res, "fuzz", [&] {
    switch (data[0] % 4) {
      case 0: (void)d::parse_init_body(*body); break;
      case 1: (void)d::parse_update_body(*body); break;
      case 2: (void)d::parse_finish_body(*body); break;
      default: {
        (void)d::parse_pause_body(*body, (data[0] & 0x20) ? &query : nullptr);
      }
    }
    d::reply(res, 200, {{"ok", true}});
  });
  ws_fuzz::require(res.status == 200 || res.status == 400, "route body answered neither 200 nor 400");
  ws_fuzz::require(nlohmann::json::parse(res.body).is_object(), "answer is not a JSON object");
  return 0;
}
