// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! NcclInitInfo / NcclUpdateInfo: the JSON a trainer sends an inference engine. Field names are
//! exactly vLLM's (NCCLWeightTransferInitInfo / NCCLWeightTransferUpdateInfo), so what a Python
//! trainer sends (`asdict(info)`, with or without its None values) is accepted as is.
//! M2NInitInfo / M2NUpdateInfo: the same for vLLM's sharded-trainer backend `nccl_m2n`
//! (M2NWeightTransferInitInfo, which carries the whole plan, and the names-only
//! M2NWeightTransferUpdateInfo); parse_init_info() reads either init info.
//! Parsing is strict: unknown keys, wrong JSON types, missing keys and out-of-range values throw
//! config_error naming the field. JSON null means "absent" (Python's None).

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "weightsync/detail/base64.hpp"
#include "weightsync/detail/format.hpp"
#include "weightsync/detail/json_read.hpp"
#include "weightsync/detail/shard_json.hpp"
#include "weightsync/dtype.hpp"
#include "weightsync/engine/group_info.hpp"
#include "weightsync/error.hpp"
#include "weightsync/shard.hpp"
#include "weightsync/tensor_meta.hpp"
#include "weightsync/tuning.hpp"

namespace weightsync {

namespace detail {
inline void check_buffer_size(std::int64_t v) {
  if (v < 1) throw config_error("packed_buffer_size_bytes", cat("must be >= 1, got ", v));
}
//! The packing fields NcclInitInfo and NcclUpdateInfo share, as read from JSON (absent: nullopt).
struct PackingFields {
  std::optional<bool> packed;
  std::optional<std::int64_t> packed_buffer_size_bytes;
  std::optional<int> packed_num_buffers;
};
inline PackingFields read_packing(const JsonObject& o) {
  PackingFields p;
  if (auto* x = o.optional("packed")) p.packed = json_bool(*x, "packed");
  if (auto* x = o.optional("packed_buffer_size_bytes"))
    p.packed_buffer_size_bytes =
        json_int_in(*x, "packed_buffer_size_bytes", 1, std::numeric_limits<std::int64_t>::max());
  if (auto* x = o.optional("packed_num_buffers"))
    p.packed_num_buffers =
        static_cast<int>(json_int_in(*x, "packed_num_buffers", 1, kMaxPackedNumBuffers));
  return p;
}
inline void check_num_buffers(std::int64_t v) {
  if (v < 1 || v > kMaxPackedNumBuffers)
    throw config_error("packed_num_buffers",
                       cat("must be in 1..", kMaxPackedNumBuffers, ", got ", v));
}
}  // namespace detail

//! Decodes a standard-base64 ncclUniqueId. @throws config_error("nccl_unique_id_b64") when it is
//! not canonical base64 or does not decode to exactly 128 bytes.
inline std::array<std::byte, kNcclUniqueIdBytes> decode_unique_id_b64(const std::string& b64) {
  std::string why;
  auto bytes = detail::base64_decode(b64, why);
  if (!bytes) throw config_error("nccl_unique_id_b64", "not valid standard base64: " + why);
  if (bytes->size() != kNcclUniqueIdBytes)
    throw config_error("nccl_unique_id_b64", detail::cat("must decode to ", kNcclUniqueIdBytes,
                                                         " bytes, got ", bytes->size()));
  std::array<std::byte, kNcclUniqueIdBytes> out{};
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = (*bytes)[i];
  return out;
}

//! How an inference engine joins the trainer's group. Exactly one rendezvous mode:
//! master_address + master_port (TCP rendezvous, rank 0 listens) or nccl_unique_id_b64.
struct NcclInitInfo {
  std::optional<std::string> master_address;
  std::optional<int> master_port;
  int rank_offset = 1;
  int world_size = 2;
  std::optional<std::string> nccl_unique_id_b64;
  bool packed = false;
  std::int64_t packed_buffer_size_bytes = kDefaultPackedBufferSizeBytes;
  int packed_num_buffers = kDefaultPackedNumBuffers;

  bool uses_unique_id() const { return nccl_unique_id_b64.has_value(); }

