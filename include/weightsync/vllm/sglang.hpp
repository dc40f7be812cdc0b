// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! SGLang's weight-update requests, field for field (python/sglang/srt/managers/io_struct.py, the
//! msgspec `BaseReq` form: InitWeightsUpdateGroupReqInput, UpdateWeightsFromDistributedReqInput),
//! their strict JSON, and their conversions to and from NcclInitInfo / NcclUpdateInfo.
//! POST /init_weights_update_group takes SglangInitGroupRequest, POST
//! /update_weights_from_distributed takes SglangUpdateRequest. SGLang itself ignores keys it does
//! not know; these readers reject them (a misspelt flush_cache would otherwise vanish), naming the
//! key and "SGLang".

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "weightsync/detail/format.hpp"
#include "weightsync/detail/json_read.hpp"
#include "weightsync/error.hpp"
#include "weightsync/vllm/detail/shard_json.hpp"
#include "weightsync/vllm/init_info.hpp"
#include "weightsync/vllm/update_info.hpp"

namespace weightsync {

//! SGLang's default group name (both requests).
inline constexpr const char* kSglangGroupName = "weight_update_group";

//! InitWeightsUpdateGroupReqInput: the engine's ranks join a torch.distributed group (rank =
//! rank_offset + its tp rank) at master_address:master_port; the trainer is rank 0.
struct SglangInitGroupRequest {
  std::string master_address;
  int master_port = 0;
  int rank_offset = 1;
  int world_size = 2;
  std::string group_name = kSglangGroupName;
  std::string backend = "nccl";
  std::optional<std::string> rid;  //!< BaseReq's request id (sent only when set)

  //! The group as NcclInitInfo (TCP rendezvous; SGLang broadcasts tensor by tensor: no packing).
  NcclInitInfo init_info() const {
    NcclInitInfo i;
    i.master_address = master_address;
    i.master_port = master_port;
    i.rank_offset = rank_offset;
    i.world_size = world_size;
    i.packed = false;
    return i;
  }
  //! @throws config_error naming the field.
  void validate() const {
    if (backend != "nccl")
      throw config_error("backend", "must be \"nccl\" (SGLang's default), got \"" + backend + "\"");
    if (group_name.empty()) throw config_error("group_name", "must not be empty");
    init_info().validate();
  }
  //! The request for `info`. @throws config_error("nccl_unique_id_b64") for a unique-id info and
  //! config_error("packed") for a packed one: SGLang's route has neither.
  static SglangInitGroupRequest from(const NcclInitInfo& info,
                                     std::string group_name = kSglangGroupName) {
    info.validate();
    if (info.uses_unique_id())
      throw config_error("nccl_unique_id_b64",
                         "SGLang's init_weights_update_group has no unique-id mode; give "
                         "master_address and master_port");
    if (info.packed)
      throw config_error("packed", "SGLang broadcasts tensor by tensor; it has no packed mode");
    SglangInitGroupRequest r;
    r.master_address = *info.master_address;
    r.master_port = *info.master_port;
    r.rank_offset = info.rank_offset;
    r.world_size = info.world_size;
    r.group_name = std::move(group_name);
    return r;
  }
  friend bool operator==(const SglangInitGroupRequest&, const SglangInitGroupRequest&) = default;
};

//! UpdateWeightsFromDistributedReqInput: the tensors the trainer broadcasts next (from rank 0, one
//! torch.distributed broadcast each, in this order), and what SGLang does around the load.
struct SglangUpdateRequest {
  std::vector<std::string> names;
  std::vector<std::string> dtypes;  //!< torch's names ("bfloat16")
  std::vector<std::vector<std::int64_t>> shapes;
  std::string group_name = kSglangGroupName;
  bool flush_cache = true;
  bool abort_all_requests = false;
  std::optional<std::string> weight_version;
  std::optional<std::string> load_format;
  bool torch_empty_cache = false;
  std::optional<std::string> rid;  //!< BaseReq's request id (sent only when set)

  //! The tensors as NcclUpdateInfo (not packed: SGLang broadcasts each tensor alone).
  NcclUpdateInfo update_info() const {
    NcclUpdateInfo u;
    u.names = names;
    u.dtype_names = dtypes;
    u.shapes = shapes;
    u.packed = false;
    return u;
  }
  //! @throws config_error naming the field ("dtypes[2]" where NcclUpdateInfo says dtype_names).
  void validate() const {
    if (group_name.empty()) throw config_error("group_name", "must not be empty");
    try {
      update_info().validate();
    } catch (const config_error& e) {
      auto f = e.field();
      if (f.rfind("dtype_names", 0) == 0) f = "dtypes" + f.substr(11);
      throw config_error(f, e.what());
    }
  }
  //! The request for `u`. @throws config_error naming the first field SGLang's request cannot
  //! carry (packing, sharding, delta, sparse counts) or is_checkpoint_format false.
  static SglangUpdateRequest from(const NcclUpdateInfo& u,
                                  std::string group_name = kSglangGroupName);

