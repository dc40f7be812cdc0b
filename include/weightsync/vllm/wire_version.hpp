// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! WireVersion: which engine's weight-transfer JSON a trainer or a server speaks, chosen by the
//! caller (vllm/wire.hpp writes and reads each one strictly). vLLM moved the packing parameters
//! from the update info to the init info in v0.28 (vllm-project/vllm#50902); SGLang has its own
//! routes (init_weights_update_group, update_weights_from_distributed). This header needs no JSON
//! library.

#include <optional>
#include <string_view>

namespace weightsync {

//! Which engine's weight-transfer JSON to speak.
enum class WireVersion {
  //! vLLM before 0.28: NCCLWeightTransferInitInfo is {master_address, master_port, rank_offset,
  //! world_size}, all required; the update info carries packed, packed_buffer_size_bytes and
  //! packed_num_buffers (and, in the releases whose base class has it, is_checkpoint_format).
  vllm_before_0_28,
  //! vLLM 0.28 and later: the init info is keyword-only and carries the packing (and, where the
  //! release has vllm-project/vllm#53784, nccl_unique_id_b64); the update info is exactly
  //! {names, dtype_names, shapes}.
  vllm_0_28,
  //! SGLang's InitWeightsUpdateGroupReqInput and UpdateWeightsFromDistributedReqInput.
  sglang,
};

//! The newest vLLM's: what a caller gets without asking.
inline constexpr WireVersion kDefaultWireVersion = WireVersion::vllm_0_28;

//! The name an error message and a log line use ("vLLM < 0.28", "vLLM >= 0.28", "SGLang").
constexpr std::string_view wire_version_name(WireVersion v) {
  switch (v) {
    case WireVersion::vllm_before_0_28:
      return "vLLM < 0.28";
    case WireVersion::vllm_0_28:
      return "vLLM >= 0.28";
    case WireVersion::sglang:
      return "SGLang";
  }
  return "unknown wire version";
}

//! The spelling of a command-line flag or a config file ("vllm-0.27", "vllm-0.28", "sglang").
constexpr std::string_view wire_version_key(WireVersion v) {
  switch (v) {
    case WireVersion::vllm_before_0_28:
      return "vllm-0.27";
    case WireVersion::vllm_0_28:
      return "vllm-0.28";
    case WireVersion::sglang:
      return "sglang";
  }
  return "unknown";
}

//! The version a key names: wire_version_key's spellings, and "vllm" (the newest vLLM's) and
//! "vllm-legacy" (before 0.28). nullopt for anything else.
constexpr std::optional<WireVersion> parse_wire_version(std::string_view key) {
  if (key == "vllm-0.27" || key == "vllm-legacy") return WireVersion::vllm_before_0_28;
  if (key == "vllm-0.28" || key == "vllm") return WireVersion::vllm_0_28;
  if (key == "sglang") return WireVersion::sglang;
  return std::nullopt;
}

}  // namespace weightsync
