// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Model-aware loading: casts, name patterns, the planner's checks, the rotary permute, GQA
// replication, param_mappings files, and Qwen3-8B / Qwen3-30B-A3B shaped updates at TP = 1, 2, 4
// through the host pipeline in real processes, compared with a reference written as plain loops.
#include <weightsync/config.hpp>
#include <weightsync/host/communicator.hpp>
#include <weightsync/loading.hpp>
#include <weightsync/packed_broadcast.hpp>
#if WEIGHTSYNC_HAS_CUDA
#include <weightsync/cuda/gather.hpp>  // host-side parts only: no device is touched
#endif

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "support/catch.hpp"
#include "support/process.hpp"

// (a namespace per test source: the sources build as unity translation units)
namespace ws_test_loading_test {

using namespace weightsync;
using namespace std::chrono_literals;

namespace {

bool has(const std::string& m, std::initializer_list<const char*> parts) {
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

HfModel make_hf(const Dims& d) {
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

Engine make_engine(const Dims& d, int rank, int tp) {
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

void put16(Bytes& b, std::size_t i, std::uint16_t v) {
  std::memcpy(b.data() + 2 * i, &v, 2);
}

// w.view(H, R/H/2, 2, C).transpose(1, 2).reshape(R, C), spelled out as the 4-D index.
std::vector<std::uint16_t> permute_ref(const std::vector<std::uint16_t>& w, std::int64_t heads,
                                       std::int64_t R, std::int64_t C) {
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
void copy_rows(Bytes& out, std::int64_t at, const std::vector<std::uint16_t>& src, std::int64_t r0,
               std::int64_t n, std::int64_t C) {
  for (std::int64_t r = 0; r < n; ++r)
    for (std::int64_t c = 0; c < C; ++c)
      put16(out, static_cast<std::size_t>((at + r) * C + c),
            src[static_cast<std::size_t>((r0 + r) * C + c)]);
}

// Columns [c0, c0 + n) of a [R, C] tensor into out [R, n] at element offset `base`.
void copy_cols(Bytes& out, std::size_t base, const std::vector<std::uint16_t>& src, std::int64_t R,
               std::int64_t C, std::int64_t c0, std::int64_t n) {
  for (std::int64_t r = 0; r < R; ++r)
    for (std::int64_t c = 0; c < n; ++c)
      put16(out, base + static_cast<std::size_t>(r * n + c),
            src[static_cast<std::size_t>(r * C + c0 + c)]);
}

Bytes norm_ref(const std::vector<std::uint16_t>& src) {
  Bytes out(src.size() * 4);
  for (std::size_t i = 0; i < src.size(); ++i) {
    const std::uint32_t u = static_cast<std::uint32_t>(src[i]) << 16;
    std::memcpy(out.data() + 4 * i, &u, 4);
  }
  return out;
}

std::map<std::string, Bytes> reference(const Dims& d, const HfModel& hf, const Engine& eng,
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

void check_against_reference(const Dims& d, const HfModel& hf, const Engine& eng, int rank,
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
void apply_in_process(const HfModel& hf, const LoadPlan& plan, bool use_destinations = true) {
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

Dims dense8b() {
  Dims d;
  d.cfg = qwen3_8b_config();
  d.cfg.intermediate = 1024;  // reduced from 12288 (the attention shapes are Qwen3-8B's)
  d.layers = 2;
  return d;
}

Dims moe30b() {
  Dims d;
  d.cfg = qwen3_30b_a3b_config();
  d.cfg.n_experts = 8;  // reduced from 128 (per-expert and attention shapes are Qwen3-30B-A3B's)
  d.moe = true;
  return d;
}

// The real-process round: rank 0 sends the HF model, ranks 1..tp load it into their shards.
void run_processes(const Dims& d, int tp, bool packed) {
  ws_test::Processes procs;
  const int port = ws_test::free_port();
  const int world = 1 + tp;
  for (int rank = 0; rank < world; ++rank)
    procs.spawn([=] {
      RendezvousOptions o;
      o.port = port;
      o.rank = rank;
      o.world_size = world;
      o.timeout = 20000ms;
      auto comm = HostCommunicator::connect(o, 30000ms);
      const HfModel hf = make_hf(d);
      TransferOptions opt;
      opt.packed = packed;
      opt.buffer_size_bytes = 8 << 20;
      if (rank == 0) {
        (void)packed_broadcast_producer(hf.metas, hf.items(), comm, 0, opt);
        return;
      }
      const int r = rank - 1;
      Engine eng = make_engine(d, r, tp);
      const auto plan = plan_loading(
          hf.metas, eng.params, d.moe ? qwen3_moe_map(d.cfg, {r, tp}) : qwen3_map(d.cfg, {r, tp}));
      // At TP = 1 every bf16 tensor lands in place (q, k, v at their rows of qkv; gate, up of
      // gate_up; experts in w13/w2); only the fp32 norms are gathered (cast).
      const std::size_t norms = static_cast<std::size_t>(4 * d.layers + 1);
      if (tp == 1 &&
          (plan.in_place_count() != hf.metas.size() - norms || plan.gather_count() != norms))
        throw std::runtime_error("TP=1 plan: " + std::to_string(plan.in_place_count()) +
                                 " in place, " + std::to_string(plan.gather_count()) + " gathered");
      opt.destination = plan.destination_fn();
      (void)packed_broadcast_consumer(hf.metas, comm, 0, plan.loader(), opt);
      check_against_reference(d, hf, eng, r, tp);
    });
  for (const auto& res : procs.wait_all(240s)) {
    INFO(ws_test::outcome_name(res.outcome) << ": " << res.message);
    CHECK(res.outcome == ws_test::Outcome::ok);
  }
}

}  // namespace

TEST_CASE("loading cast: fp16/bf16 round trips and round-to-nearest-even", "[unit][loading]") {
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const auto b = static_cast<std::uint16_t>(h);
    const float fb = bf16_to_float(b), fh = fp16_to_float(b);
    if (std::isnan(fb)) {
      CHECK(std::isnan(bf16_to_float(float_to_bf16(fb))));
    } else if (float_to_bf16(fb) != b) {
      FAIL_CHECK("bf16 " << h << " does not round trip");
    }
    if (std::isnan(fh)) {
      CHECK(std::isnan(fp16_to_float(float_to_fp16(fh))));
    } else if (float_to_fp16(fh) != b) {
      FAIL_CHECK("fp16 " << h << " does not round trip (" << fh << " -> " << float_to_fp16(fh)
                         << ")");
    }
  }
  CHECK(fp16_to_float(0x3c00) == 1.0f);
  CHECK(fp16_to_float(0x0001) == std::ldexp(1.0f, -24));
  CHECK(fp16_to_float(0x7bff) == 65504.0f);
  CHECK(float_to_fp16(65520.0f) == 0x7c00);  // rounds to infinity
  CHECK(float_to_fp16(65519.0f) == 0x7bff);
  CHECK(float_to_fp16(std::ldexp(1.0f, -25)) == 0x0000);  // tie to even: zero
  CHECK(float_to_fp16(std::ldexp(1.5f, -25)) == 0x0001);
  CHECK(float_to_fp16(-0.0f) == 0x8000);
  CHECK(float_to_bf16(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);  // tie to even: down
  CHECK(float_to_bf16(1.0f + std::ldexp(3.0f, -8)) == 0x3f82);  // tie to even: up
  CHECK(float_to_bf16(std::numeric_limits<float>::infinity()) == 0x7f80);
#if defined(__FLT16_MAX__) && defined(__x86_64__)
  // The compiler's _Float16 is an independent reference for fp32 -> fp16.
  std::mt19937 rng(1);
  for (int i = 0; i < 200000; ++i) {
    const std::uint32_t u = rng();
    float f;
    std::memcpy(&f, &u, 4);
    if (std::isnan(f)) continue;
    const _Float16 r = static_cast<_Float16>(f);
    std::uint16_t want;
    std::memcpy(&want, &r, 2);
    if (float_to_fp16(f) != want)
      FAIL_CHECK("fp32 bits " << u << ": got " << float_to_fp16(f) << " want " << want);
  }
#endif
}

namespace {

// ---- An independent reference for the casts: values as doubles, rounding by search ----

// The value of the non-negative code `h` of a binary float with `mb` mantissa bits and exponent
// bias `bias`. The infinity code reads as 2^(emax + 1), the first value past the largest finite
// one: values from halfway to it on round to infinity.
double code_value(std::uint32_t h, int mb, int bias) {
  const std::uint32_t e = h >> mb, m = h & ((1u << mb) - 1u);
  return e == 0 ? std::ldexp(static_cast<double>(m), 1 - bias - mb)
                : std::ldexp(static_cast<double>((1u << mb) + m), static_cast<int>(e) - bias - mb);
}

// float32 bits `u` to the nearest code of the narrower format (ties to the even code); NaN: a
// quiet NaN of the same sign that keeps the payload's top bits.
std::uint16_t narrow_ref(std::uint32_t u, int mb, int bias, std::uint32_t inf_code) {
  const auto sign = static_cast<std::uint32_t>(u >> 31) << 15;
  float f;
  std::memcpy(&f, &u, 4);
  if (std::isnan(f))
    return static_cast<std::uint16_t>(sign | inf_code | (1u << (mb - 1)) |
                                      ((u & 0x7fffffu) >> (23 - mb)));
  const double a = std::fabs(static_cast<double>(f));
  if (a >= code_value(inf_code, mb, bias)) return static_cast<std::uint16_t>(sign | inf_code);
  std::uint32_t lo = 0, hi = inf_code;  // the largest code whose value is <= a
  while (lo < hi) {
    const std::uint32_t mid = (lo + hi + 1) / 2;
    if (code_value(mid, mb, bias) <= a)
      lo = mid;
    else
      hi = mid - 1;
  }
  std::uint32_t r = lo;
  if (code_value(lo, mb, bias) != a) {
    const double down = a - code_value(lo, mb, bias), up = code_value(lo + 1, mb, bias) - a;
    if (up < down || (up == down && (lo & 1u))) r = lo + 1;
  }
  return static_cast<std::uint16_t>(sign | r);
}
std::uint16_t bf16_ref(std::uint32_t u) {
  return narrow_ref(u, 7, 127, 0x7f80);
}
std::uint16_t fp16_ref(std::uint32_t u) {
  return narrow_ref(u, 10, 15, 0x7c00);
}

// float16 bits to float32 bits (exact); NaN: quiet, same sign, payload kept.
std::uint32_t widen_fp16_ref(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h >> 15) << 31;
  const std::uint32_t mag = h & 0x7fffu;
  if (mag > 0x7c00u) return sign | 0x7fc00000u | ((mag & 0x3ffu) << 13);
  if (mag == 0x7c00u) return sign | 0x7f800000u;
  const float f = static_cast<float>(code_value(mag, 10, 15));
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return sign | u;
}

}  // namespace

TEST_CASE(
    "loading planner: lossy casts fp32 -> bf16 / fp16 (NaN, inf, ties, subnormals) match a "
    "plain-loop reference",
    "[unit][loading]") {
  // fp32 inputs: the edge cases, then random bit patterns (NaNs with payloads included).
  std::vector<std::uint32_t> x{0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7f800001u,
                               0xff800001u, 0x7fc00000u, 0xffc12345u, 0x7fbfffffu, 0x7f7fffffu,
                               0x00000001u, 0x807fffffu, 0x3f808000u, 0x3f818000u, 0x3f801000u,
                               0x3f803000u, 0x477fe000u, 0x477fefffu, 0x477ff000u, 0x47800000u,
                               0x33000000u, 0x33000001u, 0x33400000u, 0x33800000u, 0x387fc000u,
                               0x387fe000u, 0x38800000u, 0xc77ff000u, 0x7f7f8000u, 0x7f7f7fffu};
  std::mt19937 rng(7);
  while (x.size() % 64 != 0 || x.size() < 40000) x.push_back(rng());
  const auto rows = static_cast<std::int64_t>(x.size() / 64);
  // fp16 and bf16 inputs: every code.
  std::vector<std::uint16_t> h(65536);
  for (std::size_t i = 0; i < h.size(); ++i) h[i] = static_cast<std::uint16_t>(i);
  const std::vector<TensorMeta> metas{{"x", DType::float32, {rows, 64}},
                                      {"y", DType::float32, {rows, 64}},
                                      {"h", DType::float16, {1024, 64}},
                                      {"g", DType::float16, {1024, 64}},
                                      {"b", DType::bfloat16, {1024, 64}}};
  Engine eng;
  eng.mem.reserve(8);
  eng.add("X", DType::bfloat16, {rows, 64});
  eng.add("Y", DType::float16, {rows, 32});  // TP rank 1 of 2: columns [32, 64)
  eng.add("H", DType::float32, {1024, 64});
  eng.add("G", DType::bfloat16, {1024, 64});
  eng.add("B", DType::float16, {1024, 64});
  RenameMap map({1, 2});
  map.add("x", "X").add("y", "Y", 1).add("h", "H").add("g", "G").add("b", "B");
  const auto plan = plan_loading(metas, eng.params, map);
  CHECK(plan.gather_count() == 5);
  const std::vector<TensorView> views{{&metas[0], x.data(), x.size() * 4},
                                      {&metas[1], x.data(), x.size() * 4},
                                      {&metas[2], h.data(), h.size() * 2},
                                      {&metas[3], h.data(), h.size() * 2},
                                      {&metas[4], h.data(), h.size() * 2}};
  plan.load(std::span<const TensorView>(views), HostStream{});
  const auto get16 = [&](const std::string& n, std::size_t i) {
    std::uint16_t v;
    std::memcpy(&v, eng.at(n).data() + 2 * i, 2);
    return v;
  };
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (get16("X", i) != bf16_ref(x[i]) && wrong++ < 8)
      UNSCOPED_INFO("fp32 " << std::hex << x[i] << " -> bf16 " << get16("X", i) << ", want "
                            << bf16_ref(x[i]));
    if (i % 64 >= 32 && get16("Y", i / 64 * 32 + i % 64 - 32) != fp16_ref(x[i]) && wrong++ < 8)
      UNSCOPED_INFO("fp32 " << std::hex << x[i] << " -> fp16 "
                            << get16("Y", i / 64 * 32 + i % 64 - 32) << ", want "
                            << fp16_ref(x[i]));
  }
  for (std::size_t i = 0; i < h.size(); ++i) {
    std::uint32_t got;
    std::memcpy(&got, eng.at("H").data() + 4 * i, 4);
    if (got != widen_fp16_ref(h[i]) && wrong++ < 8)
      UNSCOPED_INFO("fp16 " << std::hex << h[i] << " -> fp32 " << got << ", want "
                            << widen_fp16_ref(h[i]));
    if (get16("G", i) != bf16_ref(widen_fp16_ref(h[i])) && wrong++ < 8)
      UNSCOPED_INFO("fp16 " << std::hex << h[i] << " -> bf16 " << get16("G", i));
    const std::uint32_t bf = static_cast<std::uint32_t>(h[i]) << 16;  // bf16 -> fp32 is exact
    if (get16("B", i) != fp16_ref(bf) && wrong++ < 8)
      UNSCOPED_INFO("bf16 " << std::hex << h[i] << " -> fp16 " << get16("B", i) << ", want "
                            << fp16_ref(bf));
  }
  CHECK(wrong == 0);
}

TEST_CASE(
    "loading planner: 1- and 8-byte dtypes are copied, sliced and permuted, other casts "
    "are refused when the plan is made",
    "[unit][loading]") {
  // int8 [8, 6] rotary-permuted (2 heads) then rows [4, 8); int64 [4, 6] columns [3, 6); bool,
  // float8 and float64 whole.
  std::vector<std::int8_t> i8(48);
  std::vector<std::int64_t> i64(24);
  std::vector<std::uint8_t> b1(10), f8(12);
  std::vector<double> f64(5);
  for (std::size_t i = 0; i < i8.size(); ++i) i8[i] = static_cast<std::int8_t>(i * 37 - 100);
  for (std::size_t i = 0; i < i64.size(); ++i)
    i64[i] = static_cast<std::int64_t>(i) * 0x0101010101010101ll - 5;
  for (std::size_t i = 0; i < b1.size(); ++i) b1[i] = static_cast<std::uint8_t>(i % 3 == 0);
  for (std::size_t i = 0; i < f8.size(); ++i) f8[i] = static_cast<std::uint8_t>(i * 29 + 1);
  for (std::size_t i = 0; i < f64.size(); ++i) f64[i] = 1.0 / (1.0 + static_cast<double>(i));
  const std::vector<TensorMeta> metas{{"q", DType::int8, {8, 6}},
                                      {"o", DType::int64, {4, 6}},
                                      {"m", DType::bool_, {10}},
                                      {"f", DType::float8_e4m3fn, {3, 4}},
                                      {"d", DType::float64, {5}}};
  std::vector<std::int8_t> Q(24, 0);
  std::vector<std::int64_t> O(12, 0);
  std::vector<std::uint8_t> M(10, 0xCD), F(12, 0xCD);
  std::vector<double> D(5, 0.0);
  const std::vector<ParamInfo> params{{"Q", Q.data(), DType::int8, {4, 6}},
                                      {"O", O.data(), DType::int64, {4, 3}},
                                      {"M", M.data(), DType::bool_, {10}},
                                      {"F", F.data(), DType::float8_e4m3fn, {3, 4}},
                                      {"D", D.data(), DType::float64, {5}}};
  RenameMap map({1, 2});
  map.add({NamePattern("q"), NamePattern("Q"), 0, 2, 0}).add("o", "O", 1).add("m", "M");
  map.add("f", "F").add("d", "D");
  const auto plan = plan_loading(metas, params, map, {.require_full_coverage = true});
  const std::vector<TensorView> views{{&metas[0], i8.data(), 48},
                                      {&metas[1], i64.data(), 192},
                                      {&metas[2], b1.data(), 10},
                                      {&metas[3], f8.data(), 12},
                                      {&metas[4], f64.data(), 40}};
  plan.load(std::span<const TensorView>(views), HostStream{});
  std::vector<std::int8_t> q_perm(48);
  for (std::int64_t hd = 0; hd < 2; ++hd)  // w.view(2, 2, 2, 6).transpose(1, 2)
    for (std::int64_t a = 0; a < 2; ++a)
      for (std::int64_t b = 0; b < 2; ++b)
        for (std::int64_t c = 0; c < 6; ++c)
          q_perm[static_cast<std::size_t>(((hd * 2 + a) * 2 + b) * 6 + c)] =
              i8[static_cast<std::size_t>(((hd * 2 + b) * 2 + a) * 6 + c)];
  CHECK(Q == std::vector<std::int8_t>(q_perm.begin() + 24, q_perm.end()));
  std::vector<std::int64_t> o_want;
  for (std::size_t r = 0; r < 4; ++r)
    for (std::size_t c = 3; c < 6; ++c) o_want.push_back(i64[r * 6 + c]);
  CHECK(O == o_want);
  CHECK(M == b1);
  CHECK(F == f8);
  CHECK(D == f64);
  // Casts from or to anything but fp32 / fp16 / bf16 fail at plan time, naming both dtypes.
  const auto refused = [&](DType from, DType to) -> std::string {
    std::vector<std::byte> mem(64);
    const std::vector<TensorMeta> m{{"t", from, {4}}};
    const std::vector<ParamInfo> p{{"T", mem.data(), to, {4}}};
    try {
      (void)plan_loading(m, p, RenameMap().add("t", "T"));
    } catch (const config_error& e) {
      return e.what();
    }
    return "no error";
  };
  CHECK(has(refused(DType::int8, DType::bfloat16), {"'t'", "cannot cast int8 to bfloat16"}));
  CHECK(has(refused(DType::float8_e4m3fn, DType::float16), {"cannot cast float8_e4m3fn"}));
  CHECK(has(refused(DType::float64, DType::float32), {"cannot cast float64 to float32"}));
  CHECK(has(refused(DType::bfloat16, DType::int64), {"cannot cast bfloat16 to int64"}));
  CHECK(has(refused(DType::uint8, DType::bool_), {"cannot cast uint8 to bool"}));
}

#if WEIGHTSYNC_HAS_CUDA
TEST_CASE(
    "loading cuda gather: every planned op has kernel codes (any element size copies, "
    "fp32/fp16/bf16 casts) and the PTX converts with the host's integer code",
    "[unit][loading]") {
  for (int k = 0; k < 12; ++k) {
    const auto d = static_cast<DType>(k);
    INFO(dtype_name(d));
    std::pair<unsigned, unsigned> c;
    REQUIRE_NOTHROW(c = detail::gather_type_codes(d, d));
    CHECK(c.first == c.second);
    const unsigned size[] = {0, 0, 0, 1, 2, 4, 8};
    REQUIRE(c.first < 7);
    CHECK(size[c.first] == dtype_size(d));
  }
  const DType f[] = {DType::float32, DType::float16, DType::bfloat16};
  for (const DType a : f)
    for (const DType b : f)
      if (a != b) {
        const auto c = detail::gather_type_codes(a, b);
        CHECK(c.first != c.second);
        CHECK(c.first < 3);
        CHECK(c.second < 3);
      }
  CHECK_THROWS_AS(detail::gather_type_codes(DType::int8, DType::bfloat16), config_error);
  CHECK_THROWS_AS(detail::gather_type_codes(DType::float64, DType::float32), config_error);
  // The hardware half conversions (cvt.rn.f16.f32, cvt.f32.f16) canonicalize NaNs; the kernel
  // must use the shared integer code instead, or NaN payloads differ from the host path's.
  const std::string ptx = detail::kGatherPtx;
  CHECK(ptx.find("cvt.rn.f16.f32") == std::string::npos);
  CHECK(ptx.find("cvt.f32.f16") == std::string::npos);
  CHECK(ptx.find(".entry ws_gather") != std::string::npos);
}
#endif

TEST_CASE("loading: name patterns and rename maps", "[unit][loading]") {
  std::vector<std::pair<std::string, std::string>> cap;
  const NamePattern p("model.layers.{i}.mlp.experts.{e}.up_proj.weight");
  REQUIRE(p.match("model.layers.12.mlp.experts.0.up_proj.weight", cap));
  CHECK(cap == std::vector<std::pair<std::string, std::string>>{{"i", "12"}, {"e", "0"}});
  CHECK(NamePattern("layers.{i}.w{e}").format(cap) == "layers.12.w0");
  CHECK_FALSE(p.match("model.layers.x.mlp.experts.0.up_proj.weight", cap));
  CHECK_FALSE(p.match("model.layers.1.mlp.experts.0.up_proj.weight.extra", cap));
  CHECK_FALSE(p.match("model.layers..mlp.experts.0.up_proj.weight", cap));
  CHECK_THROWS_AS(NamePattern("a.{i"), config_error);
  CHECK_THROWS_AS(NamePattern("a.{}"), config_error);

  RenameMap m({1, 2});
  m.add("h.{i}.attn.c_attn.weight", "model.layers.{i}.qkv", 0)
      .add("wte", "embed", -1)
      .add("h.{i}.proj", "o.{i}", 1);
  const auto a = m({"h.3.attn.c_attn.weight", DType::bfloat16, {8, 4}});
  REQUIRE(a);
  CHECK(*a == Placement{"model.layers.3.qkv", -1, 0, 0, 4, 4, 0});
  CHECK(*m({"wte", DType::bfloat16, {5, 4}}) == Placement{"embed"});
  CHECK(*m({"h.0.proj", DType::bfloat16, {4, 6}}) == Placement{"o.0", -1, 0, 1, 3, 3, 0});
  CHECK_FALSE(m({"other", DType::bfloat16, {1}}));
  CHECK_THROWS_AS(m({"h.0.proj", DType::bfloat16, {4, 5}}), config_error);  // 5 columns over TP 2
}

TEST_CASE("loading planner: bad maps and tables are config_errors naming the tensor",
          "[unit][loading]") {
  std::vector<std::byte> mem(64 * 4);
  std::vector<ParamInfo> params{{"w", mem.data(), DType::bfloat16, {4, 8}},
                                {"n", mem.data() + 64, DType::float32, {8}},
                                {"i", mem.data() + 128, DType::int32, {8}}};
  const std::vector<TensorMeta> one{{"a", DType::bfloat16, {4, 8}}};
  const auto err = [&](std::vector<TensorMeta> metas, LoadMap map,
                       const PlanOptions& opt = {}) -> std::string {
    try {
      (void)plan_loading(metas, params, map, opt);
    } catch (const config_error& e) {
      return e.what();
    }
    return "no error";
  };
  const auto to = [](Placement p) {
    return LoadMap([p](const TensorMeta&) { return std::optional<Placement>(p); });
  };
  CHECK(has(err(one, to({"nope"})), {"'a'", "unknown parameter 'nope'"}));
  CHECK(has(err(one, [](const TensorMeta&) { return std::optional<Placement>(); }),
            {"'a'", "does not place it"}));
  CHECK(err(one, [](const TensorMeta&) { return std::optional<Placement>(); },
            {.ignore_unmapped = true}) == "no error");
  CHECK(has(err({{"a", DType::bfloat16, {4, 7}}}, to({"w"})), {"rows hold 7"}));
  CHECK(has(err({{"a", DType::bfloat16, {5, 8}}}, to({"w"})), {"do not fit"}));
  CHECK(has(err({{"a", DType::bfloat16, {2, 8}}}, to({"w", -1, 3})), {"do not fit"}));
  CHECK(has(err({{"a", DType::bfloat16, {8}}}, to({"i"})), {"cannot cast bfloat16 to int32"}));
  CHECK(has(err({{"a", DType::bfloat16, {6, 8}}}, to({"w", -1, 0, 0, 5, 4})), {"outside dim 0"}));
  CHECK(
      has(err({{"a", DType::bfloat16, {6, 8}}}, to({"w", -1, 0, 0, 0, 4, 2})), {"rotary permute"}));
  CHECK(has(err({{"a", DType::bfloat16, {4, 8}}}, to({"w", 4})), {"expert 4"}));
  // Two tensors writing the same rows; a region nobody writes.
  const LoadMap half = [](const TensorMeta& m) {
    return std::optional<Placement>(Placement{"w", -1, m.name == "a" ? 0 : 1});
  };
  CHECK(has(err({{"a", DType::bfloat16, {2, 8}}, {"b", DType::bfloat16, {2, 8}}}, half),
            {"'b'", "overlaps"}));
  CHECK(has(err({{"a", DType::bfloat16, {2, 8}}}, half, {.require_full_coverage = true}),
            {"w[16, 32)"}));
  CHECK(
      has(err({{"a", DType::bfloat16, {2, 8}}, {"a", DType::bfloat16, {2, 8}}}, half), {"twice"}));
  // A device stream cannot run a gather (no CUDA kernel yet): a clear error, not a silent skip.
  const std::vector<TensorMeta> n{{"x", DType::bfloat16, {8}}};
  const auto plan = plan_loading(n, params, to({"n"}));
  std::uint16_t buf[8]{};
  const TensorView v{&n[0], buf, 16};
  const TensorMeta stranger{"y", DType::bfloat16, {8}};
  const TensorView sv{&stranger, buf, 16};
  CHECK_THROWS_AS(plan.load(std::span<const TensorView>(&sv, 1), HostStream{}), config_error);
  struct FakeDeviceStream {};
  CHECK_THROWS_AS(plan.load(std::span<const TensorView>(&v, 1), FakeDeviceStream{}), state_error);
}

TEST_CASE("loading planner: a declared dtype or shape other than the plan's gets no destination",
          "[unit][loading]") {
  // "w" is exactly a's size, with guard bytes after it: a larger declared shape must not get a
  // pointer into it (the consumer would write meta.nbytes() bytes there).
  std::vector<std::byte> mem(2 * 8 * 2 + 64, std::byte{0xCD});
  const std::vector<ParamInfo> params{{"w", mem.data(), DType::bfloat16, {2, 8}}};
  const std::vector<TensorMeta> metas{{"a", DType::bfloat16, {2, 8}}};
  const auto plan = plan_loading(metas, params, RenameMap().add("a", "w"));
  CHECK(plan.destination(metas[0]) == mem.data());
  CHECK(plan.destination({"unknown", DType::bfloat16, {2, 8}}) == nullptr);
  const auto refused = [&](const TensorMeta& m) -> std::string {
    try {
      (void)plan.destination(m);
    } catch (const config_error& e) {
      return e.what();
    }
    return "no error";
  };
  CHECK(has(refused({"a", DType::bfloat16, {4, 8}}), {"'a'", "shape", "(4, 8)", "(2, 8)"}));
  CHECK(has(refused({"a", DType::bfloat16, {16}}), {"'a'", "shape", "(16,)", "(2, 8)"}));
  CHECK(has(refused({"a", DType::float32, {2, 8}}), {"'a'", "dtype", "float32", "bfloat16"}));
  // The same through the consumer pipeline in real processes: the update declares a larger "a";
  // the consumer refuses it before a byte moves, and the parameter and its guard are untouched.
  const std::vector<TensorMeta> big{{"a", DType::bfloat16, {64, 8}}};
  std::vector<std::uint16_t> bytes(64 * 8, 0x1234);
  ws_test::Processes procs;
  const int port = ws_test::free_port();
  for (int rank = 0; rank < 2; ++rank)
    procs.spawn([&, rank] {
      RendezvousOptions o;
      o.port = port;
      o.rank = rank;
      o.world_size = 2;
      o.timeout = 20000ms;
      auto comm = HostCommunicator::connect(o, 30000ms);
      TransferOptions opt;
      opt.timeout = 20000ms;
      if (rank == 0) {
        std::vector<SourceTensorRef> items{{&big[0], bytes.data()}};
        try {
          (void)packed_broadcast_producer(big, items, comm, 0, opt);
        } catch (const error&) {  // the consumer's abort: expected
        }
        return;
      }
      opt.destination = plan.destination_fn();
      try {
        (void)packed_broadcast_consumer(big, comm, 0, plan.loader(), opt);
        throw std::runtime_error("the consumer accepted a larger shape than the plan's");
      } catch (const config_error& e) {
        if (!has(e.what(), {"'a'", "shape", "(64, 8)", "(2, 8)"})) throw;
      }
      for (const auto b : mem)
        if (b != std::byte{0xCD})
          throw std::runtime_error("the parameter or its guard was written");
    });
  for (const auto& res : procs.wait_all(60s)) {
    INFO(ws_test::outcome_name(res.outcome) << ": " << res.message);
    CHECK(res.outcome == ws_test::Outcome::ok);
  }
  // load() checks every view before it writes anything: a good view followed by a bad one
  // leaves the parameter as it was.
  std::vector<std::byte> mem2(64, std::byte{0xCD});
  const std::vector<ParamInfo> two{{"w", mem2.data(), DType::float32, {2, 8}}};
  const auto cast_plan = plan_loading(metas, two, RenameMap().add("a", "w"));
  const TensorMeta wrong{"a", DType::bfloat16, {4, 4}};
  const std::vector<TensorView> views{{&metas[0], bytes.data(), 32}, {&wrong, bytes.data(), 32}};
  CHECK_THROWS_AS(cast_plan.load(std::span<const TensorView>(views), HostStream{}), config_error);
  CHECK(mem2 == std::vector<std::byte>(64, std::byte{0xCD}));
}

TEST_CASE("loading: rotary permute (weight and 1-D bias), GQA replication, qkv bias, at TP 4",
          "[unit][loading]") {
  Dims d;
  d.cfg = {.hidden = 64, .n_heads = 8, .n_kv_heads = 2, .head_dim = 16, .intermediate = 96};
  d.cfg.permute_qk = GENERATE(false, true);
  d.qkv_bias = true;
  d.layers = 2;
  d.vocab = 70;  // padded to 128: rank 1's 32 rows are 6 real ones and 26 of padding
  const HfModel hf = make_hf(d);
  for (int tp : {1, 2, 4, 8}) {
    for (int r = 0; r < tp; ++r) {
      INFO("tp " << tp << " rank " << r << " permute " << d.cfg.permute_qk);
      Engine eng = make_engine(d, r, tp);
      const auto plan = plan_loading(hf.metas, eng.params, qwen2_map(d.cfg, {r, tp}));
      apply_in_process(hf, plan);
      CHECK_NOTHROW(check_against_reference(d, hf, eng, r, tp));
      // Without a destination callback, what could land in place arrives as views and is copied.
      Engine eng2 = make_engine(d, r, tp);
      const auto plan2 = plan_loading(hf.metas, eng2.params, qwen2_map(d.cfg, {r, tp}));
      apply_in_process(hf, plan2, false);
      CHECK_NOTHROW(check_against_reference(d, hf, eng2, r, tp));
      if (tp == 1 && !d.cfg.permute_qk)
        CHECK(plan.uncovered() == std::vector<std::string>{"model.embed_tokens.weight[4480, 8192)",
                                                           "lm_head.weight[4480, 8192)"});
    }
  }
  CHECK_THROWS_AS(qwen2_map(d.cfg, {0, 3}), config_error);
}

TEST_CASE("loading: with tie_word_embeddings the model maps skip lm_head", "[unit][loading]") {
  Dims d;
  d.cfg = {.hidden = 64, .n_heads = 8, .n_kv_heads = 2, .head_dim = 16, .intermediate = 96};
  d.vocab = 70;
  d.tied = true;
  const HfModel hf = make_hf(d);  // the trainer still sends lm_head.weight
  for (const int tp : {1, 2}) {
    INFO("tp " << tp);
    Engine eng = make_engine(d, tp - 1, tp);
    // Without the option lm_head maps to a parameter the engine does not have.
    try {
      (void)plan_loading(hf.metas, eng.params, qwen3_map(d.cfg, {tp - 1, tp}));
      FAIL("lm_head was planned into an engine without one");
    } catch (const config_error& e) {
      CHECK(has(e.what(), {"'lm_head.weight'", "unknown parameter"}));
    }
    ModelConfig c = d.cfg;
    c.tie_word_embeddings = true;
    const auto plan = plan_loading(hf.metas, eng.params, qwen3_map(c, {tp - 1, tp}));
    CHECK(plan.skipped_count() == 1);
    CHECK(plan.destination(hf.metas.back()) == nullptr);
    apply_in_process(hf, plan);
    CHECK_NOTHROW(check_against_reference(d, hf, eng, tp - 1, tp));
  }
}

TEST_CASE("loading: a param_mappings file renames, shards and permutes", "[unit][loading]") {
  const auto j = nlohmann::json::parse(R"({
    "tp_degree": 2, "dp_shard_degree": 1,
    "param_mappings": {
      "layers.0.attention.wq.weight": {"vllm_name": "model.layers.0.self_attn.q.weight", "needs_permute": true,
                                       "tp_shard_dim": 0, "local_shape": [16, 8]},
      "layers.0.attention.wo.weight": {"sglang_name": "model.layers.0.self_attn.o_proj.weight", "needs_permute": false,
                                       "tp_shard_dim": 1, "local_shape": [8, 16]},
      "norm.weight": {"vllm_name": "model.norm.weight", "needs_permute": false, "tp_shard_dim": 0, "local_shape": [8]}
    }})");
  const auto pm = parse_param_mappings(j);
  REQUIRE(pm.mappings.size() == 3);
  const auto map = param_mappings_map(pm, {1, 2}, /*head_dim=*/4);
  const auto q = map({"layers.0.attention.wq.weight", DType::bfloat16, {32, 8}});
  REQUIRE(q);
  CHECK(*q == Placement{"model.layers.0.self_attn.q.weight", -1, 0, 0, 16, 16, 8});
  CHECK(*map({"layers.0.attention.wo.weight", DType::bfloat16, {8, 32}}) ==
        Placement{"model.layers.0.self_attn.o_proj.weight", -1, 0, 1, 16, 16, 0});
  // local_shape is the full shape: replicated, although the bridge writes tp_shard_dim 0.
  CHECK(*map({"norm.weight", DType::bfloat16, {8}}) == Placement{"model.norm.weight"});
  // A trainer without TP cannot say what is sharded: everything lands whole.
  auto pm1 = pm;
  pm1.tp_degree = 1;
  CHECK(*param_mappings_map(pm1, {1, 2},
                            4)({"layers.0.attention.wo.weight", DType::bfloat16, {8, 16}}) ==
        Placement{"model.layers.0.self_attn.o_proj.weight"});
  CHECK_FALSE(map({"unknown", DType::bfloat16, {8}}));
  try {
    (void)map({"layers.0.attention.wq.weight", DType::bfloat16, {30, 8}});
    FAIL("a shape that fits no local_shape was accepted");
  } catch (const config_error& e) {
    CHECK(has(e.what(), {"local_shape"}));
  }
  CHECK_THROWS_AS(parse_param_mappings(
                      nlohmann::json::parse(R"({"param_mappings": {"a": {"local_shape": [1]}}})")),
                  config_error);
  CHECK_THROWS_AS(
      parse_param_mappings(nlohmann::json::parse(R"({"param_mappings": {}, "extra": 1})")),
      config_error);
  CHECK_THROWS_AS(param_mappings_map(pm, {0, 1}), config_error);  // needs_permute without head_dim

  // End to end at TP 2 rank 1: the permuted q rows [16, 32), through the planner.
  std::vector<std::uint16_t> wq(32 * 8), out(16 * 8, 0);
  for (std::size_t i = 0; i < wq.size(); ++i) wq[i] = static_cast<std::uint16_t>(i);
  const std::vector<TensorMeta> metas{{"layers.0.attention.wq.weight", DType::bfloat16, {32, 8}}};
  const std::vector<ParamInfo> params{
      {"model.layers.0.self_attn.q.weight", out.data(), DType::bfloat16, {16, 8}}};
  const auto plan = plan_loading(metas, params, map);
  const TensorView v{&metas[0], wq.data(), wq.size() * 2};
  plan.load(std::span<const TensorView>(&v, 1), HostStream{});
  const auto full = permute_ref(wq, 8, 32, 8);
  CHECK(std::vector<std::uint16_t>(full.begin() + 16 * 8, full.end()) == out);
}

TEST_CASE("loading: a param_mappings file fuses q/k/v and w1/w3, replicates unsharded tensors",
          "[unit][loading]") {
  // The bridge's form for one torchtitan layer, trainer at tp_degree 2 and dp_shard_degree 2
  // (local_shape: dim 0 / dp, tp_shard_dim / tp when TP-sharded; tp_shard_dim 0 when not).
  // 4 q heads and 2 kv heads of head_dim 4, hidden 8, intermediate 12.
  const auto j = nlohmann::json::parse(R"({
    "tp_degree": 2, "dp_shard_degree": 2,
    "param_mappings": {
      "layers.0.attention.wq.weight": {"sglang_name": "model.layers.0.self_attn.qkv_proj.weight",
                                       "needs_permute": true, "tp_shard_dim": 0, "local_shape": [4, 8]},
      "layers.0.attention.wk.weight": {"sglang_name": "model.layers.0.self_attn.qkv_proj.weight",
                                       "needs_permute": true, "tp_shard_dim": 0, "local_shape": [2, 8]},
      "layers.0.attention.wv.weight": {"sglang_name": "model.layers.0.self_attn.qkv_proj.weight",
                                       "needs_permute": false, "tp_shard_dim": 0, "local_shape": [2, 8]},
      "layers.0.attention.q_norm.weight": {"sglang_name": "model.layers.0.self_attn.q_norm.weight",
                                           "needs_permute": true, "tp_shard_dim": 0, "local_shape": [2]},
      "layers.0.attention_norm.weight": {"sglang_name": "model.layers.0.input_layernorm.weight",
                                         "needs_permute": false, "tp_shard_dim": 0, "local_shape": [4]},
      "layers.0.feed_forward.w1.weight": {"sglang_name": "model.layers.0.mlp.gate_up_proj.weight",
                                          "needs_permute": false, "tp_shard_dim": 0, "local_shape": [3, 8]},
      "layers.0.feed_forward.w3.weight": {"sglang_name": "model.layers.0.mlp.gate_up_proj.weight",
                                          "needs_permute": false, "tp_shard_dim": 0, "local_shape": [3, 8]},
      "layers.0.feed_forward.w2.weight": {"sglang_name": "model.layers.0.mlp.down_proj.weight",
                                          "needs_permute": false, "tp_shard_dim": 1, "local_shape": [4, 6]},
      "extra.b": {"vllm_name": "fused_ab", "tp_shard_dim": 0, "local_shape": [1, 8]},
      "extra.a": {"vllm_name": "fused_ab", "tp_shard_dim": 0, "local_shape": [2, 8]},
      "norm.weight": {"vllm_name": "model.norm.weight", "tp_shard_dim": 0, "local_shape": [4]}
    }})");
  const auto pm = parse_param_mappings(j);
  // The trainer's full tensors.
  HfModel hf;
  hf.add("layers.0.attention.wq.weight", {16, 8});
  hf.add("layers.0.attention.wk.weight", {8, 8});
  hf.add("layers.0.attention.wv.weight", {8, 8});
  hf.add("layers.0.attention.q_norm.weight", {4});
  hf.add("layers.0.attention_norm.weight", {8});
  hf.add("layers.0.feed_forward.w1.weight", {12, 8});
  hf.add("layers.0.feed_forward.w3.weight", {12, 8});
  hf.add("layers.0.feed_forward.w2.weight", {8, 12});
  hf.add("extra.a", {4, 8});
  hf.add("extra.b", {2, 8});
  hf.add("norm.weight", {8});
  for (const int tp : {1, 2, 4}) {
    for (int r = 0; r < tp; ++r) {
      INFO("engine tp " << tp << " rank " << r);
      const std::int64_t q = 16 / tp, kv = 8 / tp, il = 12 / tp;
      Engine eng;
      eng.mem.reserve(16);
      eng.add("model.layers.0.self_attn.qkv_proj.weight", DType::bfloat16, {q + 2 * kv, 8});
      eng.add("model.layers.0.self_attn.q_norm.weight", DType::bfloat16, {4});
      eng.add("model.layers.0.input_layernorm.weight", DType::bfloat16, {8});
      eng.add("model.layers.0.mlp.gate_up_proj.weight", DType::bfloat16, {2 * il, 8});
      eng.add("model.layers.0.mlp.down_proj.weight", DType::bfloat16, {8, il});
      eng.add("fused_ab", DType::bfloat16, {6, 8});
      eng.add("model.norm.weight", DType::bfloat16, {8});
      const auto plan = plan_loading(hf.metas, eng.params, param_mappings_map(pm, {r, tp}, 4),
                                     {.require_full_coverage = true});
      apply_in_process(hf, plan);
      // The reference, as plain loops: fused rows in vLLM's order, this rank's share of each.
      std::map<std::string, Bytes> want;
      for (std::size_t i = 0; i < eng.params.size(); ++i)
        want[eng.params[i].name] = Bytes(eng.mem[i].size());
      Bytes& qkv = want["model.layers.0.self_attn.qkv_proj.weight"];
      copy_rows(qkv, 0, permute_ref(hf.at("layers.0.attention.wq.weight"), 4, 16, 8), r * q, q, 8);
      copy_rows(qkv, q, permute_ref(hf.at("layers.0.attention.wk.weight"), 2, 8, 8), r * kv, kv, 8);
      copy_rows(qkv, q + kv, hf.at("layers.0.attention.wv.weight"), r * kv, kv, 8);
      copy_rows(want["model.layers.0.self_attn.q_norm.weight"], 0,
                permute_ref(hf.at("layers.0.attention.q_norm.weight"), 1, 4, 1), 0, 4, 1);
      copy_rows(want["model.layers.0.input_layernorm.weight"], 0,
                hf.at("layers.0.attention_norm.weight"), 0, 8, 1);
      Bytes& gu = want["model.layers.0.mlp.gate_up_proj.weight"];
      copy_rows(gu, 0, hf.at("layers.0.feed_forward.w1.weight"), r * il, il, 8);
      copy_rows(gu, il, hf.at("layers.0.feed_forward.w3.weight"), r * il, il, 8);
      copy_cols(want["model.layers.0.mlp.down_proj.weight"], 0,
                hf.at("layers.0.feed_forward.w2.weight"), 8, 12, r * il, il);
      copy_rows(want["fused_ab"], 0, hf.at("extra.a"), 0, 4, 8);  // key order: a, then b
      copy_rows(want["fused_ab"], 4, hf.at("extra.b"), 0, 2, 8);
      copy_rows(want["model.norm.weight"], 0, hf.at("norm.weight"), 0, 8, 1);
      for (std::size_t i = 0; i < eng.params.size(); ++i) {
        INFO("parameter " << eng.params[i].name);
        CHECK(eng.mem[i] == want.at(eng.params[i].name));
      }
    }
  }
  // Pieces whose rows do not split over the engine's TP name the piece.
  try {
    (void)plan_loading(hf.metas, std::vector<ParamInfo>{}, param_mappings_map(pm, {0, 3}, 4));
    FAIL("16 q rows were split over TP 3");
  } catch (const config_error& e) {
    CHECK(has(e.what(), {"tensor 'layers.0.attention.w"}));
  }
}

TEST_CASE("loading: Qwen3-8B shapes through rename + fuse + shard at TP 1, 2, 4, real processes",
          "[unit][loading][pipeline]") {
  const int tp = GENERATE(1, 2, 4);
  INFO("tp " << tp);
  run_processes(dense8b(), tp, true);
}

TEST_CASE(
    "loading: GQA (2 kv heads) replicated over TP 4, permuted q/k/norms and qkv bias, real "
    "processes",
    "[unit][loading][pipeline]") {
  // Each kv head is shared by two ranks: ranks 0 and 1 load k/v head 0, ranks 2 and 3 head 1.
  Dims d;
  d.cfg = {.hidden = 64, .n_heads = 8, .n_kv_heads = 2, .head_dim = 16, .intermediate = 96};
  d.cfg.permute_qk = true;
  d.qkv_bias = true;
  d.layers = 2;
  d.vocab = 70;
  const bool packed = GENERATE(true, false);
  INFO("packed " << packed);
  run_processes(d, 4, packed);
}

TEST_CASE("loading: Qwen3-30B-A3B experts stacked into w13/w2 at TP 1, 2, 4, real processes",
          "[unit][loading][pipeline]") {
  const int tp = GENERATE(1, 2, 4);
  INFO("tp " << tp);
  run_processes(moe30b(), tp, tp != 2);
}

}  // namespace ws_test_loading_test