  //! @throws config_error naming the first field at fault.
  void validate() const {
    if (world_size < 1)
      throw config_error("world_size", detail::cat("must be >= 1, got ", world_size));
    if (rank_offset < 0)
      throw config_error("rank_offset", detail::cat("must be >= 0, got ", rank_offset));
    if (rank_offset >= world_size)
      throw config_error("rank_offset",
                         detail::cat("must be < world_size (", world_size, "), got ", rank_offset));
    const bool tcp = master_address.has_value() || master_port.has_value();
    if (tcp && uses_unique_id())
      throw config_error("nccl_unique_id_b64",
                         "pass nccl_unique_id_b64 or master_address/master_port, not both");
    if (!tcp && !uses_unique_id())
      throw config_error("master_address",
                         "need nccl_unique_id_b64, or both master_address and master_port");
    if (tcp) {
      if (!master_address) throw config_error("master_address", "required with master_port");
      if (master_address->empty()) throw config_error("master_address", "must not be empty");
      if (!master_port) throw config_error("master_port", "required with master_address");
      detail::check_port(*master_port);
    } else {
      (void)decode_unique_id_b64(*nccl_unique_id_b64);
    }
    detail::check_buffer_size(packed_buffer_size_bytes);
    detail::check_num_buffers(packed_num_buffers);
  }

  //! The group this info describes, as the backends take it (Backend::init): the unique id
  //! decoded from base64, no vLLM fields (rank_offset and packing are the engines').
  //! @throws config_error as validate() does.
  GroupInfo group_info() const {
    validate();
    GroupInfo g;
    g.world_size = world_size;
    g.master_address = master_address;
    g.master_port = master_port;
    if (uses_unique_id()) g.nccl_unique_id = decode_unique_id_b64(*nccl_unique_id_b64);
    return g;
  }

  friend bool operator==(const NcclInitInfo&, const NcclInitInfo&) = default;
};

//! A delta sync (<weightsync/delta/source.hpp>): the tensors travel as delta blobs against the
//! version the receivers hold. JSON: "delta": {"base_version": "v7", "bucket_elems": 16384,
//! "payload_bytes": [n0, n1, ...]}.
struct DeltaUpdate {
  //! The version the blobs apply to; every receiver must hold it (the handshake refuses the
  //! transfer on every rank otherwise). "" for a full sync (nothing to match).
  std::string base_version;
  //! Elements per bucket of the blobs (<weightsync/delta/format.hpp>).
  std::int64_t bucket_elems = 16384;
  //! Per tensor (in `names` order): the delta blob's size in bytes; -1 when the tensor is sent
  //! whole, 0 when it did not change (nothing is sent for it).
  std::vector<std::int64_t> payload_bytes;
  friend bool operator==(const DeltaUpdate&, const DeltaUpdate&) = default;
};

//! What one weight update carries: the ordered tensor list, optionally the packing settings
//! (which then override the init values for this update), and optionally how each tensor is split
//! over the M trainer ranks 0..M-1 of the group (a sharded transfer: every trainer rank sends the
//! pieces it holds).
//!
//! M is `num_trainer_ranks` when given, else a * b for vLLM's M2N mesh, else the init info's
//! rank_offset (the workers of a single server start at rank M, as in vLLM's M2N). Sharding, in
//! one of two forms (not both; neither, and no num_trainer_ranks: not sharded, trainer rank 0
//! sends everything, vLLM's meaning of its plain JSON; num_trainer_ranks alone: sharded, every
//! tensor whole from rank 0, the other trainer ranks in the group take part):
//! - `shards` (this library's): per tensor null (not split, rank 0 sends it) or
//!   {"dim": d, "sizes": [...], "ranks": [...]}: dim -1 (or absent) is not split, sent by ranks[0]
//!   (default 0); sizes are the pieces' rows along dim, uneven allowed (absent: torch.chunk's split
//!   over the ranks, what FSDP2's Shard(d) holds); ranks the trainer rank of each piece, any order
//!   (absent: piece p on rank p).
//! - vLLM's M2N: `src_mesh_dims` [a, b] (M = a * b, rank = i * b + j) and `src_placements`, per
//!   tensor null (replicated) or [c0, c1] (-1 replicate, d >= 0 shard dim d over that mesh axis);
//!   see shard_spec_from_m2n. It can only say "even torch.chunk split over one mesh axis", the
//!   pieces on that axis's ranks; `shards` adds uneven sizes and explicit ranks.
struct NcclUpdateInfo {
  std::vector<std::string> names;
  std::vector<std::string> dtype_names;
  std::vector<std::vector<std::int64_t>> shapes;
  std::optional<bool> packed;
  std::optional<std::int64_t> packed_buffer_size_bytes;
  std::optional<int> packed_num_buffers;
  //! vLLM's base-class field (WeightTransferUpdateInfo.is_checkpoint_format, default true): whether
  //! the names are checkpoint names for the model's load_weights. Carried, not interpreted.
  bool is_checkpoint_format = true;
  //! Per tensor: null (not split) or its ShardSpec. Absent: not sharded.
  std::optional<std::vector<std::optional<ShardSpec>>> shards;
  //! vLLM M2N: the trainer's 2-D mesh [a, b].
  std::optional<std::vector<std::int64_t>> src_mesh_dims;
  //! vLLM M2N: per tensor null (replicated) or one placement code per mesh axis.
  std::optional<std::vector<std::optional<std::vector<std::int64_t>>>> src_placements;

