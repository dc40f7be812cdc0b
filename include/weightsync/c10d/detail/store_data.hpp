// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The key-value state of StoreEngine: keys and values, queues, and what they cost against
//! TcpStoreLimits::max_store_bytes. Every write checks the bound before it changes anything.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "weightsync/c10d/wire.hpp"
#include "weightsync/detail/format.hpp"

namespace weightsync::detail::c10d {

//! What a stored key, value, queue item or awaited key costs against max_store_bytes.
inline std::size_t store_cost(const std::string& s) {
  return s.size() + kStoreEntryOverhead;
}

class StoreData {
 public:
  explicit StoreData(TcpStoreLimits lim) : lim_(lim) {}

  const TcpStoreLimits& limits() const { return lim_; }
  //! The keys and their values (queues not included), in key order.
  const std::map<std::string, std::string>& kv() const { return kv_; }
  //! Queues that hold at least one item (an empty queue is not stored).
  std::size_t num_queues() const { return queues_.size(); }
  //! What the stored keys, values and queue items cost against max_store_bytes.
  std::size_t bytes() const { return bytes_; }

  //! A key exists: it holds a value or a non-empty queue.
  bool present(const std::string& k) const { return kv_.count(k) != 0 || queues_.count(k) != 0; }
  bool all_present(const std::vector<std::string>& keys) const {
    return std::all_of(keys.begin(), keys.end(), [&](const std::string& k) { return present(k); });
  }
  //! The value of `k` (empty when missing).
  const std::string& lookup(const std::string& k) const {
    static const std::string empty;
    auto it = kv_.find(k);
    return it == kv_.end() ? empty : it->second;
  }
  //! The message of a write refused by max_store_bytes.
  std::string full(const std::string& k) const {
    return cat("storing '", k, "' would exceed the store's bound of ", lim_.max_store_bytes,
               " bytes");
  }
  //! Stores `v` under `k`; "" or why not (nothing changed then).
  std::string put(const std::string& k, std::string v) {
    auto it = kv_.find(k);
    const std::size_t old = it == kv_.end() ? 0 : store_cost(k) + store_cost(it->second);
    if (bytes_ - old + store_cost(k) + store_cost(v) > lim_.max_store_bytes) return full(k);
    bytes_ = bytes_ - old + store_cost(k) + store_cost(v);
    if (it == kv_.end())
      kv_.emplace(k, std::move(v));
    else
      it->second = std::move(v);
    return {};
  }
  //! Deletes key `k`'s value; whether there was one.
  bool erase(const std::string& k) {
    auto it = kv_.find(k);
    if (it == kv_.end()) return false;
    bytes_ -= store_cost(it->first) + store_cost(it->second);
    kv_.erase(it);
    return true;
  }
  //! The integer a counter key holds (absent: 0). torch stores counters as decimal text.
  std::string counter(const std::string& k, std::int64_t& v) const {
    auto it = kv_.find(k);
    if (it == kv_.end()) return {};
    const std::string& s = it->second;
    std::size_t i = (!s.empty() && s[0] == '-') ? 1 : 0;
    if (s.size() == i || s.size() > 20 ||
        !std::all_of(s.begin() + static_cast<std::ptrdiff_t>(i), s.end(),
                     [](char ch) { return ch >= '0' && ch <= '9'; }))
      return cat("ADD on key '", k, "' whose value is not an integer");
    try {
      v = std::stoll(s);
    } catch (...) {
      return cat("ADD on key '", k, "' whose value is out of range");
    }
    return {};
  }

  //! Appends `v` to queue `k`; "" or why not (nothing changed then).
  std::string push(const std::string& k, std::string v) {
    auto it = queues_.find(k);
    const std::size_t more = store_cost(v) + (it == queues_.end() ? store_cost(k) : 0);
    if (bytes_ + more > lim_.max_store_bytes) return full(k);
    if (it == queues_.end()) it = queues_.emplace(k, std::deque<std::string>{}).first;
    it->second.push_back(std::move(v));
    bytes_ += more;
    return {};
  }
  //! Pops the oldest item of queue `k` into `item`. Returns the items the queue held before the
  //! pop (0: the queue is missing and nothing was popped).
  std::size_t pop(const std::string& k, std::string& item) {
    auto it = queues_.find(k);  // a pop on a missing queue creates nothing
    if (it == queues_.end()) return 0;
    auto& dq = it->second;
    const std::size_t n = dq.size();
    bytes_ -= store_cost(dq.front());
    item = std::move(dq.front());
    dq.pop_front();
    if (dq.empty()) {
      bytes_ -= store_cost(k);
      queues_.erase(it);
    }
    return n;
  }
  //! Items in queue `k` (0 when missing).
  std::size_t queue_len(const std::string& k) const {
    auto it = queues_.find(k);
    return it == queues_.end() ? 0 : it->second.size();
  }

  //! "" when the byte count equals what the entries cost, no entry is above a limit and no queue
  //! is empty; else what is wrong.
  std::string check_invariants() const {
    std::size_t sum = 0;
    for (const auto& [k, v] : kv_) {
      sum += store_cost(k) + store_cost(v);
      if (k.size() > lim_.max_key_bytes) return cat("key '", k, "' over max_key_bytes");
      if (v.size() > lim_.max_value_bytes) return cat("value of '", k, "' over max_value_bytes");
    }
    for (const auto& [k, q] : queues_) {
      if (q.empty()) return cat("empty queue '", k, "' stored");
      sum += store_cost(k);
      for (const auto& v : q) {
        sum += store_cost(v);
        if (v.size() > lim_.max_value_bytes) return cat("item of '", k, "' over max_value_bytes");
      }
    }
    if (sum != bytes_) return cat("stored_bytes ", bytes_, " but the entries cost ", sum);
    if (bytes_ > lim_.max_store_bytes) return cat("stored_bytes ", bytes_, " over the bound");
    return {};
  }

 private:
  TcpStoreLimits lim_;
  std::map<std::string, std::string> kv_;
  std::unordered_map<std::string, std::deque<std::string>> queues_;  // never empty
  std::size_t bytes_ = 0;                                            // what kv_ and queues_ cost
};

}  // namespace weightsync::detail::c10d
