// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! DeltaSource: a WeightSource adapter that sends only what changed since the last version every
//! receiver holds. It keeps that version as its reference, diffs the source against it, and sends
//! each tensor as a delta blob (<weightsync/delta/format.hpp>), whole, or not at all (unchanged).
//!
//! What each option costs (DeltaOptions):
//! - DeltaReference::full (default): a copy of the sent tensors in the codec's memory, 1x the
//!   model; every change found bitwise. The CUDA codec updates it inside the diff pass (writes of
//!   the changed 32-byte sectors: about 15 % of the bytes at 1 % of bf16 elements changed).
//! - DeltaReference::low_byte (host and CUDA codecs): 1 + 8/256 bytes per bf16 / fp16 element (51.6 % of
//!   those tensors), the other widths full; the diff also hashes every 256-element block (a 64-bit
//!   mix per element); a block whose check fails goes whole (512 bytes of wire), which an
//!   optimizer step of a few ULPs never causes; a missed change slips through only on a 64-bit
//!   hash collision (see <weightsync/delta/low_byte.hpp>).
//! - anchor_every = N: every N-th round a full sync (its wire bytes and time); no memory. Receivers apply
//! the blobs in place (WeightTransferEngine::update_weights with UpdateRequest::delta; in vLLM's
//! JSON, NcclUpdateInfo::delta).
//!
//! A round:
//! @code
//!   DeltaSource d(model);
//!   NcclUpdateInfo info = d.prepare("v8", trainer.update_info(model.metas()));
//!   // send `info` to the workers (HTTP), which call update_weights(info, ...) and
//!   // finish_weight_update("v8")
//!   trainer.send_weights(d);
//!   d.commit();  // every rank has it: "v8" becomes the reference
//! @endcode
//!
//! Bit-exact by construction: an element is "changed" when any of its bits differ from the
//! reference, and the reference is only ever what the receivers were sent (commit() applies the
//! same blobs to it). Nothing rests on a hash or a sample.
//! - The first round, a round after invalidate(), a round whose metadata changed, a round after
//!   one that was prepared but never committed (the receivers' state is then unknown), and every
//!   anchor_every-th round send everything whole, with no base version.
//! - The handshake refuses a delta on every rank when a receiver does not hold the base version
//!   (see <weightsync/delta/receive.hpp>); prepare the next round again: it goes whole.
//!
//! The source's tensor memory must stay valid and unchanged from prepare() until commit() (a
//! model's parameters between two optimizer steps).
//!
//! How it differs from vLLM's sparse_nccl (which WeightTransferEngine also receives, see
//! NcclUpdateInfo::num_updates_list): sparse_nccl sends two broadcasts per parameter (int32 flat
//! indices, then values: 6 bytes per changed bf16 element), at TP = 1, with no base-version check.
//! Here a tensor is cut into buckets, each encoded in the smallest of raw / bitmask / uint16
//! offsets (4 bytes per changed bf16 element at low density), the blobs ride the packed pipeline
//! (few large messages), dense tensors go whole, and a wrong base is refused before a byte moves.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <mutex>
#include <thread>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <ranges>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "weightsync/delta/codec.hpp"
#include "weightsync/delta/format.hpp"
#include "weightsync/delta/low_byte.hpp"
#include "weightsync/delta/receive.hpp"
#include "weightsync/detail/format.hpp"
#include "weightsync/engine/adapter.hpp"
#include "weightsync/engine/backend.hpp"
#include "weightsync/engine/update_request.hpp"
#include "weightsync/error.hpp"
#include "weightsync/tensor_meta.hpp"