  //! M, the trainer ranks in the group of a sharded transfer (see above).
  std::optional<int> num_trainer_ranks;

  //! A delta sync (see DeltaUpdate); absent: every tensor is sent whole.
  std::optional<DeltaUpdate> delta;
  //! vLLM's sparse_nccl update: per tensor, the number of (int32 flat index, value) pairs sent
  //! for it, as two broadcasts (indices, then values) applied in place. See
  //! <weightsync/delta/source.hpp> for how it differs from `delta`.
  std::optional<std::vector<std::int64_t>> num_updates_list;

  //! Whether this is a sharded transfer (any of shards, src_placements, num_trainer_ranks).
  bool sharded() const {
    return shards.has_value() || src_placements.has_value() || num_trainer_ranks.has_value();
  }
  //! M: num_trainer_ranks, else a * b of src_mesh_dims, else `rank_offset` (the init info's).
  //! @throws config_error("src_mesh_dims") for a mesh that is not two ints >= 1, or whose product
  //!   does not fit an int.
  int trainer_ranks(int rank_offset) const {
    if (num_trainer_ranks) return *num_trainer_ranks;
    if (src_mesh_dims) return m2n_mesh_size(*src_mesh_dims);
    return rank_offset;
  }

  //! One ShardSpec per tensor (all "rank 0 sends it whole" when not sharded).
  //! @throws config_error naming the entry ("shards[3].dim", "src_placements[2]").
  std::vector<ShardSpec> shard_specs() const {
    check_lengths();
    if (src_placements && !src_mesh_dims)
      throw config_error("src_mesh_dims", "required with src_placements");
    const auto ms = metas();
    std::vector<ShardSpec> out(names.size());
    for (std::size_t i = 0; i < names.size(); ++i) {
      if (shards) {
        if ((*shards)[i]) out[i] = *(*shards)[i];
      } else if (src_placements) {
        out[i] = shard_spec_from_m2n(*src_mesh_dims, (*src_placements)[i],
                                     detail::cat("src_placements[", i, "]"));
        if (out[i].split() && out[i].dim >= static_cast<int>(ms[i].shape.size()))
          throw config_error(detail::cat("src_placements[", i, "]"),
                             detail::cat("tensor '", names[i], "' has ", ms[i].shape.size(),
                                         " dims; cannot shard dim ", out[i].dim));
      }
      detail::check_shard(ms[i], i, out[i]);
    }
    return out;
  }

  //! Builds an update info from metadata (dtype names as torch spells them).
  static NcclUpdateInfo from_metas(const std::vector<TensorMeta>& metas) {
    NcclUpdateInfo u;
    for (const auto& m : metas) {
      u.names.push_back(m.name);
      u.dtype_names.emplace_back(dtype_name(m.dtype));
      u.shapes.push_back(m.shape);
    }
    return u;
  }

  //! The ordered metadata. @throws config_error naming the entry ("dtype_names[3]", "shapes[2]").
  std::vector<TensorMeta> metas() const {
    check_lengths();
    std::vector<TensorMeta> out;
    out.reserve(names.size());
    for (std::size_t i = 0; i < names.size(); ++i) {
      TensorMeta m;
      m.name = names[i];
      try {
        m.dtype = parse_dtype(dtype_names[i]);
      } catch (const config_error& e) {
        throw config_error(detail::cat("dtype_names[", i, "]"),
                           "unknown dtype '" + dtype_names[i] + "' for tensor '" + names[i] + "'");
      }
      m.shape = shapes[i];
      for (std::size_t d = 0; d < m.shape.size(); ++d)
        if (m.shape[d] < 0)
          throw config_error(
              detail::cat("shapes[", i, "][", d, "]"),
              detail::cat("negative dim ", m.shape[d], " for tensor '", names[i], "'"));
      try {
        m.validate();
      } catch (const config_error& e) {
        throw config_error(detail::cat("shapes[", i, "]"), e.what());
      }
      out.push_back(std::move(m));
    }
    return out;
  }

