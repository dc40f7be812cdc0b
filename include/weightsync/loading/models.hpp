// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Ready-made LoadMaps from HuggingFace names to vLLM's parameters for Llama, Qwen2, Qwen3 and
//! Qwen3-MoE style models: q/k/v fused into qkv_proj (q rows, then k, then v, each this rank's
//! heads; kv heads replicated when fewer than the TP size), gate/up fused into gate_up_proj,
//! per-expert gate/up/down stacked into FusedMoE's w13_weight [E, 2*I/tp, H] and w2_weight
//! [E, H, I/tp], o_proj and down_proj sharded by columns, embeddings and lm_head vocab-parallel
//! (vocab padded to a multiple of 64, as vLLM pads it), norms and the router replicated.

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "weightsync/detail/format.hpp"
#include "weightsync/error.hpp"
#include "weightsync/loading/placement.hpp"
#include "weightsync/tensor_meta.hpp"

namespace weightsync {

//! The dimensions a model map needs.
struct ModelConfig {
  std::int64_t hidden = 0;            //!< hidden_size
  std::int64_t n_heads = 0;           //!< num_attention_heads
  std::int64_t n_kv_heads = 0;        //!< num_key_value_heads
  std::int64_t head_dim = 0;          //!< head_dim (hidden / n_heads when the config has none)
  std::int64_t intermediate = 0;      //!< intermediate_size (dense MLP)
  std::int64_t moe_intermediate = 0;  //!< moe_intermediate_size (0: no experts)
  std::int64_t n_experts = 0;         //!< num_experts
  std::int64_t vocab_padding = 64;    //!< vLLM's vocab padding (DEFAULT_VOCAB_PADDING_SIZE)
  //! Apply the rotary permute `w.view(n_heads, rows / n_heads / 2, 2, cols).transpose(1, 2)` to
  //! q and k (weights and biases, n_heads heads) and to q_norm / k_norm (1-D, one head over
  //! head_dim): it turns the interleaved rotary layout (Meta / torchtitan checkpoints, pairs of
  //! adjacent rows) into HF's half-split layout that vLLM's models expect. Set it for trainers
  //! whose q/k are interleaved; trainers holding HF-layout weights leave it false.
  bool permute_qk = false;
  //! tie_word_embeddings: the engine has no lm_head.weight (it reuses embed_tokens), so a trainer's
  //! lm_head.weight is skipped (Placement::skip) instead of mapping to a missing parameter.
  bool tie_word_embeddings = false;
};

//! The model families the ready-made maps know; they differ only in which tensors exist (Qwen2
//! has q/k/v biases, Qwen3 q_norm/k_norm, Qwen3-MoE experts), so one map serves all of them.
class HfToVllmMap {
 public:
  HfToVllmMap(ModelConfig cfg, TpConfig tp) : c_(cfg), tp_(tp) {
    if (tp.size < 1 || tp.rank < 0 || tp.rank >= tp.size)
      throw config_error("tp", detail::cat("rank ", tp.rank, " of ", tp.size, " is out of range"));
    if (c_.n_heads % tp.size != 0)
      throw config_error("n_heads",
                         detail::cat(c_.n_heads, " heads do not split over TP ", tp.size));
    if (c_.n_kv_heads < 1 ||
        (c_.n_kv_heads >= tp.size ? c_.n_kv_heads % tp.size : tp.size % c_.n_kv_heads) != 0)
      throw config_error("n_kv_heads",
                         detail::cat(c_.n_kv_heads, " kv heads do not fit TP ", tp.size));
  }

