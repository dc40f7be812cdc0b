// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! NcclInitInfo / NcclUpdateInfo: the JSON a trainer sends an inference engine. Field names are
//! exactly vLLM's (NCCLWeightTransferInitInfo / NCCLWeightTransferUpdateInfo), so what a Python
//! trainer sends (`asdict(info)`, with or without its None values) is accepted as is.
//! Parsing is strict: unknown keys, wrong JSON types, missing keys and out-of-range values throw
//! config_error naming the field. JSON null means "absent" (Python's None).

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "weightsync/detail/base64.hpp"
#include "weightsync/detail/format.hpp"
#include "weightsync/detail/json_read.hpp"
#include "weightsync/dtype.hpp"
#include "weightsync/error.hpp"
#include "weightsync/tensor_meta.hpp"

namespace weightsync {

//! vLLM's DEFAULT_PACKED_BUFFER_SIZE_BYTES (1 GiB).
inline constexpr std::int64_t kDefaultPackedBufferSizeBytes = std::int64_t{1} << 30;
//! vLLM's DEFAULT_PACKED_NUM_BUFFERS.
inline constexpr int kDefaultPackedNumBuffers = 2;
//! Upper bound on packed_num_buffers.
inline constexpr int kMaxPackedNumBuffers = 8;
//! Size of an ncclUniqueId (NCCL_UNIQUE_ID_BYTES).
inline constexpr std::size_t kNcclUniqueIdBytes = 128;

namespace detail {
inline void check_port(std::int64_t v) {
  if (v < 1 || v > 65535) throw config_error("master_port", cat("must be in 1..65535, got ", v));
}
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
    p.packed_buffer_size_bytes = json_int_in(*x, "packed_buffer_size_bytes", 1,
                                             std::numeric_limits<std::int64_t>::max());
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
    throw config_error("nccl_unique_id_b64",
                       detail::cat("must decode to ", kNcclUniqueIdBytes, " bytes, got ",
                                   bytes->size()));
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
    if (world_size < 1) throw config_error("world_size", detail::cat("must be >= 1, got ", world_size));
    if (rank_offset < 0)
      throw config_error("rank_offset", detail::cat("must be >= 0, got ", rank_offset));
    if (rank_offset >= world_size)
      throw config_error("rank_offset", detail::cat("must be < world_size (", world_size, "), got ",
                                                    rank_offset));
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

  friend bool operator==(const NcclInitInfo&, const NcclInitInfo&) = default;
};

//! What one weight update carries: the ordered tensor list, and optionally the packing settings
//! (which then override the init values for this update).
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
          throw config_error(detail::cat("shapes[", i, "][", d, "]"),
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
  }

  friend bool operator==(const NcclUpdateInfo&, const NcclUpdateInfo&) = default;

 private:
  void check_lengths() const {
    if (dtype_names.size() != names.size())
      throw config_error("dtype_names", detail::cat("has ", dtype_names.size(),
                                                    " entries but names has ", names.size()));
    if (shapes.size() != names.size())
      throw config_error("shapes", detail::cat("has ", shapes.size(), " entries but names has ",
                                               names.size()));
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
}

inline void from_json(const nlohmann::json& j, NcclUpdateInfo& v) {
  using namespace detail;
  JsonObject o(j, "update_info",
               {"names", "dtype_names", "shapes", "packed", "packed_buffer_size_bytes",
                "packed_num_buffers", "is_checkpoint_format"});
  NcclUpdateInfo r;
  const auto& names = o.required("names");
  require_array(names, "names");
  for (std::size_t i = 0; i < names.size(); ++i)
    r.names.push_back(json_string(names[i], cat("names[", i, "]")));
  const auto& dts = o.required("dtype_names");
  require_array(dts, "dtype_names");
  for (std::size_t i = 0; i < dts.size(); ++i)
    r.dtype_names.push_back(json_string(dts[i], cat("dtype_names[", i, "]")));
  const auto& shapes = o.required("shapes");
  require_array(shapes, "shapes");
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const auto& s = shapes[i];
    require_array(s, cat("shapes[", i, "]"));
    std::vector<std::int64_t> shape;
    for (std::size_t d = 0; d < s.size(); ++d)
      shape.push_back(json_int_in(s[d], cat("shapes[", i, "][", d, "]"), 0,
                                  std::numeric_limits<std::int64_t>::max()));
    r.shapes.push_back(std::move(shape));
  }
  const auto p = read_packing(o);
  r.packed = p.packed;
  r.packed_buffer_size_bytes = p.packed_buffer_size_bytes;
  r.packed_num_buffers = p.packed_num_buffers;
  if (auto* x = o.optional("is_checkpoint_format"))
    r.is_checkpoint_format = json_bool(*x, "is_checkpoint_format");
  r.validate();
  v = std::move(r);
}

}  // namespace weightsync