  //! @throws config_error naming the first field at fault.
  void validate() const {
    (void)metas();
    if (packed_buffer_size_bytes) detail::check_buffer_size(*packed_buffer_size_bytes);
    if (packed_num_buffers) detail::check_num_buffers(*packed_num_buffers);
    if (shards && (src_mesh_dims || src_placements))
      throw config_error("shards", "give shards or src_mesh_dims/src_placements, not both");
    if (src_mesh_dims && !src_placements)
      throw config_error("src_placements", "required with src_mesh_dims");
    if (num_trainer_ranks && *num_trainer_ranks < 1)
      throw config_error("num_trainer_ranks",
                         detail::cat("must be >= 1, got ", *num_trainer_ranks));
    const int mesh = src_mesh_dims ? m2n_mesh_size(*src_mesh_dims) : 0;
    (void)shard_specs();
    if (num_trainer_ranks && src_mesh_dims && *num_trainer_ranks != mesh)
      throw config_error(
          "num_trainer_ranks",
          detail::cat(*num_trainer_ranks, " trainer ranks, but src_mesh_dims has ", mesh));
    if (delta) {
      if (sharded()) throw config_error("delta", "a delta sync has one root (not sharded)");
      if (num_updates_list) throw config_error("delta", "give delta or num_updates_list, not both");
      if (delta->bucket_elems < 32 || delta->bucket_elems > 65536 || delta->bucket_elems % 32 != 0)
        throw config_error("delta.bucket_elems", detail::cat("must be a multiple of 32 in [32, 65536], got ",
                                                             delta->bucket_elems));
      if (delta->payload_bytes.size() != names.size())
        throw config_error("delta.payload_bytes",
                           detail::cat("has ", delta->payload_bytes.size(),
                                       " entries but names has ", names.size()));
      for (std::size_t i = 0; i < names.size(); ++i)
        if (delta->payload_bytes[i] < -1)
          throw config_error(detail::cat("delta.payload_bytes[", i, "]"),
                             detail::cat("must be -1 (whole), 0 (unchanged) or a size, got ",
                                         delta->payload_bytes[i]));
      if (delta->base_version.empty())
        for (std::size_t i = 0; i < names.size(); ++i)
          if (delta->payload_bytes[i] != -1)
            throw config_error(detail::cat("delta.payload_bytes[", i, "]"),
                               "a sync without base_version sends every tensor whole (-1)");
    }
    if (num_updates_list) {
      if (sharded()) throw config_error("num_updates_list", "a sparse update has one root");
      if (num_updates_list->size() != names.size())
        throw config_error("num_updates_list",
                           detail::cat("has ", num_updates_list->size(), " entries but names has ",
                                       names.size()));
      const auto ms = metas();
      for (std::size_t i = 0; i < names.size(); ++i) {
        const std::int64_t n = (*num_updates_list)[i];
        if (n < 0 || static_cast<std::uint64_t>(n) > ms[i].numel())
          throw config_error(detail::cat("num_updates_list[", i, "]"),
                             detail::cat(n, " updates for tensor '", names[i], "' of ",
                                         ms[i].numel(), " elements"));
        if (ms[i].numel() > 2147483647ull)
          throw config_error(detail::cat("shapes[", i, "]"),
                             detail::cat("tensor '", names[i], "' has more elements than an "
                                         "int32 index reaches"));
      }
    }
  }

  friend bool operator==(const NcclUpdateInfo&, const NcclUpdateInfo&) = default;

