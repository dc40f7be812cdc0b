// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The init and update info JSON of one engine version (WireVersion), written and read strictly:
//! write_init_info / read_init_info, write_update_info / read_update_info. One key table per
//! version drives both the writer's check and the reader's: a key the version does not have is a
//! config_error naming the key and the version, whichever side meets it.
//!
//! The tables follow the upstream dataclasses field for field (tests/golden/README.md names the
//! commits):
//! - vLLM < 0.28: NCCLWeightTransferInitInfo(master_address: str, master_port: int,
//!   rank_offset: int, world_size: int), all required; NCCLWeightTransferUpdateInfo(names,
//!   dtype_names, shapes, packed: bool = False, packed_buffer_size_bytes: int = 1 GiB,
//!   packed_num_buffers: int = 2, *, is_checkpoint_format: bool = True).
//! - vLLM >= 0.28: @dataclass(kw_only=True) NCCLWeightTransferInitInfo(master_address: str | None
//!   = None, master_port: int | None = None, rank_offset: int, world_size: int,
//!   nccl_unique_id_b64: str | None = None, packed: bool = False, packed_buffer_size_bytes,
//!   packed_num_buffers), sent without its None values (worker_init_payload);
//!   NCCLWeightTransferUpdateInfo(names, dtype_names, shapes) and nothing else.
//! - SGLang: vllm/sglang.hpp's requests.
//! The version-free to_json / from_json of vllm/json.hpp stay this library's own superset (its
//! shards, delta and sparse fields), which its own server reads.

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "weightsync/detail/format.hpp"
#include "weightsync/error.hpp"
#include "weightsync/vllm/init_info.hpp"
#include "weightsync/vllm/json.hpp"
#include "weightsync/vllm/sglang.hpp"
#include "weightsync/vllm/update_info.hpp"
#include "weightsync/vllm/wire_version.hpp"

namespace weightsync {

namespace detail {

//! One key of a version's dataclass: whether it must be given, and whether None (null) is allowed.
struct WireKey {
  std::string_view key;
  bool required;
  bool nullable;
};
using WireKeys = std::span<const WireKey>;

inline WireKeys init_keys(WireVersion v) {
  static constexpr WireKey before[] = {{"master_address", true, false},
                                       {"master_port", true, false},
                                       {"rank_offset", true, false},
                                       {"world_size", true, false}};
  static constexpr WireKey since[] = {{"master_address", false, true},
                                      {"master_port", false, true},
                                      {"rank_offset", true, false},
                                      {"world_size", true, false},
                                      {"nccl_unique_id_b64", false, true},
                                      {"packed", false, false},
                                      {"packed_buffer_size_bytes", false, false},
                                      {"packed_num_buffers", false, false}};
  if (v == WireVersion::vllm_before_0_28) return before;
  return since;
}

inline WireKeys update_keys(WireVersion v) {
  static constexpr WireKey before[] = {{"names", true, false},
                                       {"dtype_names", true, false},
                                       {"shapes", true, false},
                                       {"packed", false, false},
                                       {"packed_buffer_size_bytes", false, false},
                                       {"packed_num_buffers", false, false},
                                       {"is_checkpoint_format", false, false}};
  static constexpr WireKey since[] = {
      {"names", true, false}, {"dtype_names", true, false}, {"shapes", true, false}};
  if (v == WireVersion::vllm_before_0_28) return before;
  return since;
}

inline const WireKey* find_key(WireKeys keys, std::string_view k) {
  for (const auto& w : keys)
    if (w.key == k) return &w;
  return nullptr;
}

inline bool packing_key(std::string_view k) {
  return k == "packed" || k == "packed_buffer_size_bytes" || k == "packed_num_buffers";
}

//! Why `key` is not in `what` of version `v`: the unknown-key message, with the reason where the
//! key lives elsewhere in that version.
inline std::string not_in_version(std::string_view key, std::string_view what, WireVersion v) {
  std::string m = cat("unknown key in ", what, " for ", wire_version_name(v));
  const bool init = what == "init_info";
  if (packing_key(key) && v == WireVersion::vllm_0_28 && !init)
    m += " (since vLLM 0.28 the packing rides the init info)";
  else if (packing_key(key) && v == WireVersion::vllm_before_0_28 && init)
    m += " (before vLLM 0.28 the packing rides each update info)";
  else if (key == "nccl_unique_id_b64" && v == WireVersion::vllm_before_0_28)
    m += " (the unique-id mode came with vLLM 0.28's keyword-only init info)";
  else if (key == "is_checkpoint_format" && v == WireVersion::vllm_0_28)
    m += " (vLLM >= 0.28 sets the weight format in the server's weight-transfer config)";
  return m;
}

//! The reader's check of `j` against the version's keys: an object, no unknown key, every
//! required key, null only where the dataclass says `| None`.
inline void check_wire_keys(const nlohmann::json& j, WireKeys keys, std::string_view what,
                            WireVersion v) {
  if (!j.is_object())
    throw config_error(std::string(what), cat("expected an object for ", wire_version_name(v),
                                              ", got ", json_type(j)));
  for (auto it = j.begin(); it != j.end(); ++it) {
    const auto* w = find_key(keys, it.key());
    if (!w) throw config_error(it.key(), not_in_version(it.key(), what, v));
    if (it->is_null() && !w->nullable)
      throw config_error(it.key(),
                         cat("must not be null in ", what, " for ", wire_version_name(v)));
  }
  for (const auto& w : keys)
    if (w.required && !j.contains(w.key))
      throw config_error(std::string(w.key),
                         cat("missing required key in ", what, " for ", wire_version_name(v)));
}

//! The writer's check: `j` (what this library would send) without its null (None) values holds
//! only the version's keys; a key the version lacks is an error unless `droppable` says it may
//! stay behind.
template <class Droppable>
nlohmann::json keep_wire_keys(const nlohmann::json& j, WireKeys keys, std::string_view what,
                              WireVersion v, Droppable droppable) {
  nlohmann::json out = nlohmann::json::object();
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it->is_null()) continue;  // None is not sent (worker_init_payload)
    if (find_key(keys, it.key())) {
      out[it.key()] = it.value();
    } else if (!droppable(it.key(), it.value())) {
      throw config_error(it.key(), cat("cannot be sent: ", not_in_version(it.key(), what, v)));
    }
  }
  check_wire_keys(out, keys, what, v);
  return out;
}

}  // namespace detail

