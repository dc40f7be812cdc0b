// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! vLLM's M2N init info, schema version 2 (vllm-project/vllm#51520 line: m2n_engine.py's
//! keyword-only M2NWeightTransferInitInfo, m2n_common.py's M2NWireParam and source_plan_digest):
//! the rendezvous, `params` (per tensor name, dtype_name, shape and its own src_mesh_dims and
//! src_placements), and `source_digest`, the SHA-256 of Python's
//! `json.dumps({"schema_version": 2, "params": [...]}, sort_keys=True, separators=(",", ":"))`,
//! computed here byte for byte (m2n_source_digest). Updates are M2NUpdateInfo (names only), as in
//! schema 1, whose M2NInitInfo (vllm/m2n_info.hpp) is still read.

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "weightsync/detail/format.hpp"
#include "weightsync/detail/json_read.hpp"
#include "weightsync/engine/adapter.hpp"
#include "weightsync/engine/init_request.hpp"
#include "weightsync/error.hpp"
#include "weightsync/shard.hpp"
#include "weightsync/vllm/detail/py_json.hpp"
#include "weightsync/vllm/detail/sha256.hpp"
#include "weightsync/vllm/detail/shard_json.hpp"
#include "weightsync/vllm/init_info.hpp"
#include "weightsync/vllm/m2n_info.hpp"
#include "weightsync/vllm/update_info.hpp"

namespace weightsync {

//! M2N_WIRE_SCHEMA_VERSION of the init info this header speaks.
inline constexpr int kM2NSchemaVersion = 2;

//! One M2NWireParam: a tensor and how the trainer holds it. src_mesh_dims is this tensor's
//! factorization [a, b] of the rank_offset trainer ranks (rank i * b + j); src_placements null
//! (replicated) or one code per mesh axis (-1 replicate, d >= 0 shard tensor dim d; exactly one
//! axis shards, evenly).
struct M2NParam {
  std::string name;
  std::string dtype_name;
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> src_mesh_dims;
  std::optional<std::vector<std::int64_t>> src_placements;

  friend bool operator==(const M2NParam&, const M2NParam&) = default;
};

inline nlohmann::json m2n_param_json(const M2NParam& p) {
  return {
      {"name", p.name},
      {"dtype_name", p.dtype_name},
      {"shape", p.shape},
      {"src_mesh_dims", p.src_mesh_dims},
      {"src_placements", p.src_placements ? nlohmann::json(*p.src_placements) : nlohmann::json()}};
}

//! source_plan_digest: SHA-256 (hex) of the Python json.dumps of {"schema_version", "params"}.
//! @throws config_error("params[i].name") for a name that is not valid UTF-8.
inline std::string m2n_source_digest(std::span<const M2NParam> params,
                                     int schema_version = kM2NSchemaVersion) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& p : params) a.push_back(m2n_param_json(p));
  const nlohmann::json plan = {{"schema_version", schema_version}, {"params", std::move(a)}};
  return detail::sha256_hex(detail::py_json_dumps(plan));
}

//! vLLM's M2NWeightTransferInitInfo, schema 2. master_address and master_port are the metadata
//! rendezvous and always given; nccl_unique_id_b64, when given, is the NCCL data plane's.
struct M2NInitInfoV2 {
  int schema_version = kM2NSchemaVersion;
  std::string master_address;
  int master_port = 0;
  int rank_offset = 1;  //!< the trainer ranks (M); the destination mesh starts here
  int world_size = 2;
  std::vector<std::int64_t> dst_mesh_dims;
  std::string source_digest;
  std::vector<M2NParam> params;
  std::optional<int> worker_rank_offset;  //!< this deployment's first rank (several deployments)
  std::optional<std::string> nccl_unique_id_b64;
  std::optional<int> max_cta;

  //! Sets source_digest from params (a trainer calls it after filling params).
  M2NInitInfoV2& seal() {
    source_digest = m2n_source_digest(params, schema_version);
    return *this;
  }

  //! The rank this deployment's first worker has: worker_rank_offset, else rank_offset.
  int first_worker_rank() const { return worker_rank_offset.value_or(rank_offset); }

  //! How this library joins the group: the unique id when given (vLLM's data plane), else
  //! master_address/master_port; the packing defaults.
  NcclInitInfo rendezvous() const {
    NcclInitInfo r;
    if (nccl_unique_id_b64) {
      r.nccl_unique_id_b64 = nccl_unique_id_b64;
    } else {
      r.master_address = master_address;
      r.master_port = master_port;
    }
    r.rank_offset = first_worker_rank();
    r.world_size = world_size;
    return r;
  }

  //! Every tensor in declared order as a sharded update: each its own ShardSpec
  //! (shard_spec_from_m2n over its own mesh), M = rank_offset trainer ranks.
  NcclUpdateInfo plan() const {
    NcclUpdateInfo u;
    u.shards.emplace();
    for (std::size_t i = 0; i < params.size(); ++i) {
      const auto& p = params[i];
      u.names.push_back(p.name);
      u.dtype_names.push_back(p.dtype_name);
      u.shapes.push_back(p.shape);
      const auto s = shard_spec_from_m2n(p.src_mesh_dims, p.src_placements,
                                         detail::cat("params[", i, "].src_placements"));
      u.shards->push_back(s == ShardSpec{} ? std::nullopt : std::optional<ShardSpec>(s));
    }
    u.num_trainer_ranks = rank_offset;
    return u;
  }