 private:
  void check_lengths() const {
    if (dtype_names.size() != names.size())
      throw config_error("dtype_names", detail::cat("has ", dtype_names.size(),
                                                    " entries but names has ", names.size()));
    if (shapes.size() != names.size())
      throw config_error(
          "shapes", detail::cat("has ", shapes.size(), " entries but names has ", names.size()));
    if (shards && shards->size() != names.size())
      throw config_error(
          "shards", detail::cat("has ", shards->size(), " entries but names has ", names.size()));
    if (src_placements && src_placements->size() != names.size())
      throw config_error("src_placements", detail::cat("has ", src_placements->size(),
                                                       " entries but names has ", names.size()));
  }
};

//! Serializes every field; absent optionals become null (Python's None), which from_json accepts.
inline void to_json(nlohmann::json& j, const NcclInitInfo& v) {
  j = nlohmann::json::object();
  j["master_address"] = v.master_address ? nlohmann::json(*v.master_address) : nlohmann::json();
  j["master_port"] = v.master_port ? nlohmann::json(*v.master_port) : nlohmann::json();
  j["rank_offset"] = v.rank_offset;
  j["world_size"] = v.world_size;
  j["nccl_unique_id_b64"] =
      v.nccl_unique_id_b64 ? nlohmann::json(*v.nccl_unique_id_b64) : nlohmann::json();
  j["packed"] = v.packed;
  j["packed_buffer_size_bytes"] = v.packed_buffer_size_bytes;
  j["packed_num_buffers"] = v.packed_num_buffers;
}

//! Strict parse, then validate(). @throws config_error naming the field.
inline void from_json(const nlohmann::json& j, NcclInitInfo& v) {
  using namespace detail;
  JsonObject o(j, "init_info",
               {"master_address", "master_port", "rank_offset", "world_size", "nccl_unique_id_b64",
                "packed", "packed_buffer_size_bytes", "packed_num_buffers"});
  NcclInitInfo r;
  if (auto* x = o.optional("master_address")) r.master_address = json_string(*x, "master_address");
  if (auto* x = o.optional("master_port"))
    r.master_port = static_cast<int>(json_int_in(*x, "master_port", 1, 65535));
  r.rank_offset = static_cast<int>(
      json_int_in(o.required("rank_offset"), "rank_offset", 0, std::numeric_limits<int>::max()));
  r.world_size = static_cast<int>(
      json_int_in(o.required("world_size"), "world_size", 1, std::numeric_limits<int>::max()));
  if (auto* x = o.optional("nccl_unique_id_b64"))
    r.nccl_unique_id_b64 = json_string(*x, "nccl_unique_id_b64");
  const auto p = read_packing(o);
  r.packed = p.packed.value_or(r.packed);
  r.packed_buffer_size_bytes = p.packed_buffer_size_bytes.value_or(r.packed_buffer_size_bytes);
  r.packed_num_buffers = p.packed_num_buffers.value_or(r.packed_num_buffers);
  r.validate();
  v = std::move(r);
}

inline void to_json(nlohmann::json& j, const NcclUpdateInfo& v) {
  j = nlohmann::json::object();
  j["names"] = v.names;
  j["dtype_names"] = v.dtype_names;
  j["shapes"] = v.shapes;
  j["packed"] = v.packed ? nlohmann::json(*v.packed) : nlohmann::json();
  j["packed_buffer_size_bytes"] =
      v.packed_buffer_size_bytes ? nlohmann::json(*v.packed_buffer_size_bytes) : nlohmann::json();
  j["packed_num_buffers"] =
      v.packed_num_buffers ? nlohmann::json(*v.packed_num_buffers) : nlohmann::json();
  j["is_checkpoint_format"] = v.is_checkpoint_format;
  // Only when set: vLLM's NCCLWeightTransferUpdateInfo does not know these keys.
  if (v.shards) j["shards"] = detail::write_shards(*v.shards);
  if (v.num_trainer_ranks) j["num_trainer_ranks"] = *v.num_trainer_ranks;
  if (v.delta)
    j["delta"] = {{"base_version", v.delta->base_version},
                  {"bucket_elems", v.delta->bucket_elems},
                  {"payload_bytes", v.delta->payload_bytes}};
  if (v.num_updates_list) j["num_updates_list"] = *v.num_updates_list;
  if (v.src_mesh_dims) j["src_mesh_dims"] = *v.src_mesh_dims;
  if (v.src_placements) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& p : *v.src_placements) a.push_back(p ? nlohmann::json(*p) : nlohmann::json());
    j["src_placements"] = std::move(a);
  }
}

namespace detail {
//! The required `names`, `dtype_names` and `shapes` of an update (or M2N init) info, each element
//! checked and named in the error (their lengths are validate()'s business).
inline void read_tensor_lists(const JsonObject& o, std::vector<std::string>& names,
                              std::vector<std::string>& dtype_names,
                              std::vector<std::vector<std::int64_t>>& shapes) {
  const auto& n = o.required("names");
  require_array(n, "names");
  for (std::size_t i = 0; i < n.size(); ++i)
    names.push_back(json_string(n[i], cat("names[", i, "]")));
  const auto& d = o.required("dtype_names");
  require_array(d, "dtype_names");
  for (std::size_t i = 0; i < d.size(); ++i)
    dtype_names.push_back(json_string(d[i], cat("dtype_names[", i, "]")));
  const auto& sh = o.required("shapes");
  require_array(sh, "shapes");
  for (std::size_t i = 0; i < sh.size(); ++i)
    shapes.push_back(json_ints(sh[i], cat("shapes[", i, "]"), 0));
}
}  // namespace detail

