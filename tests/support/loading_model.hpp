// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! What the model-aware loading tests (tests/unit/loading_*_test.cpp) share: an HF-named model of
//! bf16 tensors with deterministic contents, the engine side's vLLM-layout parameters (poisoned),
//! the reference (each parameter's expected bytes as plain loops over the HF tensors), and the
//! consumer pipeline's use of a plan, run in process.

#include <weightsync/loading.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/catch.hpp"

namespace ws_test::loading_model {

using weightsync::DType;
using weightsync::HostStream;
using weightsync::LoadPlan;
using weightsync::ModelConfig;
using weightsync::ParamInfo;
using weightsync::SourceTensorRef;
using weightsync::TensorMeta;
using weightsync::TensorView;

inline bool has(const std::string& m, std::initializer_list<const char*> parts) {
  for (const char* p : parts)
    if (m.find(p) == std::string::npos) {
      UNSCOPED_INFO("message: " << m);
      return false;
    }
  return true;
}

// ---- An HF-named model: bf16 tensors with deterministic, never-NaN contents ----

struct HfModel {
  std::vector<TensorMeta> metas;
  std::vector<std::vector<std::uint16_t>> data;  // bf16 bits
  std::map<std::string, std::size_t> index;

  void add(std::string name, std::vector<std::int64_t> shape) {
    const std::size_t i = metas.size();
    metas.push_back({std::move(name), DType::bfloat16, std::move(shape)});
    std::uint64_t x = 0x9e3779b97f4a7c15ull * (i + 1);
    data.emplace_back(metas.back().numel());
    for (auto& v : data.back()) {
      x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
      v = static_cast<std::uint16_t>((x * 0x2545f4914f6cdd1dull) >> 48) &
          0xbfff;  // exponent never all ones
    }
    index[metas.back().name] = i;
  }
  const std::vector<std::uint16_t>& at(const std::string& n) const { return data[index.at(n)]; }
  std::vector<SourceTensorRef> items() const {
    std::vector<SourceTensorRef> v;
    for (std::size_t i = 0; i < metas.size(); ++i) v.push_back({&metas[i], data[i].data()});
    return v;
  }
};

struct Dims {
  ModelConfig cfg;
  int layers = 1;
  std::int64_t vocab = 1000;
  bool moe = false;
  bool qkv_bias = false;
  bool tied = false;  // the engine has no lm_head (tie_word_embeddings)
};

inline HfModel make_hf(const Dims& d) {
  const auto& c = d.cfg;
  HfModel m;
  const std::int64_t H = c.hidden, Q = c.n_heads * c.head_dim, KV = c.n_kv_heads * c.head_dim;
  m.add("model.embed_tokens.weight", {d.vocab, H});
  for (int l = 0; l < d.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    m.add(p + "input_layernorm.weight", {H});
    m.add(p + "self_attn.q_proj.weight", {Q, H});
    m.add(p + "self_attn.k_proj.weight", {KV, H});
    m.add(p + "self_attn.v_proj.weight", {KV, H});
    if (d.qkv_bias) {
      m.add(p + "self_attn.q_proj.bias", {Q});
      m.add(p + "self_attn.k_proj.bias", {KV});
      m.add(p + "self_attn.v_proj.bias", {KV});
    }
    m.add(p + "self_attn.o_proj.weight", {H, Q});
    m.add(p + "self_attn.q_norm.weight", {c.head_dim});
    m.add(p + "self_attn.k_norm.weight", {c.head_dim});
    m.add(p + "post_attention_layernorm.weight", {H});
    if (d.moe) {
      m.add(p + "mlp.gate.weight", {c.n_experts, H});
      for (std::int64_t e = 0; e < c.n_experts; ++e) {
        const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
        m.add(x + "gate_proj.weight", {c.moe_intermediate, H});
        m.add(x + "up_proj.weight", {c.moe_intermediate, H});
        m.add(x + "down_proj.weight", {H, c.moe_intermediate});
      }
    } else {
      m.add(p + "mlp.gate_proj.weight", {c.intermediate, H});
      m.add(p + "mlp.up_proj.weight", {c.intermediate, H});
      m.add(p + "mlp.down_proj.weight", {H, c.intermediate});
    }
  }
  m.add("model.norm.weight", {H});
  m.add("lm_head.weight", {d.vocab, H});
  return m;
}

// ---- The engine side: vLLM-layout parameters (bf16 weights, fp32 norms), poisoned ----

struct Engine {
  std::vector<ParamInfo> params;
  std::vector<std::vector<std::byte>> mem;
  void add(std::string name, DType t, std::vector<std::int64_t> shape) {
    const TensorMeta m{name, t, shape};
    mem.emplace_back(m.nbytes(), std::byte{0xCD});
    params.push_back({std::move(name), mem.back().data(), t, std::move(shape)});
  }
  const std::vector<std::byte>& at(const std::string& n) const {
    for (std::size_t i = 0; i < params.size(); ++i)
      if (params[i].name == n) return mem[i];
    throw std::runtime_error("no parameter " + n);
  }
};

inline Engine make_engine(const Dims& d, int rank, int tp) {
  const auto& c = d.cfg;
  Engine e;
  e.mem.reserve(1000);
  const std::int64_t H = c.hidden, hd = c.head_dim;
  const std::int64_t q = c.n_heads / tp * hd,
                     kv = (c.n_kv_heads >= tp ? c.n_kv_heads / tp : 1) * hd;
  const std::int64_t per = (d.vocab + 63) / 64 * 64 / tp;
  (void)rank;
  e.add("model.embed_tokens.weight", DType::bfloat16, {per, H});
  for (int l = 0; l < d.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    e.add(p + "input_layernorm.weight", DType::float32, {H});
    e.add(p + "self_attn.qkv_proj.weight", DType::bfloat16, {q + 2 * kv, H});
    if (d.qkv_bias) e.add(p + "self_attn.qkv_proj.bias", DType::bfloat16, {q + 2 * kv});
    e.add(p + "self_attn.o_proj.weight", DType::bfloat16, {H, c.n_heads * hd / tp});
    e.add(p + "self_attn.q_norm.weight", DType::float32, {hd});
    e.add(p + "self_attn.k_norm.weight", DType::float32, {hd});
    e.add(p + "post_attention_layernorm.weight", DType::float32, {H});
    if (d.moe) {
      e.add(p + "mlp.gate.weight", DType::bfloat16, {c.n_experts, H});
      e.add(p + "mlp.experts.w13_weight", DType::bfloat16,
            {c.n_experts, 2 * c.moe_intermediate / tp, H});
      e.add(p + "mlp.experts.w2_weight", DType::bfloat16,
            {c.n_experts, H, c.moe_intermediate / tp});
    } else {
      e.add(p + "mlp.gate_up_proj.weight", DType::bfloat16, {2 * c.intermediate / tp, H});
      e.add(p + "mlp.down_proj.weight", DType::bfloat16, {H, c.intermediate / tp});
    }
  }
  e.add("model.norm.weight", DType::float32, {H});
  if (!d.tied) e.add("lm_head.weight", DType::bfloat16, {per, H});
  return e;
}

// ---- The reference: each parameter's expected bytes, as plain loops over the HF tensors ----

using Bytes = std::vector<std::byte>;

inline void put16(Bytes& b, std::size_t i, std::uint16_t v) {
  std::memcpy(b.data() + 2 * i, &v, 2);
}

// w.view(H, R/H/2, 2, C).transpose(1, 2).reshape(R, C), spelled out as the 4-D index.
inline std::vector<std::uint16_t> permute_ref(const std::vector<std::uint16_t>& w,
                                              std::int64_t heads, std::int64_t R, std::int64_t C) {
  std::vector<std::uint16_t> out(w.size());
  const std::int64_t half = R / heads / 2;
  for (std::int64_t h = 0; h < heads; ++h)
    for (std::int64_t a = 0; a < 2; ++a)
      for (std::int64_t b = 0; b < half; ++b)
        for (std::int64_t c = 0; c < C; ++c)
          out[static_cast<std::size_t>(((h * 2 + a) * half + b) * C + c)] =
              w[static_cast<std::size_t>(((h * half + b) * 2 + a) * C + c)];
  return out;
}

// Rows [r0, r0 + n) of a [?, C] bf16 tensor, appended at row `at` of `out` (C columns).
inline void copy_rows(Bytes& out, std::int64_t at, const std::vector<std::uint16_t>& src,
                      std::int64_t r0, std::int64_t n, std::int64_t C) {
  for (std::int64_t r = 0; r < n; ++r)
    for (std::int64_t c = 0; c < C; ++c)
      put16(out, static_cast<std::size_t>((at + r) * C + c),
            src[static_cast<std::size_t>((r0 + r) * C + c)]);
}

// Columns [c0, c0 + n) of a [R, C] tensor into out [R, n] at element offset `base`.
inline void copy_cols(Bytes& out, std::size_t base, const std::vector<std::uint16_t>& src,
                      std::int64_t R, std::int64_t C, std::int64_t c0, std::int64_t n) {
  for (std::int64_t r = 0; r < R; ++r)
    for (std::int64_t c = 0; c < n; ++c)
      put16(out, base + static_cast<std::size_t>(r * n + c),
            src[static_cast<std::size_t>(r * C + c0 + c)]);
}

inline Bytes norm_ref(const std::vector<std::uint16_t>& src) {
  Bytes out(src.size() * 4);
  for (std::size_t i = 0; i < src.size(); ++i) {
    const std::uint32_t u = static_cast<std::uint32_t>(src[i]) << 16;
    std::memcpy(out.data() + 4 * i, &u, 4);
  }
  return out;
}

inline std::map<std::string, Bytes> reference(const Dims& d, const HfModel& hf, const Engine& eng,
                                              int rank, int tp) {
  const auto& c = d.cfg;
  const std::int64_t H = c.hidden, hd = c.head_dim;
  std::map<std::string, Bytes> want;
  for (std::size_t i = 0; i < eng.params.size(); ++i)
    want[eng.params[i].name] = Bytes(eng.mem[i].size(), std::byte{0xCD});
  const std::int64_t per = (d.vocab + 63) / 64 * 64 / tp;
  for (const char* n : {"model.embed_tokens.weight", "lm_head.weight"}) {
    if (!want.count(n)) continue;  // no lm_head with tied embeddings
    const std::int64_t lo = rank * per, hi = std::min<std::int64_t>(d.vocab, lo + per);
    if (hi > lo) copy_rows(want[n], 0, hf.at(n), lo, hi - lo, H);
  }
  want["model.norm.weight"] = norm_ref(hf.at("model.norm.weight"));
  const std::int64_t nq = c.n_heads / tp;                               // q heads per rank
  const std::int64_t nkv = c.n_kv_heads >= tp ? c.n_kv_heads / tp : 1;  // kv heads per rank
  const std::int64_t kv_head0 = c.n_kv_heads >= tp ? rank * nkv : rank * c.n_kv_heads / tp;
  for (int l = 0; l < d.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (const char* n : {"input_layernorm.weight", "post_attention_layernorm.weight"})
      want[p + n] = norm_ref(hf.at(p + n));
    // q_norm / k_norm are per head over head_dim: the 1-D permute with one head.
    for (const char* n : {"self_attn.q_norm.weight", "self_attn.k_norm.weight"})
      want[p + n] = norm_ref(c.permute_qk ? permute_ref(hf.at(p + n), 1, hd, 1) : hf.at(p + n));
    for (const char* w : {"weight", "bias"}) {
      if (std::string(w) == "bias" && !d.qkv_bias) continue;
      const std::int64_t C = std::string(w) == "weight" ? H : 1;
      auto q = hf.at(p + "self_attn.q_proj." + w), k = hf.at(p + "self_attn.k_proj." + w);
      if (c.permute_qk) {
        q = permute_ref(q, c.n_heads, c.n_heads * hd, C);
        k = permute_ref(k, c.n_kv_heads, c.n_kv_heads * hd, C);
      }
      Bytes& o = want[p + "self_attn.qkv_proj." + w];
      copy_rows(o, 0, q, rank * nq * hd, nq * hd, C);
      copy_rows(o, nq * hd, k, kv_head0 * hd, nkv * hd, C);
      copy_rows(o, (nq + nkv) * hd, hf.at(p + "self_attn.v_proj." + w), kv_head0 * hd, nkv * hd, C);
    }
    const std::int64_t Q = c.n_heads * hd;
    copy_cols(want[p + "self_attn.o_proj.weight"], 0, hf.at(p + "self_attn.o_proj.weight"), H, Q,
              rank * Q / tp, Q / tp);
    if (d.moe) {
      const std::int64_t I = c.moe_intermediate, Il = I / tp;
      copy_rows(want[p + "mlp.gate.weight"], 0, hf.at(p + "mlp.gate.weight"), 0, c.n_experts, H);
      for (std::int64_t e = 0; e < c.n_experts; ++e) {
        const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
        copy_rows(want[p + "mlp.experts.w13_weight"], e * 2 * Il, hf.at(x + "gate_proj.weight"),
                  rank * Il, Il, H);
        copy_rows(want[p + "mlp.experts.w13_weight"], e * 2 * Il + Il, hf.at(x + "up_proj.weight"),
                  rank * Il, Il, H);
        copy_cols(want[p + "mlp.experts.w2_weight"], static_cast<std::size_t>(e * H * Il),
                  hf.at(x + "down_proj.weight"), H, I, rank * Il, Il);
      }
    } else {
      const std::int64_t I = c.intermediate, Il = I / tp;
      copy_rows(want[p + "mlp.gate_up_proj.weight"], 0, hf.at(p + "mlp.gate_proj.weight"),
                rank * Il, Il, H);
      copy_rows(want[p + "mlp.gate_up_proj.weight"], Il, hf.at(p + "mlp.up_proj.weight"), rank * Il,
                Il, H);
      copy_cols(want[p + "mlp.down_proj.weight"], 0, hf.at(p + "mlp.down_proj.weight"), H, I,
                rank * Il, Il);
    }
  }
  return want;
}

inline void check_against_reference(const Dims& d, const HfModel& hf, const Engine& eng, int rank,
                                    int tp) {
  const auto want = reference(d, hf, eng, rank, tp);
  for (std::size_t i = 0; i < eng.params.size(); ++i)
    if (eng.mem[i] != want.at(eng.params[i].name))
      throw std::runtime_error("tp rank " + std::to_string(rank) + "/" + std::to_string(tp) +
                               ": parameter '" + eng.params[i].name +
                               "' differs from the reference");
}

// What the consumer pipeline does with a plan, in process: destinations get a copy, the rest are
// handed over as views.
inline void apply_in_process(const HfModel& hf, const LoadPlan& plan,
                             bool use_destinations = true) {
  std::vector<TensorView> views;
  for (std::size_t i = 0; i < hf.metas.size(); ++i) {
    const auto nb = hf.metas[i].nbytes();
    if (void* dst = use_destinations ? plan.destination(hf.metas[i]) : nullptr)
      std::memcpy(dst, hf.data[i].data(), nb);
    else
      views.push_back({&hf.metas[i], const_cast<std::uint16_t*>(hf.data[i].data()), nb});
  }
  plan.load(std::span<const TensorView>(views), HostStream{});
}

}  // namespace ws_test::loading_model
