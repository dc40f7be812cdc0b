// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! vLLM's JSON: nlohmann_json to_json / from_json of NcclInitInfo, NcclUpdateInfo, M2NInitInfo
//! and M2NUpdateInfo (so that `nlohmann::json j = info; j.get<T>()` round-trips), the reader of
//! either init info (parse_init_info), and the conversions of that JSON to the engines'
//! InitRequest and UpdateRequest (engine/adapter.hpp), so that the engines take vLLM's JSON as is.
//! Parsing is strict: unknown keys, wrong JSON types, missing keys and out-of-range values throw
//! config_error naming the field. JSON null means "absent" (Python's None).

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "weightsync/detail/format.hpp"
#include "weightsync/detail/json_read.hpp"
#include "weightsync/engine/adapter.hpp"
#include "weightsync/error.hpp"
#include "weightsync/tuning.hpp"
#include "weightsync/vllm/detail/shard_json.hpp"
#include "weightsync/vllm/init_info.hpp"
#include "weightsync/vllm/m2n_info.hpp"
#include "weightsync/vllm/m2n_v2.hpp"
#include "weightsync/vllm/update_info.hpp"

namespace weightsync {

namespace detail {
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
}  // namespace detail

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
  if (v.delta && !v.delta->piece_bytes.empty()) j["delta"]["piece_bytes"] = v.delta->piece_bytes;
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
  JsonObject o(j, "update_info",
               {"names", "dtype_names", "shapes", "packed", "packed_buffer_size_bytes",
                "packed_num_buffers", "is_checkpoint_format", "shards", "num_trainer_ranks",
                "src_mesh_dims", "src_placements", "delta", "num_updates_list"});
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
    JsonObject d(*x, "delta", {"base_version", "bucket_elems", "payload_bytes", "piece_bytes"});
    DeltaUpdate u;
    u.base_version = json_string(d.required("base_version"), "delta.base_version");
    if (auto* b = d.optional("bucket_elems"))
      u.bucket_elems = json_int_in(*b, "delta.bucket_elems", 32, 65536);
    u.payload_bytes = json_ints(d.required("payload_bytes"), "delta.payload_bytes", -1);
    if (auto* pb = d.optional("piece_bytes"))
      u.piece_bytes = json_ints(*pb, "delta.piece_bytes", 0);
    r.delta = std::move(u);
  }
  if (auto* x = o.optional("num_updates_list"))
    r.num_updates_list = json_ints(*x, "num_updates_list", 0);
  r.validate();
  v = std::move(r);
}

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

//! The init info of either vLLM backend a worker may be sent (M2N in schema 1 or 2).
using AnyInitInfo = std::variant<NcclInitInfo, M2NInitInfo, M2NInitInfoV2>;

//! Reads vLLM's init info of either backend, strictly: an object with a key that only the M2N
//! schema 2 has (schema_version, source_digest, params, worker_rank_offset) is an M2NInitInfoV2;
//! else one with a key that only M2NWeightTransferInitInfo has (src_mesh_dims, dst_mesh_dims,
//! names, dtype_names, shapes, src_placements, max_cta) is an M2NInitInfo (schema 1); anything
//! else an NcclInitInfo. @throws config_error naming the field.
inline AnyInitInfo parse_init_info(const nlohmann::json& j) {
  if (j.is_object()) {
    for (const char* k : {"schema_version", "source_digest", "params", "worker_rank_offset"})
      if (j.contains(k)) return j.get<M2NInitInfoV2>();
    for (const char* k : {"src_mesh_dims", "dst_mesh_dims", "names", "dtype_names", "shapes",
                          "src_placements", "max_cta"})
      if (j.contains(k)) return j.get<M2NInitInfo>();
  }
  return j.get<NcclInitInfo>();
}

//! vLLM's init info JSON of either backend (parse_init_info) as the engines' InitRequest.
inline InitRequest to_init_request(const nlohmann::json& j, InitContext c) {
  return std::visit([&](const auto& info) { return to_init_request(info, c); }, parse_init_info(j));
}

//! vLLM's update info JSON as the engine's init asks: after an M2N init (an init with a plan),
//! M2NUpdateInfo (names only, resolved against the plan); else NcclUpdateInfo. Strict either way.
//! @throws config_error naming the field.
inline UpdateRequest to_update_request(const nlohmann::json& j, const UpdateContext& c) {
  if (c.init && c.init->plan) return to_update_request(j.get<M2NUpdateInfo>(), c);
  return to_update_request(j.get<NcclUpdateInfo>(), c);
}

}  // namespace weightsync
