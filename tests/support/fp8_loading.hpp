// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! What the FP8 loading tests (tests/unit/fp8_load_test.cpp, tests/gpu/fp8_load_test.cpp) share:
//! the engine of loading_model.hpp with FP8 linear layers (float8_e4m3fn weights and their fp32
//! scale parameters), the trainer's FP8 checkpoint of an HF model (each linear weight quantized
//! whole by the host reference, quantize_fp8_host, plus its scale tensor, as Fp8Source sends it),
//! and the blocks with special values (zero, inf, NaN, tiny) that exercise every path.

#include <weightsync/fp8/quantize.hpp>
#include <weightsync/loading.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "support/loading_model.hpp"

namespace ws_test::fp8_loading {

using namespace ws_test::loading_model;
using weightsync::Fp8Scaling;

//! The engine parameters that are FP8 (vLLM's Fp8LinearMethod / Fp8MoEMethod layers).
inline bool fp8_param(const std::string& n) {
  for (const char* s : {"qkv_proj.weight", "o_proj.weight", "gate_up_proj.weight",
                        "down_proj.weight", "w13_weight", "w2_weight"})
    if (n.ends_with(s)) return true;
  return false;
}

//! The trainer tensors an FP8 checkpoint quantizes (Fp8SourceOptions' default: `_proj.weight`).
inline bool fp8_tensor(const std::string& n) {
  return n.ends_with("_proj.weight");
}

//! The shape of FP8 parameter `shape`'s scales ([E,] + the layout of its [rows, cols]).
inline std::vector<std::int64_t> scale_shape(const std::vector<std::int64_t>& shape, Fp8Scaling s) {
  std::vector<std::int64_t> out;
  std::size_t at = 0;
  if (shape.size() == 3) out.push_back(shape[at++]);
  const std::int64_t R = shape[at], C = shape[at + 1], B = 128;
  if (weightsync::fp8_block_scaling(s)) {
    out.push_back((R + B - 1) / B);
    out.push_back((C + B - 1) / B);
  } else if (s == Fp8Scaling::per_channel) {
    out.push_back(R);
    out.push_back(1);
  }
  return out;
}

//! make_engine's table with the linear layers as float8_e4m3fn and their scale parameters
//! (fp8_scale_name: `_scale_inv` for block scales), every byte poisoned (0xCD).
inline Engine make_fp8_engine(const Dims& d, int rank, int tp, Fp8Scaling s) {
  const Engine bf = make_engine(d, rank, tp);
  Engine e;
  e.mem.reserve(1000);
  for (const auto& p : bf.params) {
    if (!fp8_param(p.name)) {
      e.add(p.name, p.dtype, p.shape);
      continue;
    }
    e.add(p.name, DType::float8_e4m3fn, p.shape);
    e.add(weightsync::fp8_scale_name(p.name, s), DType::float32, scale_shape(p.shape, s));
  }
  return e;
}

//! A named list of tensors of any dtype, with their bytes.
struct Tensors {
  std::vector<TensorMeta> metas;
  std::vector<std::vector<std::byte>> data;
  std::vector<TensorView> views() const {
    std::vector<TensorView> v;
    for (std::size_t i = 0; i < metas.size(); ++i)
      v.push_back({&metas[i], const_cast<std::byte*>(data[i].data()), data[i].size()});
    return v;
  }
};

//! The HF model as it is (bf16).
inline Tensors as_is(const HfModel& hf) {
  Tensors t;
  t.metas = hf.metas;
  for (const auto& d : hf.data) {
    t.data.emplace_back(d.size() * 2);
    std::memcpy(t.data.back().data(), d.data(), d.size() * 2);
  }
  return t;
}

//! The FP8 checkpoint of the HF model: each `_proj.weight` as float8_e4m3fn (quantize_fp8_host of
//! the whole tensor) followed by its scales, the rest as it is: what Fp8Source sends.
inline Tensors checkpoint(const HfModel& hf, Fp8Scaling s) {
  Tensors t;
  for (std::size_t i = 0; i < hf.metas.size(); ++i) {
    const TensorMeta& m = hf.metas[i];
    if (!fp8_tensor(m.name)) {
      t.metas.push_back(m);
      t.data.emplace_back(m.nbytes());
      std::memcpy(t.data.back().data(), hf.data[i].data(), m.nbytes());
      continue;
    }
    const TensorMeta w = weightsync::fp8_weight_meta(m);
    const TensorMeta sc = weightsync::fp8_scale_meta(m, s, weightsync::fp8_scale_name(m.name, s));
    std::vector<std::byte> wb(w.nbytes()), sb(sc.nbytes());
    weightsync::quantize_fp8_host(m, hf.data[i].data(), s, wb.data(),
                                  reinterpret_cast<float*>(sb.data()));
    t.metas.push_back(w);
    t.data.push_back(std::move(wb));
    t.metas.push_back(sc);
    t.data.push_back(std::move(sb));
  }
  return t;
}

//! Writes special groups into a [R, C] bf16 tensor: block (0, 0) all zeros (signed), a +inf in
//! block (0, 1), a NaN in block (1, 0), block (1, 1) tiny (amax 2^-120: a subnormal fp32 scale),
//! when the tensor has those blocks; row 3 of a per-channel layout gets the same treatment through
//! the blocks it crosses.
inline void add_specials(std::vector<std::uint16_t>& w, std::int64_t R, std::int64_t C) {
  const auto at = [&](std::int64_t r, std::int64_t c) -> std::uint16_t& {
    return w[static_cast<std::size_t>(r * C + c)];
  };
  if (R < 256 || C < 256) return;
  for (std::int64_t r = 0; r < 128; ++r)
    for (std::int64_t c = 0; c < 128; ++c) at(r, c) = (r + c) % 2 ? 0x8000 : 0x0000;
  at(5, 130) = 0x7f80;  // +inf
  at(140, 7) = 0x7fc1;  // NaN
  at(141, 9) = 0xff80;  // -inf next to it
  for (std::int64_t r = 128; r < 256; ++r)
    for (std::int64_t c = 128; c < 256; ++c)
      at(r, c) = static_cast<std::uint16_t>((at(r, c) & 0x807f) | 0x0380);  // ~2^-120
}

//! Qwen3-style dimensions whose every TP shard (1, 2) is whole 128-blocks: hidden 256, 4 heads of
//! 128, 2 kv heads, intermediate 512; MoE: 2 experts of 256.
inline Dims fp8_dims(bool moe, bool permute) {
  Dims d;
  d.cfg = {.hidden = 256, .n_heads = 4, .n_kv_heads = 2, .head_dim = 128, .intermediate = 512};
  if (moe) {
    d.moe = true;
    d.cfg.moe_intermediate = 256;
    d.cfg.n_experts = 2;
  }
  d.cfg.permute_qk = permute;
  d.vocab = 300;
  return d;
}

//! The HF model of `d` with special groups in every layer's q_proj and gate / expert-0 gate_proj.
inline HfModel fp8_model(const Dims& d) {
  HfModel hf = make_hf(d);
  for (std::size_t i = 0; i < hf.metas.size(); ++i) {
    const auto& n = hf.metas[i].name;
    if (n.ends_with("q_proj.weight") || n.ends_with("mlp.gate_proj.weight") ||
        n.ends_with("experts.0.gate_proj.weight"))
      add_specials(hf.data[i], hf.metas[i].shape[0], hf.metas[i].shape[1]);
  }
  return hf;
}

//! The map of `d` at `tp` (Qwen3 or Qwen3-MoE).
inline weightsync::LoadMap fp8_map(const Dims& d, int rank, int tp) {
  return d.moe ? weightsync::qwen3_moe_map(d.cfg, {rank, tp})
               : weightsync::qwen3_map(d.cfg, {rank, tp});
}

}  // namespace ws_test::fp8_loading