inline void from_json(const nlohmann::json& j, NcclUpdateInfo& v) {
  using namespace detail;
  JsonObject o(
      j, "update_info",
      {"names", "dtype_names", "shapes", "packed", "packed_buffer_size_bytes", "packed_num_buffers",
       "is_checkpoint_format", "shards", "num_trainer_ranks", "src_mesh_dims", "src_placements",
       "delta", "num_updates_list"});
  NcclUpdateInfo r;
  read_tensor_lists(o, r.names, r.dtype_names, r.shapes);
  const auto p = read_packing(o);
  r.packed = p.packed;
  r.packed_buffer_size_bytes = p.packed_buffer_size_bytes;
  r.packed_num_buffers = p.packed_num_buffers;
  if (auto* x = o.optional("is_checkpoint_format"))
    r.is_checkpoint_format = json_bool(*x, "is_checkpoint_format");
  if (auto* x = o.optional("shards")) r.shards = read_shards(*x);
  if (auto* x = o.optional("num_trainer_ranks"))
    r.num_trainer_ranks =
        static_cast<int>(json_int_in(*x, "num_trainer_ranks", 1, std::numeric_limits<int>::max()));
  if (auto* x = o.optional("src_mesh_dims")) r.src_mesh_dims = json_ints(*x, "src_mesh_dims", 1);
  if (auto* x = o.optional("src_placements")) r.src_placements = read_placements(*x);
  if (auto* x = o.optional("delta")) {
    JsonObject d(*x, "delta", {"base_version", "bucket_elems", "payload_bytes"});
    DeltaUpdate u;
    u.base_version = json_string(d.required("base_version"), "delta.base_version");
    if (auto* b = d.optional("bucket_elems"))
      u.bucket_elems = json_int_in(*b, "delta.bucket_elems", 32, 65536);
    u.payload_bytes = json_ints(d.required("payload_bytes"), "delta.payload_bytes", -1);
    r.delta = std::move(u);
  }
  if (auto* x = o.optional("num_updates_list"))
    r.num_updates_list = json_ints(*x, "num_updates_list", 0);
  r.validate();
  v = std::move(r);
}

//! vLLM's M2NWeightTransferUpdateInfo: one update of an engine initialized with an M2NInitInfo
//! names the tensors it carries, in the order the trainer sends them (any subset of the init
//! info's names, any order); dtypes, shapes and placements come from the init info
//! (M2NInitInfo::update).
struct M2NUpdateInfo {
  std::vector<std::string> names;
  //! vLLM's base-class field (newer vLLM versions), as in NcclUpdateInfo: carried, not interpreted.
  bool is_checkpoint_format = true;

  friend bool operator==(const M2NUpdateInfo&, const M2NUpdateInfo&) = default;
};

//! vLLM's M2NWeightTransferInitInfo (backend `nccl_m2n`, vllm/distributed/weight_transfer/
//! m2n_engine.py): the rendezvous and the whole plan, sent once; each update then only names its
//! tensors (M2NUpdateInfo). Trainer ranks are 0..rank_offset-1, laid out as the mesh
//! `src_mesh_dims` [a, b] (rank i * b + j; a * b == rank_offset), workers rank_offset..world_size-1
//! as `dst_mesh_dims` [c, d] (c * d == world_size - rank_offset). Per tensor, `src_placements` is
//! null (replicated) or one code per mesh axis (-1 replicate, d >= 0 shard tensor dim d over that
//! axis; exactly one axis shards, and evenly, as vLLM checks).
//!
//! How this library moves it: each tensor becomes a ShardSpec (shard_spec_from_m2n: the sharding
//! axis's ranks at index 0 of the other axis send; a replicated tensor is sent whole by trainer
//! rank 0) and a sharded transfer runs with the packing defaults of NcclInitInfo. Every worker
//! receives FULL tensors: dst_mesh_dims is checked and carried, not used to split what a worker
//! receives (vLLM's workers may reshard straight into their TP shard). max_cta (m2n's kernel
//! setting) is carried, not interpreted; dtypes and tensor ranks are not limited to m2n's.
struct M2NInitInfo {
  std::optional<std::string> master_address;
  std::optional<int> master_port;
  int rank_offset = 1;  //!< the first worker rank = the number of trainer ranks (M)
  int world_size = 2;   //!< trainer ranks + workers
  std::vector<std::int64_t> src_mesh_dims;
  std::vector<std::int64_t> dst_mesh_dims;
  std::vector<std::string> names;
  std::vector<std::string> dtype_names;
  std::vector<std::vector<std::int64_t>> shapes;
  std::vector<std::optional<std::vector<std::int64_t>>> src_placements;
  std::optional<std::string> nccl_unique_id_b64;
  std::optional<int> max_cta;

  //! How to join the group: the rendezvous fields, NcclInitInfo's packing defaults.
  NcclInitInfo rendezvous() const {
    NcclInitInfo r;
    r.master_address = master_address;
    r.master_port = master_port;
    r.rank_offset = rank_offset;
    r.world_size = world_size;
    r.nccl_unique_id_b64 = nccl_unique_id_b64;
    return r;
  }

