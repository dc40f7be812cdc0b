// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The trainer's side of joining inference servers, in one call (join_servers): the servers'
//! POST /init_weight_transfer_engine and the trainer's own rendezvous must run together (each
//! blocks until the other side joins), and a server that was never reached, refuses the init or
//! fails it must be reported as that, at once, not as a rendezvous that timed out:
//!
//! 1. every server is asked GET /get_world_size first (JoinOptions::check_timeout): a wrong URL
//!    is "connection refused" naming host:port, a wrong server is its 404, before anything starts;
//! 2. every server's init call and TrainerEngine::trainer_init then run concurrently;
//! 3. the first init call that fails stops the trainer's rendezvous (EngineOptions::stop: rank 0
//!    of a TCP rendezvous leaves within about 50 ms) and its error is thrown as the server gave it
//!    (peer_error: refused, reset, timed out; remote_error: the status and the server's message);
//! 4. a rendezvous that fails while an init call is still out waits JoinOptions::grace for that
//!    call's error, which is the cause; otherwise the rendezvous error is thrown, saying which
//!    servers have not answered.
//! An init call that has not answered when join_servers throws is left to finish on its own
//! thread (with its own client: none of the caller's objects), as an HTTP call cannot be taken
//! back.

#if !defined(__has_include) || !__has_include(<httplib.h>)
#error "<weightsync/vllm/join.hpp> needs cpp-httplib (<httplib.h>)"
#endif
#if !defined(WEIGHTSYNC_LINKS_HTTP)
#error "<weightsync/vllm/join.hpp>: link weightsync::http to use it (CMake: target_link_libraries(<target> PRIVATE weightsync::http); without CMake: link cpp-httplib, define WEIGHTSYNC_LINKS_HTTP=1)"
#define WEIGHTSYNC_LINKS_HTTP 0  // (said once per translation unit)
#endif

#include <algorithm>
#include <chrono>
#include <exception>
#include <future>
#include <memory>
#include <span>
#include <stop_token>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "weightsync/detail/format.hpp"
#include "weightsync/engine/trainer.hpp"
#include "weightsync/error.hpp"
#include "weightsync/vllm/control_plane.hpp"