namespace weightsync {

enum class DeltaMode {
  automatic,  //!< per tensor: a blob when it is at most max_payload_fraction of the tensor
  always,     //!< every changed tensor as a blob (unless it is not smaller than the tensor)
  never,      //!< every round whole (the reference is still kept, for a later switch)
};

//! What the trainer keeps of the version the receivers hold.
enum class DeltaReference {
  //! a full copy (1x the sent tensors' bytes): every change found bitwise, resting on no hash
  full,
  //! for 2-byte tensors (bf16, fp16), 1 byte per element plus an 8-byte hash per 256 elements
  //! (51.6 % of those tensors' bytes); a change that kept the low byte is caught by the block
  //! hash and its block sent whole in the same sync (<weightsync/delta/low_byte.hpp>). Other
  //! widths keep a full copy. Codecs with kLowByteReference: HostDeltaCodec, CudaDeltaCodec.
  low_byte,
};

struct DeltaOptions {
  DeltaMode mode = DeltaMode::automatic;
  DeltaReference reference = DeltaReference::full;
  //! automatic: a tensor goes whole when its blob would exceed this share of its bytes (the
  //! receiver's apply and the encode then cost more than they save on a fast link). 1.0 sends
  //! every blob smaller than its tensor.
  double max_payload_fraction = 0.5;
  std::uint32_t bucket_elems = delta::kDefaultBucketElems;
  //! Every anchor_every-th round goes whole (0: only when needed). Bounds how long a receiver
  //! that joined late, or a reference that went bad, can go unnoticed: nothing else can go wrong
  //! silently, so the default is 0.
  int anchor_every = 0;
  //! automatic: the link's speed in bytes/s, when known (0: unknown until commit(stats) measures
  //! it; taken as slower than the diff until then). A delta round costs about
  //! bytes / encode + wire / link against bytes / link for a whole one, so with s the last delta
  //! round's wire share, a link at least (1 - s) x as fast as the diff gains nothing: such a
  //! round goes whole without diffing, and keeps no reference (nothing to update after it), so it
  //! costs what a full sync costs. Colocated ipc runs at HBM speed (about 2e12 on an H200).
  double link_bytes_per_s = 0;
  //! automatic: the diff's speed, in bytes of source per second (0: the codec's estimate,
  //! Codec::kEncodeBytesPerS); replaced by the measured speed after each delta round.
  double encode_bytes_per_s = 0;
};

//! What the last prepare() found.
struct DeltaStats {
  bool whole_round = false;          //!< everything sent whole (no base version)
  std::uint64_t tensor_bytes = 0;    //!< the tensors' bytes (what a full sync sends)
  std::uint64_t wire_bytes = 0;      //!< what this round sends: blobs + whole tensors
  std::uint64_t changed_elements = 0;  //!< elements sent in blobs (low-byte: failed blocks whole)
  std::uint64_t failed_blocks = 0;     //!< low-byte blocks whose hash check failed (sent whole)
  std::size_t whole = 0, blobs = 0, unchanged = 0;  //!< tensors
  std::chrono::nanoseconds encode{0};  //!< diff + encode (prepare)
  std::chrono::nanoseconds commit{0};  //!< reference update (commit)
};

namespace detail {
//! DeltaOptions' checks (DeltaSource, ShardedDeltaSource); `low_byte_codec`: the codec keeps
//! low-byte references. @throws config_error naming the option.
inline void check_delta_options(const DeltaOptions& o, bool low_byte_codec) {
  if (!(o.max_payload_fraction > 0.0 && o.max_payload_fraction <= 1.0))
    throw config_error("max_payload_fraction",
                       cat("must be in (0, 1], got ", o.max_payload_fraction));
  if (o.bucket_elems < 32 || o.bucket_elems > delta::kMaxBucketElems || o.bucket_elems % 32 != 0)
    throw config_error("bucket_elems", cat("must be a multiple of 32 in [32, ",
                                           delta::kMaxBucketElems, "], got ", o.bucket_elems));
  if (o.anchor_every < 0) throw config_error("anchor_every", cat("must be >= 0, got ", o.anchor_every));
  if (!(o.link_bytes_per_s >= 0))
    throw config_error("link_bytes_per_s", cat("must be >= 0, got ", o.link_bytes_per_s));
  if (!(o.encode_bytes_per_s >= 0))
    throw config_error("encode_bytes_per_s", cat("must be >= 0, got ", o.encode_bytes_per_s));
  if (o.reference == DeltaReference::low_byte && !low_byte_codec)
    throw config_error("reference",
                       "this codec keeps full references only (it has no kLowByteReference)");
}
//! Whether Codec::measure leaves every reference equal to its source (the CUDA codec).
template <class Codec>
inline constexpr bool codec_measure_updates = [] {
  if constexpr (requires { Codec::kMeasureUpdatesReference; })
    return Codec::kMeasureUpdatesReference;
  else
    return false;
}();
//! Whether the codec keeps low-byte references.
template <class Codec>
inline constexpr bool codec_low_byte = [] {
  if constexpr (requires { Codec::kLowByteReference; })
    return Codec::kLowByteReference;
  else
    return false;
}();
//! The round bookkeeping of DeltaSource and ShardedDeltaSource: the version the receivers hold
//! (base), the one the measured round makes (target), and whether the references hold base.
struct DeltaRounds {
  std::string base, target;
  bool has_ref = false;      //!< the references hold `base`: a round may be a delta
  bool pending = false;      //!< a round was measured and not committed
  std::uint64_t count = 0;   //!< rounds committed
  //! Whether the next round goes whole by this bookkeeping alone: no reference, a round left
  //! uncommitted, or an anchor round (every `anchor_every`-th; 0: none).
  bool whole(int anchor_every) const {
    return !has_ref || pending ||
           (anchor_every > 0 && count % static_cast<std::uint64_t>(anchor_every) == 0);
  }
  //! A round toward `version` was measured.
  void begin(std::string version) {
    pending = true;
    target = std::move(version);
  }
  //! The measured round landed: its version is the receivers' base now; `kept`: the references
  //! hold it.
  void committed(bool kept) {
    has_ref = kept;
    pending = false;
    base = target;
    ++count;
  }
  //! The receivers hold `version` already, and the references were made from it.
  void seeded(std::string version) {
    has_ref = true;
    pending = false;
    base = std::move(version);
  }
};
}  // namespace detail

//! The host codec (host memory: the host backend). measure, encode and apply spread the tensors
//! over the hardware threads.
class HostDeltaCodec {
 public:
  using Buffer = std::vector<std::byte>;
  //! What DeltaOptions::automatic assumes before it has measured: one core's memcmp-bound diff.
  static constexpr double kEncodeBytesPerS = 1e9;
  //! Measures DeltaJob::low_byte jobs (and updates their references in the same pass).
  static constexpr bool kLowByteReference = true;
  Buffer alloc(std::size_t bytes) const { return Buffer(bytes); }
  //! A low-byte reference made the source's (a whole round).
  void seed_low_byte(void* ref, const void* src, std::uint64_t numel) const {
    delta::low_byte_seed_host(ref, src, numel);
  }
  static std::byte* data(Buffer& b) { return b.data(); }
  void copy(void* dst, const void* src, std::size_t bytes) const {
    if (bytes > 0) std::memcpy(dst, src, bytes);
  }
  //! Each job's blob size (and keeps the jobs for encode()).
  std::vector<std::uint64_t> measure(std::span<const delta::DeltaJob> jobs, std::uint32_t bucket_elems) {
    jobs_.assign(jobs.begin(), jobs.end());
    bucket_ = bucket_elems;
    counts_.clear();
    changed_ = 0;
    failed_ = 0;
    counts_.assign(jobs_.size(), {});
    bits_.assign(jobs_.size(), {});
    std::vector<std::uint64_t> failed(jobs_.size(), 0);
    std::vector<std::uint64_t> sizes(jobs_.size());
    parallel(jobs_.size(), [&](std::size_t i) {
      const auto& j = jobs_[i];
      if (j.low_byte) {
        if (j.elem_bytes != 2)
          throw config_error(detail::cat("jobs[", i, "].low_byte"),
                             detail::cat("needs 2-byte elements, got ", j.elem_bytes));
        // (the job's reference is the codec's own buffer: written here, see DeltaJob::low_byte)
        counts_[i] = delta::low_byte_changes_host(j.src, const_cast<void*>(j.ref), j.numel,
                                                  bucket_, bits_[i], &failed[i]);
      } else {
        counts_[i] = delta::bucket_changes_host(j.src, j.ref, j.numel, j.elem_bytes, bucket_);
      }
      sizes[i] = delta::blob_bytes_for(counts_[i], j.numel, j.elem_bytes, bucket_);
    });
    for (const auto& c : counts_)
      for (auto x : c) changed_ += x;
    for (auto f : failed) failed_ += f;
    return sizes;
  }
  std::uint64_t changed_elements() const { return changed_; }
  //! Low-byte blocks of the last measure whose check failed.
  std::uint64_t failed_blocks() const { return failed_; }
  //! Encodes job i into outs[i] (skipped when nullptr).
  void encode(std::span<void* const> outs) {
    parallel(std::min(jobs_.size(), outs.size()), [&](std::size_t i) {
      if (outs[i] == nullptr) return;
      const auto& j = jobs_[i];
      const std::uint64_t n = delta::blob_bytes_for(counts_[i], j.numel, j.elem_bytes, bucket_);
      if (j.low_byte) {
        const auto& bits = bits_[i];
        delta::encode_delta_host_if(j.src, j.numel, j.elem_bytes, bucket_, counts_[i],
                                    static_cast<std::byte*>(outs[i]), n, [&](std::uint64_t e) {
                                      return (bits[e / 64] >> (e % 64)) & 1u;
                                    });
      } else {
        delta::encode_delta_host(j.src, j.ref, j.numel, j.elem_bytes, bucket_, counts_[i],
                                 static_cast<std::byte*>(outs[i]), n);
      }
    });
  }
  //! Queues an apply; finish() runs the queue over the hardware threads.
  void apply(const void* blob, std::uint64_t bytes, void* dst, std::uint64_t numel,
             unsigned elem_bytes, const std::string& name) {
    applies_.push_back({blob, bytes, dst, numel, elem_bytes, name});
  }
  void finish() {
    auto queue = std::move(applies_);
    applies_.clear();
    parallel(queue.size(), [&](std::size_t i) {
      const auto& a = queue[i];
      delta::apply_delta_host(static_cast<const std::byte*>(a.blob), a.bytes, a.dst, a.numel,
                              a.elem_bytes, a.name);
    });
  }