  //! The update info of every tensor in declared order (names, dtype names, shapes, and the
  //! placements as src_mesh_dims / src_placements).
  NcclUpdateInfo plan() const {
    NcclUpdateInfo u;
    u.names = names;
    u.dtype_names = dtype_names;
    u.shapes = shapes;
    u.src_mesh_dims = src_mesh_dims;
    u.src_placements = src_placements;
    return u;
  }

  //! The update info of the tensors `u` names, in its order. @throws config_error("names[k]")
  //! for a name the init info did not declare.
  NcclUpdateInfo update(const M2NUpdateInfo& u) const {
    NcclUpdateInfo out;
    if (u.names == names) {
      out = plan();  // every tensor, in declared order: what vLLM's trainer sends each round
    } else {
      std::unordered_map<std::string_view, std::size_t> index;
      for (std::size_t i = 0; i < names.size(); ++i) index.emplace(names[i], i);
      out.src_mesh_dims = src_mesh_dims;
      out.src_placements.emplace();
      for (std::size_t k = 0; k < u.names.size(); ++k) {
        const auto it = index.find(u.names[k]);
        if (it == index.end())
          throw config_error(detail::cat("names[", k, "]"),
                             "tensor '" + u.names[k] +
                                 "' was not declared in the M2N init info; an update names "
                                 "tensors the init info announced");
        const std::size_t i = it->second;
        out.names.push_back(names[i]);
        out.dtype_names.push_back(dtype_names[i]);
        out.shapes.push_back(shapes[i]);
        out.src_placements->push_back(src_placements[i]);
      }
    }
    out.is_checkpoint_format = u.is_checkpoint_format;
    return out;
  }

  //! vLLM's checks (M2NWeightTransferInitInfo.__post_init__, M2NWeightTransferEngine's init) and
  //! this library's (NcclInitInfo's rendezvous rules, NcclUpdateInfo's per-tensor ones).
  //! @throws config_error naming the first field at fault.
  void validate() const {
    const auto same_length = [&](const char* field, std::size_t n) {
      if (n != names.size())
        throw config_error(field, detail::cat("has ", n, " entries but names has ", names.size()));
    };
    same_length("dtype_names", dtype_names.size());
    same_length("shapes", shapes.size());
    same_length("src_placements", src_placements.size());
    if (rank_offset < 1 || rank_offset >= world_size)
      throw config_error("rank_offset",
                         detail::cat("must leave at least one trainer rank and one worker in "
                                     "world_size ",
                                     world_size, ", got ", rank_offset));
    const int workers = world_size - rank_offset;
    if (m2n_mesh_size(dst_mesh_dims, "dst_mesh_dims") != workers)
      throw config_error("dst_mesh_dims", detail::cat("must cover the ", workers, " workers, got ",
                                                      dst_mesh_dims[0], " x ", dst_mesh_dims[1]));
    rendezvous().validate();
    if (m2n_mesh_size(src_mesh_dims) != rank_offset)
      throw config_error(
          "src_mesh_dims",
          detail::cat("the source mesh covers ", src_mesh_dims[0] * src_mesh_dims[1],
                      " ranks, but there are ", rank_offset, " trainer ranks (rank_offset)"));
    if (max_cta && *max_cta < 1)
      throw config_error("max_cta", detail::cat("must be >= 1, got ", *max_cta));
    std::unordered_map<std::string_view, std::size_t> seen;
    for (std::size_t i = 0; i < names.size(); ++i)
      if (const auto [it, fresh] = seen.emplace(names[i], i); !fresh)
        throw config_error(detail::cat("names[", i, "]"),
                           detail::cat("tensor '", names[i], "' is declared twice (also names[",
                                       it->second, "])"));
    const auto u = plan();
    u.validate();
    // vLLM's validate_layout: the sharding axis divides the dim evenly (uneven splits go in an
    // update info's `shards`).
    for (std::size_t i = 0; i < names.size(); ++i) {
      if (!src_placements[i]) continue;
      const auto& p = *src_placements[i];
      const std::size_t axis = p[0] >= 0 ? 0 : 1;
      const auto dim = static_cast<std::size_t>(p[axis]);
      if (shapes[i][dim] % src_mesh_dims[axis] != 0)
        throw config_error(detail::cat("src_placements[", i, "]"),
                           detail::cat("tensor '", names[i], "': dim ", dim, " (size ",
                                       shapes[i][dim], ") over ", src_mesh_dims[axis],
                                       " ranks does not divide evenly, which vLLM's nccl_m2n "
                                       "does not allow; send uneven shards as `shards` in the "
                                       "update info"));
    }
  }

  friend bool operator==(const M2NInitInfo&, const M2NInitInfo&) = default;
};