namespace weightsync::http {

//! How join_servers checks and waits.
struct JoinOptions {
  //! Each server's first answer (GET /get_world_size) must come within this.
  std::chrono::milliseconds check_timeout{5000};
  //! Ranks each server's workers take: with NcclInitInfo, server i is sent rank_offset =
  //! info.rank_offset + i * ranks_per_server (vLLM: the server's tensor-parallel size; the demo
  //! server: 1). Other init infos (M2NInitInfo) are joined one server at a time.
  int ranks_per_server = 1;
  //! When the rendezvous fails with an init call still out, how long that call may take to say
  //! why (its error is the cause: a server that failed its own init).
  std::chrono::milliseconds grace{1000};
};

namespace detail {

//! One server's init call on a thread of its own, with a client of its own (the caller's URL,
//! timeout and token), so that the call may outlive join_servers when it throws.
template <class Info>
std::future<void> start_init_call(const VllmClient& server, Info info) {
  auto client = std::make_shared<VllmClient>(server.url(), server.timeout(), server.bearer_token());
  std::promise<void> done;
  auto f = done.get_future();
  std::thread([client, info = std::move(info), done = std::move(done)]() mutable {
    try {
      client->init_weight_transfer_engine(info);
      done.set_value();
    } catch (...) {
      done.set_exception(std::current_exception());
    }
  }).detach();
  return f;
}

inline bool ready(std::future<void>& f) {
  return f.valid() && f.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

//! The servers whose init call has not answered yet ("" when none).
inline std::string unanswered(std::span<VllmClient> servers,
                              std::vector<std::future<void>>& calls) {
  std::string s;
  for (std::size_t i = 0; i < calls.size(); ++i)
    if (calls[i].valid() && !ready(calls[i]))
      s += weightsync::detail::cat(s.empty() ? "" : ", ", servers[i].url());
  return s;
}

//! Waits for the rendezvous while watching the init calls: the first call that fails stops the
//! rendezvous, and its error is returned (null when none failed before the rendezvous ended).
inline std::exception_ptr watch(std::future<void>& rendezvous,
                                std::vector<std::future<void>>& calls, std::stop_source& stop) {
  while (rendezvous.wait_for(std::chrono::milliseconds(10)) != std::future_status::ready) {
    for (auto& c : calls)
      if (ready(c)) try {
          c.get();
        } catch (...) {
          stop.request_stop();
          return std::current_exception();
        }
  }
  return nullptr;
}

}  // namespace detail

//! Joins `trainer` and `servers` in one transfer group described by `info` (vLLM's NcclInitInfo
//! or M2NInitInfo): checks that every server answers, then runs every server's init call and
//! trainer.trainer_init(info) together (see the file comment). Call it on the trainer rank that
//! talks to the servers (rank 0); other trainer ranks call trainer_init alone.
//! @throws peer_error (a server not reached: refused, reset, timed out), remote_error (a server
//!   answered an error status: its status and message), the rendezvous' timeout_error (a server
//!   accepted the init but never joined), or what trainer_init throws (config_error, ...).
template <class Info>
requires requires(VllmClient& c, TrainerEngine& t, const Info& i) {
  c.init_weight_transfer_engine(i);
  t.trainer_init(i);
}
void join_servers(TrainerEngine& trainer, std::span<VllmClient> servers, const Info& info,
                  const JoinOptions& opt = {}) {
  if (opt.ranks_per_server < 1)
    throw config_error("ranks_per_server",
                       weightsync::detail::cat("must be >= 1, got ", opt.ranks_per_server));
  if constexpr (!std::is_same_v<Info, NcclInitInfo>)
    if (servers.size() > 1)
      throw config_error("servers", weightsync::detail::cat("this init info joins one server at a ",
                                                            "time, got ", servers.size()));
  // 1. Every server answers, before anything starts.
  for (auto& s : servers) {
    VllmClient probe(s.url(), std::min(opt.check_timeout, s.timeout()), s.bearer_token());
    (void)probe.get("/get_world_size");
  }
  // 2. The init calls and the rendezvous, together.
  std::vector<std::future<void>> calls;
  for (std::size_t i = 0; i < servers.size(); ++i) {
    Info mine = info;
    if constexpr (std::is_same_v<Info, NcclInitInfo>)
      mine.rank_offset += static_cast<int>(i) * opt.ranks_per_server;
    calls.push_back(detail::start_init_call(servers[i], std::move(mine)));
  }
  std::stop_source stop;
  auto rendezvous = std::async(std::launch::async, [&trainer, &info, t = stop.get_token()] {
    trainer.trainer_init(info, t);
  });
  // 3. A failed init call is the error, and the rendezvous stops.
  if (auto failed = detail::watch(rendezvous, calls, stop)) {
    try {
      rendezvous.get();  // (stopped, or ended meanwhile: a server's error says more)
    } catch (...) {
    }
    std::rethrow_exception(failed);
  }
  try {
    rendezvous.get();
  } catch (...) {
    // 4. A call still out may be about to say why its server never joined.
    const auto until = std::chrono::steady_clock::now() + opt.grace;
    for (auto& c : calls)
      if (c.valid() && c.wait_until(until) == std::future_status::ready) c.get();  // its error
    const auto out = detail::unanswered(servers, calls);
    try {
      throw;
    } catch (const timeout_error& e) {
      if (out.empty()) throw;
      std::string what = e.what();
      const std::string prefix = "[weightsync.timeout] " + e.phase() + ": ";
      if (what.rfind(prefix, 0) == 0) what.erase(0, prefix.size());
      throw timeout_error(
          e.phase(), e.peer(),
          weightsync::detail::cat(what, " (no answer yet to the init call of ", out, ")"));
    }
  }
  for (auto& c : calls)
    if (c.valid()) c.get();  // the servers' answers (each within its client's timeout)
}

//! One server: join_servers(trainer, {&server, 1}, info, opt).
template <class Info>
void join_server(TrainerEngine& trainer, VllmClient& server, const Info& info,
                 const JoinOptions& opt = {}) {
  join_servers(trainer, std::span<VllmClient>(&server, 1), info, opt);
}

}  // namespace weightsync::http
