// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

// The example binaries' progress line: EngineOptions::progress prints "<who> sync: 45% of 2.6 GB,
// chunk 3/8, 3.4 GB/s" on stderr, redrawn in place at most every 100 ms, only when stderr is a
// terminal (a log file gets the one-line summary after each sync instead); summary() is that
// line, from TransferStats.

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <weightsync/transfer_options.hpp>

namespace demo {

inline weightsync::ProgressFn progress_line(std::string who) {
  if (!::isatty(2)) return {};
  auto last = std::make_shared<std::chrono::steady_clock::time_point>();
  return [who = std::move(who), last](const weightsync::TransferProgress& p) {
    const auto now = std::chrono::steady_clock::now();
    if (!p.done() && now - *last < std::chrono::milliseconds(100)) return;
    *last = now;
    const double pct = p.bytes_total ? 100.0 * static_cast<double>(p.bytes_done) /
                                           static_cast<double>(p.bytes_total)
                                     : 100.0;
    std::fprintf(stderr, "\r%s sync: %5.1f%% of %.3f GB, chunk %zu/%zu, %.2f GB/s%s", who.c_str(),
                 pct, static_cast<double>(p.bytes_total) / 1e9, p.chunk, p.chunks,
                 p.bytes_per_second() / 1e9, p.done() ? "\n" : "");
    std::fflush(stderr);
  };
}

//! A duration as a person reads it: "12.34 ms", or "41.5 us" under a millisecond.
inline std::string duration_text(std::chrono::nanoseconds d) {
  char buf[32];
  const double us = std::chrono::duration<double, std::micro>(d).count();
  if (us < 1000)
    std::snprintf(buf, sizeof buf, "%.1f us", us);
  else
    std::snprintf(buf, sizeof buf, "%.2f ms", us / 1000);
  return buf;
}

//! "N tensors, B bytes in C chunks, T ms (handshake h ms, data d ms at R GB/s)". A data phase
//! under 100 us gets no rate (a few microseconds of copying say nothing of a link: a small sync
//! travels inside the handshake).
inline std::string summary(const weightsync::TransferStats& st) {
  std::string rate;
  if (st.data >= std::chrono::microseconds(100)) {
    char r[48];
    std::snprintf(r, sizeof r, " at %.3f GB/s", st.data_bytes_per_second() / 1e9);
    rate = r;
  }
  char buf[256];
  std::snprintf(buf, sizeof buf, "%zu tensors, %zu bytes in %zu chunks, %s (handshake %s, data %s%s)",
                st.tensors, st.bytes, st.chunks, duration_text(st.total).c_str(),
                duration_text(st.handshake).c_str(), duration_text(st.data).c_str(), rate.c_str());
  return buf;
}

}  // namespace demo