//! Serializes every field; absent optionals become null (Python's None), which from_json accepts.
inline void to_json(nlohmann::json& j, const M2NInitInfo& v) {
  const auto opt = [](const auto& o) { return o ? nlohmann::json(*o) : nlohmann::json(); };
  j = nlohmann::json::object();
  j["master_address"] = opt(v.master_address);
  j["master_port"] = opt(v.master_port);
  j["rank_offset"] = v.rank_offset;
  j["world_size"] = v.world_size;
  j["src_mesh_dims"] = v.src_mesh_dims;
  j["dst_mesh_dims"] = v.dst_mesh_dims;
  j["names"] = v.names;
  j["dtype_names"] = v.dtype_names;
  j["shapes"] = v.shapes;
  nlohmann::json a = nlohmann::json::array();
  for (const auto& p : v.src_placements) a.push_back(opt(p));
  j["src_placements"] = std::move(a);
  j["nccl_unique_id_b64"] = opt(v.nccl_unique_id_b64);
  j["max_cta"] = opt(v.max_cta);
}

//! Strict parse (vLLM's keys only), then validate(). @throws config_error naming the field.
inline void from_json(const nlohmann::json& j, M2NInitInfo& v) {
  using namespace detail;
  JsonObject o(j, "M2N init_info",
               {"master_address", "master_port", "rank_offset", "world_size", "src_mesh_dims",
                "dst_mesh_dims", "names", "dtype_names", "shapes", "src_placements",
                "nccl_unique_id_b64", "max_cta"});
  M2NInitInfo r;
  if (auto* x = o.optional("master_address")) r.master_address = json_string(*x, "master_address");
  if (auto* x = o.optional("master_port"))
    r.master_port = static_cast<int>(json_int_in(*x, "master_port", 1, 65535));
  r.rank_offset = static_cast<int>(
      json_int_in(o.required("rank_offset"), "rank_offset", 1, std::numeric_limits<int>::max()));
  r.world_size = static_cast<int>(
      json_int_in(o.required("world_size"), "world_size", 2, std::numeric_limits<int>::max()));
  r.src_mesh_dims = json_ints(o.required("src_mesh_dims"), "src_mesh_dims", 1);
  r.dst_mesh_dims = json_ints(o.required("dst_mesh_dims"), "dst_mesh_dims", 1);
  read_tensor_lists(o, r.names, r.dtype_names, r.shapes);
  r.src_placements = read_placements(o.required("src_placements"));
  if (auto* x = o.optional("nccl_unique_id_b64"))
    r.nccl_unique_id_b64 = json_string(*x, "nccl_unique_id_b64");
  if (auto* x = o.optional("max_cta"))
    r.max_cta = static_cast<int>(json_int_in(*x, "max_cta", 1, std::numeric_limits<int>::max()));
  r.validate();
  v = std::move(r);
}

//! {"names": [...]}, and is_checkpoint_format only when false (older vLLM does not know it).
inline void to_json(nlohmann::json& j, const M2NUpdateInfo& v) {
  j = nlohmann::json::object();
  j["names"] = v.names;
  if (!v.is_checkpoint_format) j["is_checkpoint_format"] = false;
}

inline void from_json(const nlohmann::json& j, M2NUpdateInfo& v) {
  using namespace detail;
  JsonObject o(j, "M2N update_info", {"names", "is_checkpoint_format"});
  M2NUpdateInfo r;
  const auto& names = o.required("names");
  require_array(names, "names");
  for (std::size_t i = 0; i < names.size(); ++i)
    r.names.push_back(json_string(names[i], cat("names[", i, "]")));
  if (auto* x = o.optional("is_checkpoint_format"))
    r.is_checkpoint_format = json_bool(*x, "is_checkpoint_format");
  v = std::move(r);
}

//! The init info of either vLLM backend a worker may be sent.
using AnyInitInfo = std::variant<NcclInitInfo, M2NInitInfo>;

//! Reads vLLM's init info of either backend, strictly: an object with a key that only
//! M2NWeightTransferInitInfo has (src_mesh_dims, dst_mesh_dims, names, dtype_names, shapes,
//! src_placements, max_cta) is an M2NInitInfo, anything else an NcclInitInfo.
//! @throws config_error naming the field.
inline AnyInitInfo parse_init_info(const nlohmann::json& j) {
  if (j.is_object())
    for (const char* k : {"src_mesh_dims", "dst_mesh_dims", "names", "dtype_names", "shapes",
                          "src_placements", "max_cta"})
      if (j.contains(k)) return j.get<M2NInitInfo>();
  return j.get<NcclInitInfo>();
}

}  // namespace weightsync