  std::optional<Placement> operator()(const TensorMeta& m) const {
    std::vector<std::pair<std::string, std::string>> cap;
    const auto is = [&](const char* pattern) { return NamePattern(pattern).match(m.name, cap); };
    const auto layer = [&](const char* rest) {
      return NamePattern(std::string("model.layers.{i}.") + rest).format(cap);
    };
    const std::string lp = "model.layers.{i}.";
    if (m.name == "lm_head.weight" && c_.tie_word_embeddings) {
      Placement p{m.name};
      p.skip = true;
      return p;
    }
    if (m.name == "model.embed_tokens.weight" || m.name == "lm_head.weight")
      return vocab(m, m.name);
    if (m.name == "model.norm.weight") return Placement{m.name};
    for (const char* n :
         {"input_layernorm.weight", "post_attention_layernorm.weight", "mlp.gate.weight"})
      if (is((lp + n).c_str())) return Placement{m.name};
    for (const char* n : {"self_attn.q_norm.weight", "self_attn.k_norm.weight"})
      if (is((lp + n).c_str())) {
        // Per-head norms over head_dim: interleaved like every head of q and k.
        Placement p{m.name};
        if (c_.permute_qk) p.permute_heads = 1;
        return p;
      }
    for (const char* w : {"weight", "bias"}) {
      const std::string suffix = std::string(".") + w;
      if (is((lp + "self_attn.q_proj" + suffix).c_str()))
        return qkv(m, 0, layer(("self_attn.qkv_proj" + suffix).c_str()));
      if (is((lp + "self_attn.k_proj" + suffix).c_str()))
        return qkv(m, 1, layer(("self_attn.qkv_proj" + suffix).c_str()));
      if (is((lp + "self_attn.v_proj" + suffix).c_str()))
        return qkv(m, 2, layer(("self_attn.qkv_proj" + suffix).c_str()));
    }
    if (is((lp + "self_attn.o_proj.weight").c_str())) return cols(m, m.name);
    if (is((lp + "mlp.gate_proj.weight").c_str()))
      return rows(m, layer("mlp.gate_up_proj.weight"), c_.intermediate, 0);
    if (is((lp + "mlp.up_proj.weight").c_str()))
      return rows(m, layer("mlp.gate_up_proj.weight"), c_.intermediate, 1);
    if (is((lp + "mlp.down_proj.weight").c_str())) return cols(m, m.name);
    const std::string ep = lp + "mlp.experts.{e}.";
    if (is((ep + "gate_proj.weight").c_str()))
      return expert(m, layer("mlp.experts.w13_weight"), cap, 0);
    if (is((ep + "up_proj.weight").c_str()))
      return expert(m, layer("mlp.experts.w13_weight"), cap, 1);
    if (is((ep + "down_proj.weight").c_str())) {
      Placement p = cols(m, layer("mlp.experts.w2_weight"));
      p.expert = expert_index(cap);
      return p;
    }
    return std::nullopt;
  }

 private:
  std::string what(const TensorMeta& m) const { return "tensor '" + m.name + "'"; }
  std::int64_t rows_of(const TensorMeta& m) const { return m.shape.empty() ? 1 : m.shape[0]; }

  void expect_rows(const TensorMeta& m, std::int64_t want) const {
    if (rows_of(m) != want)
      throw config_error(what(m), detail::cat("expected ", want, " rows, got shape ",
                                              detail::shape_string(m.shape)));
  }

  // Piece `which` (0 q, 1 k, 2 v) of qkv_proj: this rank's heads, at its row offset.
  Placement qkv(const TensorMeta& m, int which, std::string param) const {
    const std::int64_t hd = c_.head_dim, tp = tp_.size;
    const std::int64_t q_local = c_.n_heads / tp * hd;
    const std::int64_t kv_heads_local = c_.n_kv_heads >= tp ? c_.n_kv_heads / tp : 1;
    const std::int64_t kv_local = kv_heads_local * hd;
    Placement p{std::move(param)};
    if (which == 0) {
      expect_rows(m, c_.n_heads * hd);
      p.slice_begin = tp_.rank * q_local;
      p.slice_len = q_local;
    } else {
      expect_rows(m, c_.n_kv_heads * hd);
      // With fewer kv heads than ranks, tp / n_kv consecutive ranks share (replicate) one head.
      const std::int64_t shard = c_.n_kv_heads >= tp ? tp_.rank : tp_.rank / (tp / c_.n_kv_heads);
      p.slice_begin = shard * kv_local;
      p.slice_len = kv_local;
      p.dst_row = q_local + (which == 2 ? kv_local : 0);
    }
    if (c_.permute_qk && which < 2) p.permute_heads = which == 0 ? c_.n_heads : c_.n_kv_heads;
    return p;
  }