  //! Runs fn(0..n-1) over min(n, hardware threads) threads; rethrows the first exception.
  template <class F>
  static void parallel(std::size_t n, F&& fn) {
    const std::size_t threads =
        std::min<std::size_t>(n, std::max(1u, std::thread::hardware_concurrency()));
    if (threads <= 1) {
      for (std::size_t i = 0; i < n; ++i) fn(i);
      return;
    }
    std::atomic<std::size_t> next{0};
    std::exception_ptr first;
    std::mutex m;
    auto work = [&] {
      for (std::size_t i; (i = next.fetch_add(1)) < n;) try {
          fn(i);
        } catch (...) {
          std::lock_guard lock(m);
          if (!first) first = std::current_exception();
        }
    };
    std::vector<std::thread> pool;
    for (std::size_t k = 1; k < threads; ++k) pool.emplace_back(work);
    work();
    for (auto& th : pool) th.join();
    if (first) std::rethrow_exception(first);
  }

 private:
  struct Apply {
    const void* blob;
    std::uint64_t bytes;
    void* dst;
    std::uint64_t numel;
    unsigned elem_bytes;
    std::string name;
  };
  std::vector<Apply> applies_;
  std::vector<delta::DeltaJob> jobs_;
  std::vector<std::vector<std::uint32_t>> counts_;
  std::vector<std::vector<std::uint64_t>> bits_;  //!< low-byte jobs: the elements to send
  std::uint32_t bucket_ = delta::kDefaultBucketElems;
  std::uint64_t changed_ = 0, failed_ = 0;
};

//! A WeightSource (S) sent as deltas against the last committed version; models WeightSource
//! (its metas() / iterate() are the wire of the prepared round). One round at a time.
template <class S, class Codec = HostDeltaCodec>
class DeltaSource {
 public:
  explicit DeltaSource(S& source, DeltaOptions opt = {}, Codec codec = Codec())
      : src_(source), opt_(opt), codec_(std::move(codec)) {
    detail::check_delta_options(opt_, kLowByte);
    encode_rate_ = opt_.encode_bytes_per_s > 0 ? opt_.encode_bytes_per_s : Codec::kEncodeBytesPerS;
    link_rate_ = opt_.link_bytes_per_s;
  }