  //! vLLM's checks (__post_init__, parse_wire_params, validate_layout) and the digest.
  //! @throws config_error naming the first field at fault ("params[2].shape", "source_digest").
  void validate() const;

  friend bool operator==(const M2NInitInfoV2&, const M2NInitInfoV2&) = default;
};

namespace detail {
inline void check_m2n_param(const M2NParam& p, std::size_t i, int trainer_ranks) {
  const auto f = [&](const char* key) { return cat("params[", i, "].", key); };
  if (p.name.empty()) throw config_error(f("name"), "must not be empty");
  if (p.dtype_name.empty()) throw config_error(f("dtype_name"), "must not be empty");
  try {
    (void)parse_dtype(p.dtype_name);
  } catch (const config_error&) {
    throw config_error(f("dtype_name"),
                       cat("unknown dtype '", p.dtype_name, "' for '", p.name, "'"));
  }
  if (p.shape.empty()) throw config_error(f("shape"), "must not be empty (M2N moves no scalars)");
  for (std::size_t d = 0; d < p.shape.size(); ++d)
    if (p.shape[d] < 1)
      throw config_error(cat(f("shape"), "[", d, "]"), cat("must be positive, got ", p.shape[d]));
  if (m2n_mesh_size(p.src_mesh_dims, f("src_mesh_dims")) != trainer_ranks)
    throw config_error(
        f("src_mesh_dims"),
        cat("'", p.name, "': the mesh covers ", p.src_mesh_dims[0] * p.src_mesh_dims[1],
            " ranks, but there are ", trainer_ranks, " trainer ranks (rank_offset)"));
  const auto s = shard_spec_from_m2n(p.src_mesh_dims, p.src_placements, f("src_placements"));
  if (!s.split()) return;
  const auto dim = static_cast<std::size_t>(s.dim);
  if (dim >= p.shape.size())
    throw config_error(f("src_placements"),
                       cat("'", p.name, "' has ", p.shape.size(), " dims; cannot shard dim ", dim));
  if (p.shape[dim] % static_cast<std::int64_t>(s.ranks.size()) != 0)
    throw config_error(f("src_placements"),
                       cat("'", p.name, "': dim ", dim, " (size ", p.shape[dim], ") over ",
                           s.ranks.size(), " ranks does not divide evenly"));
}
}  // namespace detail

inline void M2NInitInfoV2::validate() const {
  if (schema_version != kM2NSchemaVersion)
    throw config_error("schema_version",
                       detail::cat("unsupported nccl_m2n init schema version ", schema_version,
                                   "; expected ", kM2NSchemaVersion));
  if (master_address.empty()) throw config_error("master_address", "must not be empty");
  detail::check_port(master_port);
  if (rank_offset < 1 || rank_offset >= world_size)
    throw config_error("rank_offset", detail::cat("must leave at least one trainer rank and one "
                                                  "worker in world_size ",
                                                  world_size, ", got ", rank_offset));
  if (worker_rank_offset &&
      (*worker_rank_offset < rank_offset || *worker_rank_offset >= world_size))
    throw config_error("worker_rank_offset",
                       detail::cat("must lie in [", rank_offset, ", ", world_size, "), got ",
                                   *worker_rank_offset));
  const int workers = world_size - rank_offset;
  if (m2n_mesh_size(dst_mesh_dims, "dst_mesh_dims") != workers)
    throw config_error("dst_mesh_dims", detail::cat("must cover the ", workers, " workers, got ",
                                                    dst_mesh_dims[0], " x ", dst_mesh_dims[1]));
  if (nccl_unique_id_b64) (void)decode_unique_id_b64(*nccl_unique_id_b64);
  if (max_cta && *max_cta < 1)
    throw config_error("max_cta", detail::cat("must be >= 1, got ", *max_cta));
  std::unordered_map<std::string_view, std::size_t> seen;
  for (std::size_t i = 0; i < params.size(); ++i) {
    detail::check_m2n_param(params[i], i, rank_offset);
    if (const auto [it, fresh] = seen.emplace(params[i].name, i); !fresh)
      throw config_error(
          detail::cat("params[", i, "].name"),
          detail::cat("'", params[i].name, "' is declared twice (also params[", it->second, "])"));
  }
  const auto digest = m2n_source_digest(params, schema_version);
  if (digest != source_digest)
    throw config_error("source_digest",
                       "does not match params: computed " + digest + ", declared " + source_digest);
}

