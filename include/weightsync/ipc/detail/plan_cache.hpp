// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The IPC plan between rounds: a plan byte for byte the last round's, which every rank accepted
//! and pulled from, is not sent again; the producer sends "same plan as round N" (with the plan's
//! digest), and the consumer reuses its round N's plan and what it derived from it (the checks,
//! the mapped bases), after checking that it holds that very round.

#include "weightsync/config.hpp"
#if !WEIGHTSYNC_HAS_CUDA
#error "<weightsync/ipc/detail/plan_cache.hpp> needs the CUDA runtime (WEIGHTSYNC_HAS_CUDA=0)"
#endif

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "weightsync/detail/format.hpp"
#include "weightsync/error.hpp"
#include "weightsync/ipc/detail/endpoint.hpp"
#include "weightsync/ipc/detail/plan.hpp"

namespace weightsync::detail {

//! The producer's side.
class PlanSender {
 public:
  //! Sends `plan`, or "same plan as round N" when it is byte for byte the last one and that round
  //! succeeded everywhere.
  void send(IpcEndpoint& ep, const IpcPlan& plan) {
    std::string bytes = plan.encode();
    if (ok_ && bytes == sent_) return resend(ep);
    ++round_;
    ep.post_blob(bytes);
    hash_ = plan_hash(bytes);
    sent_ = std::move(bytes);
    ok_ = false;
  }
  //! Sends "same plan as round N" for the plan last sent, without encoding a new one (the caller
  //! knows nothing it was made from changed). @pre reusable()
  void resend(IpcEndpoint& ep) {
    ep.stats.plans_reused++;
    ep.post_blob(encode_same_plan(round_, hash_));
  }
  //! Whether every rank succeeded with the plan last sent (only then may it be named again).
  void outcome(bool every_rank_ok) noexcept { ok_ = every_rank_ok; }
  bool reusable() const noexcept { return ok_; }

 private:
  std::uint64_t round_ = 0;  // full plans sent
  std::string sent_;         // the last full plan's bytes
  std::uint64_t hash_ = 0;   // their digest
  bool ok_ = false;
};

//! The consumer's side: the last plan it accepted and pulled from, with what it derived from it.
class PlanReceiver {
 public:
  //! What the consumer derives from a plan it accepts; reused with it.
  struct Accepted {
    IpcPlan plan;
    std::uint64_t metas_digest = 0;  //!< of the consumer's metadata it was checked against
    std::vector<std::byte*> base;    //!< the mapped base of each region
    std::size_t staged = 0;
  };

  //! The producer's plan: decoded (nullopt from `reused`), or, when the producer says "same as
  //! round N", this side's accepted plan of round N, lent to the round (keep() or forget() ends
  //! the loan). @throws protocol_error when this side does not hold that round.
  IpcPlan receive(IpcEndpoint& ep, const Accepted*& reused) {
    reused = nullptr;
    const std::string blob = ep.take_blob(std::uint64_t{1} << 30, "ipc plan");
    if (auto same = decode_same_plan(blob)) {
      if (!accepted_ || lent_ || same->round != round_ || same->hash != hash_)
        throw protocol_error(0, cat("ipc plan: the producer says \"same plan as round ",
                                    same->round, "\", but this consumer holds ",
                                    accepted_ ? "round " + std::to_string(round_)
                                              : std::string("no accepted plan")));
      ep.stats.plans_reused++;
      reused = &*accepted_;
      // Lent, not copied (hundreds of places): keep() brings it back after the round, and a
      // failed round forgets it; until then this side holds no plan to name.
      lent_ = true;
      return std::move(accepted_->plan);
    }
    ++round_;
    hash_ = plan_hash(blob);
    accepted_.reset();
    return IpcPlan::decode(blob);
  }
  //! The plan accepted last round (what "same plan" would name), or nullptr (also while it is
  //! lent to a round).
  const Accepted* last() const noexcept { return accepted_ && !lent_ ? &*accepted_ : nullptr; }
  //! Keeps `a` (a plan this side accepted and pulled from) for "same plan as round N".
  void keep(Accepted a) {
    accepted_ = std::move(a);
    lent_ = false;
  }
  //! Forgets the last plan (a failed round may not be named again).
  void forget() noexcept {
    accepted_.reset();
    lent_ = false;
  }

 private:
  std::uint64_t round_ = 0;  // full plans received
  std::uint64_t hash_ = 0;   // digest of the last full plan's bytes
  std::optional<Accepted> accepted_;
  bool lent_ = false;  // accepted_->plan is out with the current round
};

}  // namespace weightsync::detail