  //! Diffs the source against the reference and encodes the round that makes `version`; returns
  //! `info` (TrainerEngine::update_request of the source's metas) with its `delta` set. Every
  //! receiver must be given that update.
  //! @throws config_error for an empty version, a sharded info, or a source that does not yield
  //!   its declared tensors.
  UpdateRequest prepare(std::string version, UpdateRequest info) {
    if (version.empty()) throw config_error("version", "a delta round needs a version name");
    if (info.sharded) throw config_error("delta", "a delta round has one root (not sharded)");
    const auto started = std::chrono::steady_clock::now();
    metas_ = src_.metas();
    if (info.metas != metas_)
      throw config_error("info", "the update info does not describe the source's tensors");
    collect();
    // A link as fast as the diff: deltas cannot win; no reference is kept either.
    fast_link_ = opt_.mode == DeltaMode::automatic && link_rate_ > 0 &&
                 link_rate_ >= (1.0 - wire_share_) * encode_rate_;
    const bool whole = round_.whole(opt_.anchor_every) || ref_metas_ != metas_ ||
                       opt_.mode == DeltaMode::never || fast_link_;
    round_.begin(std::move(version));
    refs_hold_target_ = false;
    stats_ = DeltaStats{};
    stats_.whole_round = whole;
    DeltaUpdate d;
    d.bucket_elems = opt_.bucket_elems;
    d.payload_bytes.assign(metas_.size(), -1);
    blob_at_.assign(metas_.size(), 0);
    if (!whole) {
      d.base_version = round_.base;
      std::vector<delta::DeltaJob> jobs;
      for (std::size_t i = 0; i < metas_.size(); ++i)
        jobs.push_back({data_[i], Codec::data(refs_[i]), metas_[i].numel(),
                        static_cast<unsigned>(dtype_size(metas_[i].dtype)), low_byte(i)});
      const auto sizes = codec_.measure(jobs, opt_.bucket_elems);
      refs_hold_target_ = kMeasureUpdates;  // (the references now hold this round's source)
      stats_.changed_elements = codec_.changed_elements();
      if constexpr (kLowByte) stats_.failed_blocks = codec_.failed_blocks();
      std::uint64_t arena = 0;
      for (std::size_t i = 0; i < metas_.size(); ++i) {
        const std::uint64_t full = metas_[i].nbytes();
        // (a blob of only its header and directory: no bucket changed)
        const bool same = sizes[i] == delta::blob_prefix_bytes(
                                          delta::bucket_count(metas_[i].numel(), opt_.bucket_elems));
        if (full == 0 || same) {
          d.payload_bytes[i] = 0;
        } else if (sizes[i] < full &&
                   (opt_.mode == DeltaMode::always ||
                    static_cast<double>(sizes[i]) <=
                        opt_.max_payload_fraction * static_cast<double>(full))) {
          d.payload_bytes[i] = static_cast<std::int64_t>(sizes[i]);
          blob_at_[i] = arena;
          arena += sizes[i];
        }
      }
      // (the arena is kept while it is large enough: over ipc, the same allocation stays
      // exported and mapped from round to round)
      if (arena > blobs_.size()) {
        blobs_ = typename Codec::Buffer{};
        blobs_ = codec_.alloc(arena);
      }
      std::vector<void*> outs(metas_.size(), nullptr);
      for (std::size_t i = 0; i < metas_.size(); ++i)
        if (d.payload_bytes[i] > 0) outs[i] = Codec::data(blobs_) + blob_at_[i];
      codec_.encode(outs);
    }
    for (std::size_t i = 0; i < metas_.size(); ++i) {
      const std::int64_t p = d.payload_bytes[i];
      stats_.tensor_bytes += metas_[i].nbytes();
      if (p == -1) {
        ++stats_.whole;
        stats_.wire_bytes += metas_[i].nbytes();
      } else if (p == 0) {
        ++stats_.unchanged;
      } else {
        ++stats_.blobs;
        stats_.wire_bytes += static_cast<std::uint64_t>(p);
      }
    }
    info.delta = std::move(d);
    info.sparse_counts.reset();
    info.validate();
    wire_ = wire_cache_.get(info, round_.base);  // (the last round's when it is the same)
    delta_ = *info.delta;
    stats_.encode = std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::steady_clock::now() - started);
    if (!whole && stats_.encode.count() > 0) {
      encode_rate_ = static_cast<double>(stats_.tensor_bytes) * 1e9 /
                     static_cast<double>(stats_.encode.count());
      if (stats_.tensor_bytes > 0)
        wire_share_ = static_cast<double>(stats_.wire_bytes) / static_cast<double>(stats_.tensor_bytes);
    }
    return info;
  }
  //! The same for an adapter's update description, returned in its own form (vLLM's
  //! NcclUpdateInfo: `NcclUpdateInfo info = d.prepare("v8", trainer.update_info(metas))`, whose
  //! `delta` is this library's extension of vLLM's JSON).
  template <UpdateInfo Info>
    requires(!std::same_as<Info, UpdateRequest>)
  auto prepare(std::string version, const Info& info)
      -> decltype(to_update_info(std::declval<const typename detail::dependent_type<
                                     UpdateRequest, Info>::type&>())) {
    return to_update_info(prepare(std::move(version), to_update_request(info, UpdateContext{})));
  }