//! The init info JSON `v` takes (POST /init_weight_transfer_engine {"init_info": ...}, or
//! SGLang's POST /init_weights_update_group body). vLLM >= 0.28: every field but the None ones;
//! vLLM < 0.28: the four rendezvous fields (the packing then rides each update: pass the same
//! info to write_update_info); SGLang: SglangInitGroupRequest::from(info).
//! @throws config_error naming the field the version cannot carry (a unique id before 0.28 or
//!   for SGLang; packing for SGLang), or as info.validate() does.
inline nlohmann::json write_init_info(const NcclInitInfo& info,
                                      WireVersion v = kDefaultWireVersion) {
  info.validate();
  if (v == WireVersion::sglang) return SglangInitGroupRequest::from(info);
  const nlohmann::json all = info;
  return detail::keep_wire_keys(
      all, detail::init_keys(v), "init_info", v, [&](const std::string& k, const nlohmann::json&) {
        return v == WireVersion::vllm_before_0_28 && detail::packing_key(k);
      });
}

//! Reads the init info JSON of version `v`, strictly. @throws config_error naming the key and
//! the version (unknown, missing, null where the dataclass has no None), or the field at fault.
inline NcclInitInfo read_init_info(const nlohmann::json& j, WireVersion v = kDefaultWireVersion) {
  if (v == WireVersion::sglang) return j.get<SglangInitGroupRequest>().init_info();
  detail::check_wire_keys(j, detail::init_keys(v), "init_info", v);
  return j.get<NcclInitInfo>();
}

//! The update info JSON `v` takes (POST /update_weights {"update_info": ...}, or SGLang's POST
//! /update_weights_from_distributed body). vLLM >= 0.28: exactly {names, dtype_names, shapes},
//! and a packing override must equal `init`'s; vLLM < 0.28: also the packing (the override, else
//! `init`'s, else the defaults) and is_checkpoint_format when false; SGLang:
//! SglangUpdateRequest::from(u). @throws config_error naming the first field the version cannot
//! carry (this library's shards, delta, num_trainer_ranks, sparse counts, M2N fields; a packing
//! that differs from the init's on vLLM >= 0.28), or as u.validate() does.
inline nlohmann::json write_update_info(const NcclUpdateInfo& u,
                                        WireVersion v = kDefaultWireVersion,
                                        const NcclInitInfo* init = nullptr) {
  u.validate();
  if (v == WireVersion::sglang) return SglangUpdateRequest::from(u);
  NcclUpdateInfo w = u;
  const Packing base = init ? init->packing() : NcclInitInfo{}.packing();
  if (v == WireVersion::vllm_before_0_28) {
    w.packed = u.packed.value_or(base.packed);
    w.packed_buffer_size_bytes = u.packed_buffer_size_bytes.value_or(base.buffer_size_bytes);
    w.packed_num_buffers = u.packed_num_buffers.value_or(base.num_buffers);
  }
  const bool init_packing =
      init && u.packed.value_or(base.packed) == base.packed &&
      u.packed_buffer_size_bytes.value_or(base.buffer_size_bytes) == base.buffer_size_bytes &&
      u.packed_num_buffers.value_or(base.num_buffers) == base.num_buffers;
  nlohmann::json all = w;
  if (w.is_checkpoint_format) all.erase("is_checkpoint_format");  // the default: not sent
  return detail::keep_wire_keys(all, detail::update_keys(v), "update_info", v,
                                [&](const std::string& k, const nlohmann::json&) {
                                  return v == WireVersion::vllm_0_28 && detail::packing_key(k) &&
                                         init_packing;
                                });
}

//! Reads the update info JSON of version `v`, strictly (SGLang's: SglangUpdateRequest, as not
//! packed). @throws config_error naming the key and the version, or the field at fault.
inline NcclUpdateInfo read_update_info(const nlohmann::json& j,
                                       WireVersion v = kDefaultWireVersion) {
  if (v == WireVersion::sglang) return j.get<SglangUpdateRequest>().update_info();
  detail::check_wire_keys(j, detail::update_keys(v), "update_info", v);
  return j.get<NcclUpdateInfo>();
}

}  // namespace weightsync
