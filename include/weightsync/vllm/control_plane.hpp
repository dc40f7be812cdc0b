// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! vLLM's weight-transfer control routes over HTTP (cpp-httplib), for a C++ inference server, and
//! a client for them, for a C++ trainer:
//! - POST /init_weight_transfer_engine {"init_info": {...}} (vLLM's nccl or nccl_m2n init info)
//! - POST /start_weight_update, POST /update_weights {"update_info": {...}}
//! - POST /finish_weight_update {"weight_version": "..."}
//! - POST /pause (?mode=abort|wait|keep, or {"mode": ...}), POST /resume
//! - GET /is_paused, GET /get_world_size, GET /weight_info
//! Bad JSON or a bad field: 400 with {"error": ...}; a body over RouteOptions::max_body_bytes: 413;
//! a missing or wrong bearer token (when one is set): 401; a call in the wrong state: 409; a failed
//! transfer: 500 (the engine's session is then over and the previous weights stay in use); a wait
//! that ran out (e.g. init's rendezvous, nothing listening at master_port): 504.
//! A known path with another method: 405 with an Allow header (on a ControlServer, which also
//! bounds threads, queue, headers and timeouts: <weightsync/vllm/http_server.hpp>).
//! Optional: built only where cpp-httplib is available (CMake: WEIGHTSYNC_HAS_HTTPLIB).

#if !defined(__has_include) || !__has_include(<httplib.h>)
#error "<weightsync/vllm/control_plane.hpp> needs cpp-httplib (<httplib.h>)"
#endif
// cpp-httplib's compiled parts come with weightsync::http (which defines WEIGHTSYNC_LINKS_HTTP);
// without it a program would compile and then fail to link (undefined httplib::...).
#if !defined(WEIGHTSYNC_LINKS_HTTP)
#error "<weightsync/vllm/control_plane.hpp>: link weightsync::http to use it (CMake: target_link_libraries(<target> PRIVATE weightsync::http); without CMake: link cpp-httplib, define WEIGHTSYNC_LINKS_HTTP=1)"
#define WEIGHTSYNC_LINKS_HTTP 0  // (said once per translation unit)
#endif

#include <httplib.h>

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include <nlohmann/json.hpp>

#include "weightsync/detail/format.hpp"
#include "weightsync/detail/socket.hpp"
#include "weightsync/engine.hpp"
#include "weightsync/error.hpp"
#include "weightsync/log.hpp"
#include "weightsync/vllm.hpp"
#include "weightsync/vllm/http_server.hpp"