  //! The prepared round's wire (WeightSource).
  const std::vector<TensorMeta>& metas() const { return wire_->metas; }

  //! The prepared round's tensors (WeightSource): the marker, blobs and whole tensors.
  AnyTensorRange iterate() {
    if (!round_.pending) throw state_error("DeltaSource::iterate before prepare");
    return AnyTensorRange([this, k = std::size_t{0}](SourceTensorRef& out) mutable {
      if (k >= wire_->metas.size()) return false;
      const auto& x = wire_->what[k];
      const void* p = nullptr;
      switch (x.kind) {
        case detail::WireTensor::Kind::marker:
          p = &marker_byte_;
          break;
        case detail::WireTensor::Kind::whole:
          p = data_[x.tensor];
          break;
        case detail::WireTensor::Kind::blob:
          p = Codec::data(blobs_) + blob_at_[x.tensor];
          break;
        default:
          throw state_error("DeltaSource: a sparse pair in a delta round");
      }
      out = SourceTensorRef{&wire_->metas[k], p};
      ++k;
      return true;
    });
  }

  //! The prepared round landed on every rank: the reference becomes it (whole tensors copied,
  //! blobs applied, as the receivers did; nothing left to do when the codec's measure already
  //! wrote the sources into the references, as CudaDeltaCodec's does), and its version the next
  //! round's base. A round that is never committed leaves the receivers' state unknown and the
  //! reference possibly ahead of them: the next round goes whole.
  //! As commit(), and learns the link's speed from the round's TransferStats (its data phase),
  //! for DeltaMode::automatic.
  void commit(const TransferStats& round) {
    commit();
    const double r = round.data_bytes_per_second();
    if (r > 0) link_rate_ = r;
  }
  //! The link speed the automatic mode goes by (bytes/s; 0: unknown).
  double link_bytes_per_s() const { return link_rate_; }
  //! The diff speed the automatic mode goes by (bytes of source per second).
  double encode_bytes_per_s() const { return encode_rate_; }