  // Column-parallel piece `which` of a fused [2 * extent / tp, ...] parameter.
  Placement rows(const TensorMeta& m, std::string param, std::int64_t extent, int which) const {
    expect_rows(m, extent);
    Placement p{std::move(param)};
    std::tie(p.slice_begin, p.slice_len) = even_shard(extent, tp_.size, tp_.rank, what(m));
    p.dst_row = which * p.slice_len;
    return p;
  }

  // Row-parallel: this rank's columns.
  Placement cols(const TensorMeta& m, std::string param) const {
    if (m.shape.size() != 2) throw config_error(what(m), "expected a 2-D weight");
    Placement p{std::move(param)};
    p.slice_dim = 1;
    std::tie(p.slice_begin, p.slice_len) = even_shard(m.shape[1], tp_.size, tp_.rank, what(m));
    return p;
  }

  // Vocab-parallel: rows [rank * per, min((rank + 1) * per, vocab)) of the padded vocab.
  Placement vocab(const TensorMeta& m, std::string param) const {
    const std::int64_t v = rows_of(m), pad = c_.vocab_padding > 0 ? c_.vocab_padding : 1;
    const std::int64_t padded = (v + pad - 1) / pad * pad;
    const std::int64_t per = even_shard(padded, tp_.size, tp_.rank, what(m)).second;
    Placement p{std::move(param)};
    p.slice_begin = std::min(v, tp_.rank * per);
    p.slice_len = std::min(v, p.slice_begin + per) - p.slice_begin;
    return p;
  }

  std::int64_t expert_index(const std::vector<std::pair<std::string, std::string>>& cap) const {
    for (const auto& [k, v] : cap)
      if (k == "e") return std::stoll(v);
    return -1;
  }

  Placement expert(const TensorMeta& m, std::string param,
                   const std::vector<std::pair<std::string, std::string>>& cap, int which) const {
    Placement p = rows(m, std::move(param), c_.moe_intermediate, which);
    p.expert = expert_index(cap);
    return p;
  }

  ModelConfig c_;
  TpConfig tp_;
};

//! HF -> vLLM map for Llama-style models (q/k/v/o, gate/up/down, norms).
inline LoadMap llama_map(const ModelConfig& cfg, TpConfig tp) {
  return HfToVllmMap(cfg, tp);
}
//! HF -> vLLM map for Qwen2 (Llama plus q/k/v biases, fused into qkv_proj.bias).
inline LoadMap qwen2_map(const ModelConfig& cfg, TpConfig tp) {
  return HfToVllmMap(cfg, tp);
}
//! HF -> vLLM map for Qwen3 dense (Llama plus q_norm/k_norm).
inline LoadMap qwen3_map(const ModelConfig& cfg, TpConfig tp) {
  return HfToVllmMap(cfg, tp);
}
//! HF -> vLLM map for Qwen3-MoE (Qwen3 attention, router mlp.gate, experts stacked into w13/w2).
inline LoadMap qwen3_moe_map(const ModelConfig& cfg, TpConfig tp) {
  if (cfg.moe_intermediate <= 0 || cfg.n_experts <= 0)
    throw config_error("moe_intermediate", "a Qwen3-MoE map needs moe_intermediate and n_experts");
  return HfToVllmMap(cfg, tp);
}

//! The Qwen3-8B configuration (36 layers in the real model; the map does not depend on it).
inline ModelConfig qwen3_8b_config() {
  return {.hidden = 4096, .n_heads = 32, .n_kv_heads = 8, .head_dim = 128, .intermediate = 12288};
}
//! The Qwen3-30B-A3B configuration.
inline ModelConfig qwen3_30b_a3b_config() {
  return {.hidden = 2048,
          .n_heads = 32,
          .n_kv_heads = 4,
          .head_dim = 128,
          .intermediate = 6144,
          .moe_intermediate = 768,
          .n_experts = 128};
}

}  // namespace weightsync