namespace weightsync::http {

//! What the server does around the engine's calls.
struct RouteHooks {
  //! load_weights for /update_weights (required).
  AnyLoadWeights load;
  //! Optional destinations for /update_weights (zero-copy).
  AnyDestination destination;
  //! After a successful start (e.g. prepare a staging copy of the weights).
  std::function<void()> on_start;
  //! After a successful finish, with the new version ("" when none was given): commit.
  std::function<void(const std::string& version)> on_finish;
  //! After a failed update (the session is over): discard what was staged.
  std::function<void(const std::string& error)> on_update_failed;
};

//! Limits and access control of the routes.
struct RouteOptions {
  //! Requests whose body is larger are refused with 413 (applied with set_payload_max_length by
  //! apply_limits; the routes also check the body they got). 0: no limit.
  std::size_t max_body_bytes = std::size_t{16} << 20;
  //! JSON bodies whose arrays and objects nest deeper are refused with 400 before they are
  //! parsed: nlohmann has no depth limit and spends ~70 bytes per level, so a body of '[' alone
  //! would cost ~70x its size. vLLM's bodies need 4 levels. 0: no limit.
  int max_json_depth = 64;
  //! When not empty, the routes that change the engine's state (init, start, update, finish, pause,
  //! resume) need "Authorization: Bearer <token>"; others get 401. The GET routes stay open.
  std::string bearer_token;
};

namespace detail {

//! Answers `status` with `body` as JSON (bytes that are not UTF-8 replaced: the dump cannot throw).
inline void reply(httplib::Response& res, int status, const nlohmann::json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                  "application/json");
}

//! True when arrays and objects in `text` nest deeper than `max_depth` (brackets inside strings do
//! not count). One pass, no allocation: it runs before the parser. Malformed JSON is left to the
//! parser.
inline bool json_nests_deeper(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_str = false, esc = false;
  for (const char c : text) {
    if (in_str) {
      if (esc)
        esc = false;
      else if (c == '\\')
        esc = true;
      else if (c == '"')
        in_str = false;
    } else if (c == '"') {
      in_str = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

//! Parses the request body as a JSON object (empty body: {}). Answers 400 and returns nullopt on
//! bad JSON, or JSON nested deeper than `max_depth` (RouteOptions::max_json_depth; 0: no limit).
inline std::optional<nlohmann::json> body_json(const httplib::Request& req, httplib::Response& res,
                                               int max_depth = RouteOptions{}.max_json_depth) {
  if (req.body.empty()) return nlohmann::json::object();
  if (max_depth > 0 && json_nests_deeper(req.body, max_depth)) {
    reply(res, 400,
          {{"error",
            weightsync::detail::cat("Invalid JSON: nested deeper than ", max_depth, " levels")}});
    return std::nullopt;
  }
  auto j = nlohmann::json::parse(req.body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    reply(res, 400, {{"error", "Invalid JSON format: the body must be a JSON object"}});
    return std::nullopt;
  }
  return j;
}

//! The route bodies' parsers (no engine involved): @throws config_error naming the field.
//! The init info of either vLLM backend (nccl or nccl_m2n, see parse_init_info).
inline AnyInitInfo parse_init_body(const nlohmann::json& body) {
  if (!body.contains("init_info"))
    throw config_error("init_info", "Missing 'init_info' in request body");
  return parse_init_info(body.at("init_info"));
}
//! The body's update_info, unparsed: how to read it depends on the engine's init info
//! (WeightTransferEngine::parse_update_info).
inline const nlohmann::json& update_info_of(const nlohmann::json& body) {
  if (!body.contains("update_info"))
    throw config_error("update_info", "Missing 'update_info' in request body");
  return body.at("update_info");
}
//! An NcclUpdateInfo body (an engine initialized with an NcclInitInfo reads this).
inline NcclUpdateInfo parse_update_body(const nlohmann::json& body) {
  return update_info_of(body).get<NcclUpdateInfo>();
}
inline std::optional<std::string> parse_finish_body(const nlohmann::json& body) {
  auto it = body.find("weight_version");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) throw config_error("weight_version", "expected a string or null");
  return it->get<std::string>();
}
//! The pause mode: the body's "mode", else the query's, else "abort" (vLLM's default).
inline std::string parse_pause_body(const nlohmann::json& body, const std::string* query_mode) {
  std::string mode = query_mode ? *query_mode : "abort";
  if (auto it = body.find("mode"); it != body.end()) {
    if (!it->is_string()) throw config_error("mode", "expected a string");
    mode = it->get<std::string>();
  }
  (void)parse_pause_mode(mode);
  return mode;
}

//! Constant-time comparison (the token check must not leak how much of a guess was right).
inline bool same_secret(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;  // the length is no secret
  unsigned diff = 0;
  for (std::size_t k = 0; k < a.size(); ++k)
    diff |=
        static_cast<unsigned>(static_cast<unsigned char>(a[k]) ^ static_cast<unsigned char>(b[k]));
  return diff == 0;
}

//! Answers 413 or 401 and returns false when the request is too large or lacks the token.
inline bool admitted(const RouteOptions& o, const httplib::Request& req, httplib::Response& res,
                     bool changes_state) {
  if (o.max_body_bytes > 0 && req.body.size() > o.max_body_bytes) {
    reply(res, 413,
          {{"error", weightsync::detail::cat("request body of ", req.body.size(),
                                             " bytes exceeds the limit of ", o.max_body_bytes)}});
    return false;
  }
  if (!changes_state || o.bearer_token.empty()) return true;
  const std::string auth = req.get_header_value("Authorization");
  constexpr std::string_view kBearer = "Bearer ";
  if (auth.size() <= kBearer.size() || auth.compare(0, kBearer.size(), kBearer) != 0 ||
      !same_secret(std::string_view(auth).substr(kBearer.size()), o.bearer_token)) {
    res.set_header("WWW-Authenticate", "Bearer");
    reply(res, 401,
          {{"error", "this route needs 'Authorization: Bearer <token>' with the server's token"}});
    return false;
  }
  return true;
}

//! Runs `f`, mapping weightsync's errors to HTTP statuses: a bad field 400, a call in the wrong
//! state 409, a wait that ran out (a rendezvous nobody answered) 504, another weightsync error
//! 500 with its message; any other exception a generic 500, its message only in the log.
template <class F>
void guarded(httplib::Response& res, const char* route, F&& f) {
  try {
    f();
  } catch (const config_error& e) {
    reply(res, 400, {{"error", e.what()}, {"field", e.field()}});
  } catch (const nlohmann::json::exception& e) {
    reply(res, 400, {{"error", std::string("Invalid JSON: ") + e.what()}});
  } catch (const state_error& e) {
    reply(res, 409, {{"error", e.what()}});
  } catch (const error& e) {
    log(LogLevel::error, weightsync::detail::cat(route, " failed: ", escaped(e.what(), 4096)));
    reply(res, dynamic_cast<const timeout_error*>(&e) ? 504 : 500, {{"error", e.what()}});
  } catch (const std::exception& e) {
    log(LogLevel::error, weightsync::detail::cat(route, " failed: ", escaped(e.what(), 4096)));
    reply(res, 500, {{"error", "internal server error (the server's log says more)"}});
  }
}

}  // namespace detail

//! Makes `server` refuse bodies above `o.max_body_bytes` with 413 before reading them, and give
//! every 4xx/5xx without a body a JSON {"error": ...} message that says what was refused. On a
//! ControlServer, a known path asked with another method gets 405 and an Allow header.
inline void apply_limits(httplib::Server& server, const RouteOptions& o) {
  if (o.max_body_bytes > 0) server.set_payload_max_length(o.max_body_bytes);
  auto* control = dynamic_cast<ControlServer*>(&server);
  server.set_error_handler([max = o.max_body_bytes, control](const httplib::Request& req,
                                                             httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string msg = weightsync::detail::cat("HTTP ", res.status);
    if (res.status == 413) {
      const auto length = req.get_header_value<std::uint64_t>("Content-Length");
      const std::string type = req.get_header_value("Content-Type");
      if (type.rfind("application/x-www-form-urlencoded", 0) == 0 && (max == 0 || length <= max))
        msg = weightsync::detail::cat(
            "cpp-httplib refuses form-encoded bodies (Content-Type: ", type,
            ", what `curl -d` sends) over ", CPPHTTPLIB_FORM_URL_ENCODED_PAYLOAD_MAX_LENGTH,
            " bytes; send the JSON with Content-Type: application/json");
      else
        msg = weightsync::detail::cat("request body", length ? " of " : "",
                                      length ? std::to_string(length) + " bytes" : std::string(),
                                      " exceeds the limit of ", max, " bytes");
    } else if (res.status == 404) {
      const std::string allow = control ? control->allowed_methods(req.path) : std::string();
      if (!allow.empty()) {
        res.status = 405;
        res.set_header("Allow", allow);
        msg = weightsync::detail::cat("method ", req.method, " is not allowed on ", req.path,
                                      " (allowed: ", allow, ")");
      } else {
        msg = "no such route";
      }
    } else if (res.status == 400) {
      msg = "malformed HTTP request";
    }
    res.set_content(
        nlohmann::json{{"error", msg}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
        "application/json");
  });
}

namespace detail {

//! The routes shared state: the engine, the hooks and the options, alive as long as the server.
struct RouteContext {
  WeightTransferEngine& engine;
  RouteHooks hooks;
  RouteOptions options;
};
using RouteContextPtr = std::shared_ptr<const RouteContext>;

//! A POST route that changes the engine's state: admitted (size, token), its JSON body parsed,
//! then `f(req, res, body)` run guarded (errors mapped to statuses).
template <class F>
void post_route(httplib::Server& server, const char* path, RouteContextPtr ctx, F f) {
  if (auto* c = dynamic_cast<ControlServer*>(&server)) c->note_route("POST", path);
  server.Post(path, [ctx, path, f](const httplib::Request& req, httplib::Response& res) {
    if (!admitted(ctx->options, req, res, true)) return;
    auto body = body_json(req, res, ctx->options.max_json_depth);
    if (!body) return;
    guarded(res, path, [&] { f(req, res, *body); });
  });
}

//! /init_weight_transfer_engine and /start_weight_update.
inline void add_session_routes(httplib::Server& server, const RouteContextPtr& ctx) {
  post_route(server, "/init_weight_transfer_engine", ctx,
             [ctx](const httplib::Request&, httplib::Response& res, const nlohmann::json& body) {
               std::visit([&](const auto& info) { ctx->engine.init_transfer_engine(info); },
                          parse_init_body(body));
               reply(res, 200, {{"message", "Weight transfer initialized"}});
             });
  // vLLM versions send {} or {"is_checkpoint_format": ...}
  post_route(server, "/start_weight_update", ctx,
             [ctx](const httplib::Request&, httplib::Response& res, const nlohmann::json&) {
               ctx->engine.start_weight_update();
               if (ctx->hooks.on_start) ctx->hooks.on_start();
               reply(res, 200, {{"message", "Weight update started"}});
             });
}

//! /update_weights and /finish_weight_update.
inline void add_update_routes(httplib::Server& server, const RouteContextPtr& ctx) {
  post_route(server, "/update_weights", ctx,
             [ctx](const httplib::Request&, httplib::Response& res, const nlohmann::json& body) {
               const auto info = ctx->engine.parse_update_info(update_info_of(body));
               const RouteHooks& h = ctx->hooks;
               try {
                 const auto st = ctx->engine.update_weights(info, h.load, h.destination);
                 reply(res, 200,
                       {{"message", "Weights updated"},
                        {"tensors", st.tensors},
                        {"bytes", st.bytes},
                        {"chunks", st.chunks}});
               } catch (const state_error&) {
                 throw;  // nothing was received: no session to end
               } catch (const std::exception& e) {
                 if (h.on_update_failed) h.on_update_failed(e.what());
                 throw;
               }
             });
  post_route(server, "/finish_weight_update", ctx,
             [ctx](const httplib::Request&, httplib::Response& res, const nlohmann::json& body) {
               const auto version = parse_finish_body(body);
               ctx->engine.finish_weight_update(version);
               if (ctx->hooks.on_finish) ctx->hooks.on_finish(version.value_or(""));
               reply(res, 200,
                     {{"message", "Weight update finished"},
                      {"weight_version", ctx->engine.weight_version()}});
             });
}

//! /pause, /resume and the GET routes (status; open without the token).
inline void add_pause_and_status_routes(httplib::Server& server, const RouteContextPtr& ctx) {
  post_route(
      server, "/pause", ctx,
      [ctx](const httplib::Request& req, httplib::Response& res, const nlohmann::json& body) {
        const bool q = req.has_param("mode");
        const std::string query = q ? req.get_param_value("mode") : "";
        const auto mode = parse_pause_body(body, q ? &query : nullptr);
        ctx->engine.pause(parse_pause_mode(mode));
        reply(res, 200, {{"status", "paused"}, {"mode", mode}});
      });
  auto* control = dynamic_cast<ControlServer*>(&server);
  if (control) {
    control->note_route("POST", "/resume");
    for (const char* path : {"/is_paused", "/get_world_size", "/weight_info"})
      control->note_route("GET", path);
  }
  server.Post("/resume", [ctx](const httplib::Request& req, httplib::Response& res) {
    if (!admitted(ctx->options, req, res, true)) return;  // (its body, if any, is ignored)
    guarded(res, "/resume", [&] {
      ctx->engine.resume();
      reply(res, 200, {{"status", "resumed"}});
    });
  });
  WeightTransferEngine& engine = ctx->engine;
  server.Get("/is_paused", [&engine](const httplib::Request&, httplib::Response& res) {
    reply(res, 200, {{"is_paused", engine.is_paused()}});
  });
  server.Get("/get_world_size", [&engine](const httplib::Request&, httplib::Response& res) {
    reply(res, 200, {{"world_size", engine.world_size()}});
  });
  server.Get("/weight_info", [&engine](const httplib::Request&, httplib::Response& res) {
    reply(res, 200, {{"weight_version", engine.weight_version()}});
  });
}

}  // namespace detail

//! Adds vLLM's weight-transfer routes for `engine` to `server`. `engine` and the hooks must outlive
//! the server. See RouteOptions for the body limit, the JSON depth limit and the optional bearer
//! token (apply_limits also sets the server-wide body limit).
inline void add_vllm_routes(httplib::Server& server, WeightTransferEngine& engine, RouteHooks hooks,
                            RouteOptions options = {}) {
  auto ctx = std::make_shared<const detail::RouteContext>(
      detail::RouteContext{engine, std::move(hooks), std::move(options)});
  detail::add_session_routes(server, ctx);
  detail::add_update_routes(server, ctx);
  detail::add_pause_and_status_routes(server, ctx);
}

//! A trainer's client for one server's vLLM routes. Every call has a deadline; a connection that
//! fails is a peer_error saying how (refused, timed out, reset), an error status a remote_error
//! carrying the server's status and message. cpp-httplib 0.11's client writes without
//! MSG_NOSIGNAL: a process that may see a server close early (a 413 or 401 before the whole body
//! is sent) should ignore SIGPIPE (examples/trainer.cpp does).
class VllmClient {
 public:
  //! `base_url` like "http://127.0.0.1:8000"; `timeout` bounds each request (updates included);
  //! `bearer_token` (when not empty) is sent as "Authorization: Bearer <token>" with every request
  //! (the server's RouteOptions::bearer_token).
  explicit VllmClient(std::string base_url,
                      std::chrono::milliseconds timeout = std::chrono::seconds(300),
                      std::string bearer_token = {})
      : url_(std::move(base_url)), timeout_(timeout), client_(url_) {
    if (!client_.is_valid())
      throw config_error("server",
                         weightsync::detail::cat("'", url_, "' is no http://host:port URL"));
    const auto ms = timeout.count();
    client_.set_connection_timeout(5, 0);
    client_.set_read_timeout(static_cast<time_t>(ms / 1000), static_cast<time_t>(ms % 1000) * 1000);
    client_.set_write_timeout(static_cast<time_t>(ms / 1000),
                              static_cast<time_t>(ms % 1000) * 1000);
    set_bearer_token(std::move(bearer_token));
  }

  //! Sends "Authorization: Bearer <token>" from now on ("" sends none).
  void set_bearer_token(std::string token) {
    token_ = std::move(token);
    if (!token_.empty()) client_.set_bearer_token_auth(token_);
  }

  void init_weight_transfer_engine(const NcclInitInfo& info) {
    post("/init_weight_transfer_engine", {{"init_info", info}});
  }
  //! vLLM's nccl_m2n: the plan at init, then updates of names only.
  void init_weight_transfer_engine(const M2NInitInfo& info) {
    post("/init_weight_transfer_engine", {{"init_info", info}});
  }
  void start_weight_update() { post("/start_weight_update", nlohmann::json::object()); }
  nlohmann::json update_weights(const NcclUpdateInfo& info) {
    return post("/update_weights", {{"update_info", info}});
  }
  nlohmann::json update_weights(const M2NUpdateInfo& info) {
    return post("/update_weights", {{"update_info", info}});
  }
  void finish_weight_update(std::optional<std::string> version = std::nullopt) {
    post("/finish_weight_update",
         {{"weight_version", version ? nlohmann::json(*version) : nlohmann::json()}});
  }
  void pause(PauseMode mode) { post("/pause", {{"mode", pause_mode_name(mode)}}); }
  void resume() { post("/resume", nlohmann::json::object()); }
  bool is_paused() { return get("/is_paused").at("is_paused").get<bool>(); }
  int get_world_size() { return get("/get_world_size").at("world_size").get<int>(); }
  std::string weight_version() {
    return get("/weight_info").at("weight_version").get<std::string>();
  }

  nlohmann::json post(const std::string& path, const nlohmann::json& body) {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = client_.Post(path, body.dump(), "application/json");
    return check("POST", path, r, t0);
  }
  nlohmann::json get(const std::string& path) {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = client_.Get(path);
    return check("GET", path, r, t0);
  }
  const std::string& url() const noexcept { return url_; }
  std::chrono::milliseconds timeout() const noexcept { return timeout_; }
  const std::string& bearer_token() const noexcept { return token_; }

 private:
  //! What httplib's error means, as far as can be told: it says "Connection" for a refused and an
  //! unreachable peer alike, and "Read" for a timeout and a reset alike.
  std::string why_failed(httplib::Error e, std::chrono::steady_clock::duration took) const {
    using E = httplib::Error;
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(took).count();
    switch (e) {
      case E::Connection:
      case E::ConnectionTimeout: {
        // Ask the kernel what a connect gives now (refused, unreachable, timed out).
        std::string detail = e == E::ConnectionTimeout ? "connect timed out after 5 s" : "";
        try {
          const auto hp = host_port();
          weightsync::detail::connect_tcp(
              hp.first, hp.second,
              weightsync::detail::Deadline::after(std::chrono::milliseconds(100)), "http", -1);
          if (detail.empty()) detail = "could not connect";
        } catch (const std::exception& x) {
          const std::string w = x.what();
          if (w.find("refused") != std::string::npos)
            detail = "connection refused (nothing listens there)";
          else if (detail.empty())
            detail = "could not connect: " + w;
        }
        return detail;
      }
      case E::Read:
        if (took + std::chrono::milliseconds(250) >= timeout_)
          return weightsync::detail::cat("no answer within the read timeout of ", timeout_.count(),
                                         " ms (timed out)");
        return weightsync::detail::cat("the server closed or reset the connection after ", ms,
                                       " ms without answering");
      case E::Write:
        // A server that closes at once is a failed write or a failed read, whichever the
        // client's send meets first: both are told as the same event.
        if (took + std::chrono::milliseconds(250) >= timeout_)
          return weightsync::detail::cat("sending the request took longer than the write ",
                                         "timeout of ", timeout_.count(), " ms (timed out)");
        return weightsync::detail::cat("the server closed or reset the connection after ", ms,
                                       " ms, while the request was being sent");
      default:
        return httplib::to_string(e);
    }
  }
  std::pair<std::string, int> host_port() const {
    std::string rest = url_;
    if (auto p = rest.find("://"); p != std::string::npos) rest = rest.substr(p + 3);
    if (auto p = rest.find('/'); p != std::string::npos) rest = rest.substr(0, p);
    int port = 80;
    if (auto p = rest.rfind(':');
        p != std::string::npos && rest.find(']', p) == std::string::npos) {
      port = std::atoi(rest.c_str() + p + 1);
      rest = rest.substr(0, p);
    }
    if (rest.size() > 2 && rest.front() == '[') rest = rest.substr(1, rest.size() - 2);
    return {rest, port};
  }
  nlohmann::json check(const char* method, const std::string& path, const httplib::Result& r,
                       std::chrono::steady_clock::time_point t0) {
    if (!r)
      throw peer_error(-1, weightsync::detail::cat(
                               method, " ", url_, path, " failed: ",
                               why_failed(r.error(), std::chrono::steady_clock::now() - t0)));
    auto j = nlohmann::json::parse(r->body, nullptr, false);
    if (r->status < 200 || r->status >= 300)
      throw remote_error(
          -1,
          weightsync::detail::cat(
              method, " ", url_, path, " answered ", r->status, ": ",
              (!j.is_discarded() && j.contains("error")) ? j["error"].dump() : r->body,
              r->status == 401 ? (token_.empty() ? " (no bearer token was sent: --token)"
                                                 : " (the bearer token sent is not the server's)")
                               : ""));
    if (j.is_discarded())
      throw protocol_error(-1,
                           weightsync::detail::cat(method, " ", url_, path, " answered non-JSON"));
    return j;
  }
  std::string url_;
  std::chrono::milliseconds timeout_;
  std::string token_;
  httplib::Client client_;
};

}  // namespace weightsync::http