  void commit() {
    if (!round_.pending) throw state_error("DeltaSource::commit without a prepared round");
    const auto started = std::chrono::steady_clock::now();
    if (fast_link_) {  // whole rounds only: no reference to keep up to date
      refs_.clear();
      ref_metas_.clear();
      round_.committed(false);
      return;
    }
    alloc_refs();
    for (std::size_t i = 0; i < metas_.size() && !refs_hold_target_; ++i) {
      const std::int64_t p = delta_.payload_bytes[i];
      if (low_byte(i)) {  // a delta round's measure updated it already
        if (stats_.whole_round) seed_ref(i);
        continue;
      }
      if (p == -1)
        codec_.copy(Codec::data(refs_[i]), data_[i], metas_[i].nbytes());
      else if (p > 0)
        codec_.apply(Codec::data(blobs_) + blob_at_[i], static_cast<std::uint64_t>(p),
                     Codec::data(refs_[i]), metas_[i].numel(),
                     static_cast<unsigned>(dtype_size(metas_[i].dtype)), metas_[i].name);
    }
    codec_.finish();
    round_.committed(true);
    stats_.commit = std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::steady_clock::now() - started);
  }

  //! Forgets the reference's standing: the next round goes whole.
  void invalidate() { round_.has_ref = false; }

  //! The receivers already hold the source's current tensors as `version` (they loaded the same
  //! checkpoint): those become the reference without a round, and the next round a delta.
  void seed(std::string version) {
    if (version.empty()) throw config_error("version", "a seed needs a version name");
    metas_ = src_.metas();
    collect();
    alloc_refs();
    for (std::size_t i = 0; i < metas_.size(); ++i) seed_ref(i);
    codec_.finish();
    round_.seeded(std::move(version));
  }

  //! The version the next delta builds on ("" before the first commit).
  const std::string& base_version() const { return round_.base; }
  const DeltaStats& stats() const { return stats_; }
  //! The reference's memory, in bytes.
  std::uint64_t reference_bytes() const {
    std::uint64_t n = 0;
    for (std::size_t i = 0; i < ref_metas_.size(); ++i) n += ref_bytes(ref_metas_[i]);
    return n;
  }

 private:
  //! Whether tensor i of metas_ keeps a low-byte reference.
  bool low_byte(std::size_t i) const { return low_byte(metas_[i]); }
  bool low_byte(const TensorMeta& m) const {
    return opt_.reference == DeltaReference::low_byte && dtype_size(m.dtype) == 2;
  }
  std::uint64_t ref_bytes(const TensorMeta& m) const {
    return low_byte(m) ? delta::low_byte_ref_bytes(m.numel()) : m.nbytes();
  }
  //! The references, for metas_ (kept while the metadata is the same).
  void alloc_refs() {
    if (ref_metas_ == metas_) return;
    refs_.clear();
    for (const auto& m : metas_) refs_.push_back(codec_.alloc(ref_bytes(m)));
    ref_metas_ = metas_;
  }
  //! Reference i becomes the source's tensor i.
  void seed_ref(std::size_t i) {
    if constexpr (kLowByte) {
      if (low_byte(i)) {
        codec_.seed_low_byte(Codec::data(refs_[i]), data_[i], metas_[i].numel());
        return;
      }
    }
    codec_.copy(Codec::data(refs_[i]), data_[i], metas_[i].nbytes());
  }
  //! The source's tensors' addresses, checked against its declared metadata.
  void collect() {
    data_.assign(metas_.size(), nullptr);
    auto&& range = src_.iterate();
    std::size_t i = 0;
    for (auto it = std::ranges::begin(range); it != std::ranges::end(range); ++it, ++i) {
      auto&& item = *it;
      if (i >= metas_.size())
        throw config_error("source", detail::cat("yields more than the ", metas_.size(),
                                                 " declared tensors"));
      const TensorMeta& m = item.meta();
      if (m.name != metas_[i].name || m.dtype != metas_[i].dtype || m.shape != metas_[i].shape)
        throw config_error(metas_[i].name,
                           detail::cat("the source yields ", m.name, " ", dtype_name(m.dtype),
                                       " where ", dtype_name(metas_[i].dtype), " was declared"));
      data_[i] = item.data();
    }
    if (i != metas_.size())
      throw config_error("source", detail::cat("yields ", i, " of its ", metas_.size(),
                                               " declared tensors"));
  }

  S& src_;
  DeltaOptions opt_;
  Codec codec_;
  std::vector<TensorMeta> metas_, ref_metas_;
  std::vector<const void*> data_;
  std::vector<typename Codec::Buffer> refs_;
  typename Codec::Buffer blobs_{};
  std::vector<std::uint64_t> blob_at_;
  detail::UpdateWireCache wire_cache_;
  std::shared_ptr<const detail::UpdateWire> wire_ = std::make_shared<const detail::UpdateWire>();
  DeltaUpdate delta_;
  DeltaStats stats_;
  detail::DeltaRounds round_;
  static constexpr bool kMeasureUpdates = detail::codec_measure_updates<Codec>;
  static constexpr bool kLowByte = detail::codec_low_byte<Codec>;
  bool fast_link_ = false, refs_hold_target_ = false;
  double encode_rate_ = 0, link_rate_ = 0, wire_share_ = 0;
  static constexpr std::byte marker_byte_{0};
};

