// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The reference model layouts of the benchmarks and GPU tests (bf16), and a synthetic one.
//! dense8b (399 tensors, 16.38 GB), moe30b (18 867 tensors, 61.06 GB), small1b (310 tensors,
//! 1.19 GB), lora8b (504 tensors, 87 MB).

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "weightsync/detail/format.hpp"
#include "weightsync/error.hpp"
#include "weightsync/tensor_meta.hpp"

namespace weightsync::layouts {

namespace detail {
inline void add(std::vector<TensorMeta>& v, std::string name, std::vector<std::int64_t> shape) {
  v.push_back(TensorMeta{std::move(name), DType::bfloat16, std::move(shape)});
}
//! A Qwen3-style decoder: attention, optional dense MLP or experts, norms.
inline std::vector<TensorMeta> decoder(std::int64_t vocab, std::int64_t hidden, int layers,
                                       std::int64_t q_out, std::int64_t kv_out, std::int64_t o_in,
                                       std::int64_t mlp, int experts, std::int64_t expert_mlp,
                                       bool lm_head) {
  using weightsync::detail::cat;
  std::vector<TensorMeta> v;
  add(v, "model.embed_tokens.weight", {vocab, hidden});
  for (int l = 0; l < layers; ++l) {
    const std::string p = cat("model.layers.", l, ".");
    add(v, p + "self_attn.q_proj.weight", {q_out, hidden});
    add(v, p + "self_attn.k_proj.weight", {kv_out, hidden});
    add(v, p + "self_attn.v_proj.weight", {kv_out, hidden});
    add(v, p + "self_attn.o_proj.weight", {hidden, o_in});
    add(v, p + "self_attn.q_norm.weight", {128});
    add(v, p + "self_attn.k_norm.weight", {128});
    if (experts == 0) {
      add(v, p + "mlp.gate_proj.weight", {mlp, hidden});
      add(v, p + "mlp.up_proj.weight", {mlp, hidden});
      add(v, p + "mlp.down_proj.weight", {hidden, mlp});
    } else {
      add(v, p + "mlp.gate.weight", {experts, hidden});
      for (int e = 0; e < experts; ++e) {
        const std::string q = cat(p, "mlp.experts.", e, ".");
        add(v, q + "gate_proj.weight", {expert_mlp, hidden});
        add(v, q + "up_proj.weight", {expert_mlp, hidden});
        add(v, q + "down_proj.weight", {hidden, expert_mlp});
      }
    }
    add(v, p + "input_layernorm.weight", {hidden});
    add(v, p + "post_attention_layernorm.weight", {hidden});
  }
  add(v, "model.norm.weight", {hidden});
  if (lm_head) add(v, "lm_head.weight", {vocab, hidden});
  return v;
}
}  // namespace detail

//! 8B dense: 36 layers, hidden 4096. 399 tensors, 16 384 000 000-odd bytes.
inline std::vector<TensorMeta> dense8b() {
  return detail::decoder(151936, 4096, 36, 4096, 1024, 4096, 12288, 0, 0, true);
}

//! 30B mixture of experts: 48 layers of 128 experts, hidden 2048. 18 867 tensors.
inline std::vector<TensorMeta> moe30b() {
  return detail::decoder(151936, 2048, 48, 4096, 512, 4096, 0, 128, 768, true);
}

//! 1B dense with tied embeddings: 28 layers, hidden 1024. 310 tensors.
inline std::vector<TensorMeta> small1b() {
  return detail::decoder(151936, 1024, 28, 2048, 1024, 2048, 3072, 0, 0, false);
}

//! Rank-16 LoRA adapters of dense8b's 7 projections. 504 tensors.
inline std::vector<TensorMeta> lora8b() {
  using weightsync::detail::cat;
  struct Proj {
    const char* name;
    std::int64_t in, out;
  };
  const Proj projs[] = {{"self_attn.q_proj", 4096, 4096}, {"self_attn.k_proj", 4096, 1024},
                        {"self_attn.v_proj", 4096, 1024}, {"self_attn.o_proj", 4096, 4096},
                        {"mlp.gate_proj", 4096, 12288},   {"mlp.up_proj", 4096, 12288},
                        {"mlp.down_proj", 12288, 4096}};
  std::vector<TensorMeta> v;
  for (int l = 0; l < 36; ++l)
    for (const auto& p : projs) {
      const std::string base = cat("model.layers.", l, ".", p.name, ".");
      detail::add(v, base + "lora_A.weight", {16, p.in});
      detail::add(v, base + "lora_B.weight", {p.out, 16});
    }
  return v;
}

//! `count` bf16 tensors of `bytes` bytes each (bytes must be even).
inline std::vector<TensorMeta> synthetic(std::size_t count, std::size_t bytes) {
  if (bytes % 2) throw config_error("bytes", "a bf16 tensor has an even byte count");
  std::vector<TensorMeta> v;
  for (std::size_t i = 0; i < count; ++i)
    detail::add(v, weightsync::detail::cat("t", i), {static_cast<std::int64_t>(bytes / 2)});
  return v;
}

//! The fixed cost of one sync: one bf16 tensor of 4 KiB.
inline std::vector<TensorMeta> tiny() {
  return synthetic(1, 4096);
}

//! The per-tensor cost: 504 bf16 tensors of 64 B (lora8b's tensor count, 32 KiB in all).
inline std::vector<TensorMeta> tiny504() {
  return synthetic(504, 64);
}

//! Names accepted by by_name().
inline constexpr std::string_view kNames[] = {"dense8b", "moe30b", "small1b",
                                              "lora8b",  "tiny",   "tiny504"};

//! A layout by name: dense8b, moe30b, small1b, lora8b, tiny, tiny504, or
//! synthetic:COUNTxBYTES (e.g. synthetic:512x2097152).
inline std::vector<TensorMeta> by_name(std::string_view name) {
  if (name == "tiny") return tiny();
  if (name == "tiny504") return tiny504();
  if (name == "dense8b") return dense8b();
  if (name == "moe30b") return moe30b();
  if (name == "small1b") return small1b();
  if (name == "lora8b") return lora8b();
  if (name.starts_with("synthetic:")) {
    const std::string spec(name.substr(10));
    const auto x = spec.find('x');
    try {
      if (x != std::string::npos)
        return synthetic(std::stoull(spec.substr(0, x)), std::stoull(spec.substr(x + 1)));
    } catch (const std::logic_error&) {
    }
    throw config_error("layout", "synthetic layouts are written synthetic:<count>x<bytes>, got '" +
                                     std::string(name) + "'");
  }
  throw config_error("layout", "unknown layout '" + std::string(name) +
                                   "' (known: dense8b, moe30b, small1b, lora8b, tiny, tiny504, "
                                   "synthetic:<count>x<bytes>)");
}

inline std::size_t total_bytes(const std::vector<TensorMeta>& metas) {
  std::size_t n = 0;
  for (const auto& m : metas) n += m.nbytes();
  return n;
}

}  // namespace weightsync::layouts