//! The engines' InitRequest: the rendezvous (rendezvous()), M = rank_offset trainer ranks, the
//! plan. @throws config_error as validate() does.
inline InitRequest to_init_request(const M2NInitInfoV2& info, InitContext c) {
  info.validate();
  InitRequest r = to_init_request(info.rendezvous(), c);
  r.trainer_ranks = info.rank_offset;
  r.plan = to_update_request(info.plan(), UpdateContext{});
  return r;
}

//! Every field, None as null (asdict).
inline void to_json(nlohmann::json& j, const M2NInitInfoV2& v) {
  const auto opt = [](const auto& o) { return o ? nlohmann::json(*o) : nlohmann::json(); };
  nlohmann::json params = nlohmann::json::array();
  for (const auto& p : v.params) params.push_back(m2n_param_json(p));
  j = {{"schema_version", v.schema_version},
       {"master_address", v.master_address},
       {"master_port", v.master_port},
       {"rank_offset", v.rank_offset},
       {"world_size", v.world_size},
       {"dst_mesh_dims", v.dst_mesh_dims},
       {"source_digest", v.source_digest},
       {"params", std::move(params)},
       {"worker_rank_offset", opt(v.worker_rank_offset)},
       {"nccl_unique_id_b64", opt(v.nccl_unique_id_b64)},
       {"max_cta", opt(v.max_cta)}};
}

namespace detail {
inline M2NParam read_m2n_param(const nlohmann::json& j, std::size_t i) {
  const auto f = cat("params[", i, "]");
  JsonObject o(j, f, {"name", "dtype_name", "shape", "src_mesh_dims", "src_placements"});
  M2NParam p;
  p.name = json_string(o.required("name"), f + ".name");
  p.dtype_name = json_string(o.required("dtype_name"), f + ".dtype_name");
  p.shape = json_ints(o.required("shape"), f + ".shape", 1);
  p.src_mesh_dims = json_ints(o.required("src_mesh_dims"), f + ".src_mesh_dims", 1);
  const auto it = j.find("src_placements");
  if (it == j.end()) throw config_error(f + ".src_placements", "missing required key in " + f);
  if (!it->is_null()) p.src_placements = json_ints(*it, f + ".src_placements", -1);
  return p;
}
}  // namespace detail

//! Strict parse (vLLM's keys only), then validate(), the digest included.
inline void from_json(const nlohmann::json& j, M2NInitInfoV2& v) {
  using namespace detail;
  JsonObject o(j, "M2N init_info (schema 2)",
               {"schema_version", "master_address", "master_port", "rank_offset", "world_size",
                "dst_mesh_dims", "source_digest", "params", "worker_rank_offset",
                "nccl_unique_id_b64", "max_cta"});
  constexpr auto most = std::numeric_limits<int>::max();
  M2NInitInfoV2 r;
  r.schema_version = static_cast<int>(json_int_in(o.required("schema_version"), "schema_version",
                                                  std::numeric_limits<int>::min(), most));
  r.master_address = json_string(o.required("master_address"), "master_address");
  r.master_port = static_cast<int>(json_int_in(o.required("master_port"), "master_port", 1, 65535));
  r.rank_offset = static_cast<int>(json_int_in(o.required("rank_offset"), "rank_offset", 1, most));
  r.world_size = static_cast<int>(json_int_in(o.required("world_size"), "world_size", 2, most));
  r.dst_mesh_dims = json_ints(o.required("dst_mesh_dims"), "dst_mesh_dims", 1);
  r.source_digest = json_string(o.required("source_digest"), "source_digest");
  const auto& ps = o.required("params");
  require_array(ps, "params");
  for (std::size_t i = 0; i < ps.size(); ++i) r.params.push_back(read_m2n_param(ps[i], i));
  if (auto* x = o.optional("worker_rank_offset"))
    r.worker_rank_offset = static_cast<int>(json_int_in(*x, "worker_rank_offset", 0, most));
  if (auto* x = o.optional("nccl_unique_id_b64"))
    r.nccl_unique_id_b64 = json_string(*x, "nccl_unique_id_b64");
  if (auto* x = o.optional("max_cta"))
    r.max_cta = static_cast<int>(json_int_in(*x, "max_cta", 1, most));
  r.validate();
  v = std::move(r);
}

//! Schema 1 (M2NInitInfo) as schema 2: each tensor gets the shared mesh; sealed.
inline M2NInitInfoV2 to_m2n_v2(const M2NInitInfo& v1) {
  v1.validate();
  M2NInitInfoV2 v2;
  v2.master_address = v1.master_address.value_or("");
  v2.master_port = v1.master_port.value_or(0);
  v2.rank_offset = v1.rank_offset;
  v2.world_size = v1.world_size;
  v2.dst_mesh_dims = v1.dst_mesh_dims;
  for (std::size_t i = 0; i < v1.names.size(); ++i)
    v2.params.push_back(
        {v1.names[i], v1.dtype_names[i], v1.shapes[i], v1.src_mesh_dims, v1.src_placements[i]});
  v2.nccl_unique_id_b64 = v1.nccl_unique_id_b64;
  v2.max_cta = v1.max_cta;
  v2.seal();
  return v2;
}

}  // namespace weightsync