//! One tensor's patch in vLLM's sparse_nccl form: int32 flat indices and their values.
struct SparsePatch {
  TensorMeta tensor;
  std::vector<std::int32_t> indices;
  std::vector<std::byte> values;  //!< indices.size() elements of tensor.dtype
};

//! Speaks vLLM's sparse_nccl: update_info() has names / dtype_names / shapes / num_updates_list,
//! and the wire is two tensors per patch (indices, then values), each its own broadcast when sent
//! unpacked with Protocol::vllm, which is what a vLLM sparse worker reads. Models WeightSource.
class SparseSource {
 public:
  explicit SparseSource(std::vector<SparsePatch> patches) : p_(std::move(patches)) {
    UpdateRequest u;
    for (std::size_t i = 0; i < p_.size(); ++i) {
      const auto& x = p_[i];
      const std::size_t eb = dtype_size(x.tensor.dtype);
      if (x.values.size() != x.indices.size() * eb)
        throw config_error(detail::cat("patches[", i, "].values"),
                           detail::cat(x.values.size(), " bytes for ", x.indices.size(),
                                       " indices of ", dtype_name(x.tensor.dtype)));
      u.metas.push_back(x.tensor);
    }
    u.sparse_counts.emplace();
    for (const auto& x : p_) u.sparse_counts->push_back(static_cast<std::int64_t>(x.indices.size()));
    u.packing.packed = false;  // sparse_nccl refuses packed updates
    u.validate();
    req_ = u;
    wire_ = detail::update_wire(u, "");
  }
  //! The update a worker (vLLM's or ours) needs, in the engines' terms.
  const UpdateRequest& update_request() const { return req_; }
  //! The same in an adapter's form: vLLM's NcclUpdateInfo (names / dtype_names / shapes /
  //! num_updates_list) when <weightsync/vllm.hpp> is included.
  template <class R = UpdateRequest>
  auto update_info() const -> decltype(to_update_info(std::declval<const R&>())) {
    return to_update_info(static_cast<const R&>(req_));
  }
  std::vector<TensorMeta> metas() const { return wire_.metas; }
  std::vector<SourceTensorRef> iterate() const {
    std::vector<SourceTensorRef> v;
    for (std::size_t k = 0; k < wire_.metas.size(); ++k) {
      const auto& x = wire_.what[k];
      const auto& patch = p_[x.tensor];
      v.push_back({&wire_.metas[k], x.kind == detail::WireTensor::Kind::sparse_indices
                                        ? static_cast<const void*>(patch.indices.data())
                                        : static_cast<const void*>(patch.values.data())});
    }
    return v;
  }

 private:
  std::vector<SparsePatch> p_;
  UpdateRequest req_;
  detail::UpdateWire wire_;
};

}  // namespace weightsync
