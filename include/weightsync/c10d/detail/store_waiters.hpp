// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The pending WAITs of StoreEngine's connections: which keys each waits for, how many of them
//! are missing, and who is waiting for each key. Waking follows presence (see
//! store_engine.hpp): a waiter is ready once its missing count is zero.

#include <algorithm>
#include <cstddef>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "weightsync/c10d/detail/store_data.hpp"
#include "weightsync/detail/format.hpp"

namespace weightsync::detail::c10d {

class StoreWaiters {
 public:
  //! A connection opens with no WAIT pending.
  void open(int conn) { waits_[conn] = Wait{}; }
  //! Forgets a connection and the keys it was waiting for.
  void close(int conn) {
    stop(conn);
    waits_.erase(conn);
  }
  //! Whether `conn` (an open connection) has a WAIT pending.
  bool waiting(int conn) const { return waits_.at(conn).waiting; }
  //! What the pending WAITs' keys cost (bounded by max_store_bytes, apart from the store's bytes).
  std::size_t bytes() const { return bytes_; }

  //! Parks `conn` until every key in `keys` exists in `data` (the caller answers a WAIT whose keys
  //! all exist at once). "" or why not (nothing registered then): the pending WAITs' keys would
  //! exceed max_store_bytes.
  std::string start(int conn, std::vector<std::string> keys, const StoreData& data) {
    Wait& w = waits_.at(conn);
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    std::size_t more = 0;
    for (const auto& k : keys) more += store_cost(k);
    const std::size_t max = data.limits().max_store_bytes;
    if (bytes_ + more > max)
      return cat("WAIT on ", keys.size(), " keys: the pending WAITs' keys would exceed ", max,
                 " bytes");
    bytes_ += more;
    for (const auto& k : keys) {
      by_key_[k].push_back(conn);
      w.missing += data.present(k) ? 0 : 1;
    }
    w.keys = std::move(keys);
    w.waiting = true;
    return {};
  }

  //! Forgets a connection's pending WAIT (answered, cancelled or closed).
  void stop(int conn) {
    auto wi = waits_.find(conn);
    if (wi == waits_.end() || !wi->second.waiting) return;
    Wait& w = wi->second;
    for (const auto& k : w.keys) {
      bytes_ -= store_cost(k);
      auto it = by_key_.find(k);
      if (it == by_key_.end()) continue;
      std::erase(it->second, conn);
      if (it->second.empty()) by_key_.erase(it);
    }
    w.keys.clear();
    w.missing = 0;
    w.waiting = false;
  }

  //! Key `k` was written, deleted or popped in `data` (`was`: whether it existed before). Updates
  //! the missing counts of the connections waiting for it and stops the WAITs of those whose keys
  //! all exist: all of them, or with `one` (QUEUE_PUSH) the first. Returns the connections woken,
  //! in the order they started waiting for `k`.
  std::vector<int> changed(const std::string& k, bool was, bool one, const StoreData& data) {
    std::vector<int> ready;
    auto it = by_key_.find(k);
    if (it == by_key_.end()) return ready;
    const bool now = data.present(k);
    if (now != was)
      for (int id : it->second) {
        Wait& w = waits_.at(id);
        w.missing = now ? w.missing - 1 : w.missing + 1;
      }
    if (!now) return ready;
    for (int id : it->second)
      if (waits_.at(id).missing == 0) {
        ready.push_back(id);
        if (one) break;
      }
    for (int id : ready) stop(id);
    return ready;
  }

  //! "" when every pending WAIT is registered under exactly its keys with the right missing count
  //! (against `data`) and the key bytes add up; else what is wrong.
  std::string check_invariants(const StoreData& data) const {
    std::size_t registrations = 0, wait_bytes = 0;
    for (const auto& [id, w] : waits_) {
      if (!w.waiting) {
        if (!w.keys.empty() || w.missing) return cat("conn ", id, ": stale wait state");
        continue;
      }
      std::size_t missing = 0;
      for (const auto& k : w.keys) {
        missing += data.present(k) ? 0 : 1;
        wait_bytes += store_cost(k);
        auto it = by_key_.find(k);
        if (it == by_key_.end() || std::count(it->second.begin(), it->second.end(), id) != 1)
          return cat("conn ", id, " waits for '", k, "' but is not registered once under it");
      }
      registrations += w.keys.size();
      if (missing != w.missing)
        return cat("conn ", id, " counts ", w.missing, " missing keys, ", missing, " are missing");
    }
    std::size_t listed = 0;
    for (const auto& [k, ids] : by_key_) {
      if (ids.empty()) return cat("empty waiter list for '", k, "'");
      listed += ids.size();
    }
    if (listed != registrations)
      return cat(listed, " waiter registrations, ", registrations, " expected");
    if (wait_bytes != bytes_) return cat("wait_bytes ", bytes_, ", expected ", wait_bytes);
    return {};
  }

 private:
  struct Wait {
    bool waiting = false;           // a WAIT is pending
    std::vector<std::string> keys;  // its distinct keys
    std::size_t missing = 0;        // how many of them do not exist
  };

  std::unordered_map<int, Wait> waits_;                       // every open connection
  std::unordered_map<std::string, std::vector<int>> by_key_;  // key -> its pending WAITs
  std::size_t bytes_ = 0;                                     // what the keys of waits_ cost
};

}  // namespace weightsync::detail::c10d