  friend bool operator==(const SglangUpdateRequest&, const SglangUpdateRequest&) = default;
};

inline SglangUpdateRequest SglangUpdateRequest::from(const NcclUpdateInfo& u, std::string group) {
  u.validate();
  const auto refuse = [](const char* key, const char* why) {
    throw config_error(key, detail::cat("SGLang's update_weights_from_distributed has no ", why));
  };
  if (u.packed.value_or(false)) refuse("packed", "packed mode (it broadcasts tensor by tensor)");
  if (u.shards || u.src_mesh_dims || u.src_placements || u.num_trainer_ranks)
    refuse(u.shards ? "shards" : (u.num_trainer_ranks ? "num_trainer_ranks" : "src_placements"),
           "sharded sends (trainer rank 0 broadcasts every tensor)");
  if (u.delta) refuse("delta", "delta syncs");
  if (u.num_updates_list) refuse("num_updates_list", "sparse updates");
  if (!u.is_checkpoint_format) refuse("is_checkpoint_format", "kernel-format load");
  SglangUpdateRequest r;
  r.names = u.names;
  r.dtypes = u.dtype_names;
  r.shapes = u.shapes;
  r.group_name = std::move(group);
  return r;
}

namespace detail {
//! SGLang's strict reader: the message names the key and "SGLang".
inline JsonObject sglang_object(const nlohmann::json& j, const char* what,
                                std::initializer_list<std::string_view> keys) {
  if (j.is_object())
    for (auto it = j.begin(); it != j.end(); ++it) {
      bool known = false;
      for (auto k : keys) known = known || k == it.key();
      if (!known)
        throw config_error(it.key(), cat("unknown key in SGLang's ", what, " (SGLang has no '",
                                         it.key(), "' there)"));
    }
  return JsonObject(j, cat("SGLang's ", what), keys);
}
inline std::optional<std::string> opt_string(const JsonObject& o, const char* key) {
  if (auto* x = o.optional(key)) return json_string(*x, key);
  return std::nullopt;
}
}  // namespace detail

//! Every field, None as null; rid only when set.
inline void to_json(nlohmann::json& j, const SglangInitGroupRequest& v) {
  j = {{"master_address", v.master_address}, {"master_port", v.master_port},
       {"rank_offset", v.rank_offset},       {"world_size", v.world_size},
       {"group_name", v.group_name},         {"backend", v.backend}};
  if (v.rid) j["rid"] = *v.rid;
}

inline void from_json(const nlohmann::json& j, SglangInitGroupRequest& v) {
  using namespace detail;
  const auto o = sglang_object(j, "InitWeightsUpdateGroupReqInput",
                               {"master_address", "master_port", "rank_offset", "world_size",
                                "group_name", "backend", "rid"});
  SglangInitGroupRequest r;
  r.master_address = json_string(o.required("master_address"), "master_address");
  r.master_port = static_cast<int>(json_int_in(o.required("master_port"), "master_port", 1, 65535));
  r.rank_offset = static_cast<int>(
      json_int_in(o.required("rank_offset"), "rank_offset", 0, std::numeric_limits<int>::max()));
  r.world_size = static_cast<int>(
      json_int_in(o.required("world_size"), "world_size", 1, std::numeric_limits<int>::max()));
  if (auto* x = o.optional("group_name")) r.group_name = json_string(*x, "group_name");
  if (auto* x = o.optional("backend")) r.backend = json_string(*x, "backend");
  r.rid = opt_string(o, "rid");
  r.validate();
  v = std::move(r);
}

inline void to_json(nlohmann::json& j, const SglangUpdateRequest& v) {
  const auto opt = [](const auto& o) { return o ? nlohmann::json(*o) : nlohmann::json(); };
  j = {{"names", v.names},
       {"dtypes", v.dtypes},
       {"shapes", v.shapes},
       {"group_name", v.group_name},
       {"flush_cache", v.flush_cache},
       {"abort_all_requests", v.abort_all_requests},
       {"weight_version", opt(v.weight_version)},
       {"load_format", opt(v.load_format)},
       {"torch_empty_cache", v.torch_empty_cache}};
  if (v.rid) j["rid"] = *v.rid;
}

inline void from_json(const nlohmann::json& j, SglangUpdateRequest& v) {
  using namespace detail;
  const auto o =
      sglang_object(j, "UpdateWeightsFromDistributedReqInput",
                    {"names", "dtypes", "shapes", "group_name", "flush_cache", "abort_all_requests",
                     "weight_version", "load_format", "torch_empty_cache", "rid"});
  SglangUpdateRequest r;
  const auto& n = o.required("names");
  require_array(n, "names");
  for (std::size_t i = 0; i < n.size(); ++i)
    r.names.push_back(json_string(n[i], cat("names[", i, "]")));
  const auto& d = o.required("dtypes");
  require_array(d, "dtypes");
  for (std::size_t i = 0; i < d.size(); ++i)
    r.dtypes.push_back(json_string(d[i], cat("dtypes[", i, "]")));
  const auto& sh = o.required("shapes");
  require_array(sh, "shapes");
  for (std::size_t i = 0; i < sh.size(); ++i)
    r.shapes.push_back(json_ints(sh[i], cat("shapes[", i, "]"), 0));
  if (auto* x = o.optional("group_name")) r.group_name = json_string(*x, "group_name");
  if (auto* x = o.optional("flush_cache")) r.flush_cache = json_bool(*x, "flush_cache");
  if (auto* x = o.optional("abort_all_requests"))
    r.abort_all_requests = json_bool(*x, "abort_all_requests");
  r.weight_version = opt_string(o, "weight_version");
  r.load_format = opt_string(o, "load_format");
  if (auto* x = o.optional("torch_empty_cache"))
    r.torch_empty_cache = json_bool(*x, "torch_empty_cache");
  r.rid = opt_string(o, "rid");
  r.validate();
  v = std::move(r);
}

}  // namespace weightsync
