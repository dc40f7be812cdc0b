// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Where weightsync's diagnostics go. By default warnings and errors go to stderr with the prefix
//! "[weightsync]"; WEIGHTSYNC_LOG=debug adds debug lines, WEIGHTSYNC_LOG=off silences it, and
//! set_log_handler() routes every line to the embedding application's logger instead.

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

namespace weightsync {

enum class LogLevel { debug, info, warning, error };

using LogHandler = std::function<void(LogLevel, std::string_view)>;

namespace detail {
struct LogState {
  std::mutex mutex;
  LogHandler handler;
};
inline LogState& log_state() {
  static LogState s;
  return s;
}
inline LogLevel env_log_level(bool& off) {
  const char* v = std::getenv("WEIGHTSYNC_LOG");
  const std::string s = v ? v : "";
  off = s == "off" || s == "0" || s == "none";
  if (s == "debug") return LogLevel::debug;
  if (s == "info") return LogLevel::info;
  return LogLevel::warning;
}
}  // namespace detail

//! Routes every diagnostic line to `h` (nullptr restores the stderr default). Thread-safe.
inline void set_log_handler(LogHandler h) {
  auto& s = detail::log_state();
  std::lock_guard lock(s.mutex);
  s.handler = std::move(h);
}

//! Emits one diagnostic line. noexcept: logging never throws into a cleanup path.
inline void log(LogLevel level, std::string_view msg) noexcept {
  try {
    auto& s = detail::log_state();
    std::lock_guard lock(s.mutex);
    if (s.handler) {
      s.handler(level, msg);
      return;
    }
    bool off = false;
    const LogLevel min = detail::env_log_level(off);
    if (off || level < min) return;
    static constexpr const char* kNames[] = {"debug", "info", "warning", "error"};
    std::fprintf(stderr, "[weightsync] %s: %.*s\n", kNames[static_cast<int>(level)],
                 static_cast<int>(msg.size()), msg.data());
  } catch (...) {
  }
}

}  // namespace weightsync
