// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

// The demo's model: a 2-64-64-3 MLP that learns to tell three interleaved spirals apart, trained in
// a second on a CPU. Shared by the trainer and the inference server so that both compute exactly
// the same function of the same weights (the end-to-end test compares their answers bit for bit).

#include <weightsync/loading/placement.hpp>
#include <weightsync/loading/planner.hpp>
#include <weightsync/tensor_meta.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace demo {

inline constexpr int kIn = 2;
inline constexpr int kHidden = 64;
inline constexpr int kClasses = 3;

struct Mlp {
  // Row-major weights, PyTorch-style names and shapes (out, in).
  std::vector<float> w1 = std::vector<float>(kHidden * kIn), b1 = std::vector<float>(kHidden);
  std::vector<float> w2 = std::vector<float>(kHidden * kHidden), b2 = std::vector<float>(kHidden);
  std::vector<float> w3 = std::vector<float>(kClasses * kHidden), b3 = std::vector<float>(kClasses);

  std::vector<float>* tensors() { return &w1; }
  std::vector<float>& tensor(std::size_t i) {
    std::vector<float>* all[] = {&w1, &b1, &w2, &b2, &w3, &b3};
    return *all[i];
  }
  const std::vector<float>& tensor(std::size_t i) const { return const_cast<Mlp*>(this)->tensor(i); }
};

inline std::vector<weightsync::TensorMeta> metas() {
  using weightsync::DType;
  return {{"mlp.0.weight", DType::float32, {kHidden, kIn}},
          {"mlp.0.bias", DType::float32, {kHidden}},
          {"mlp.2.weight", DType::float32, {kHidden, kHidden}},
          {"mlp.2.bias", DType::float32, {kHidden}},
          {"mlp.4.weight", DType::float32, {kClasses, kHidden}},
          {"mlp.4.bias", DType::float32, {kClasses}}};
}

// What the trainer sends: HuggingFace-style, unfused pieces. The first layer's 64 units go out as
// q/k/v-like row pieces (32 + 16 + 16 rows), the second layer's as gate/up-like halves; the
// server holds them fused (mlp.0.*, mlp.2.*) and a LoadPlan puts every piece at its rows.
struct Piece {
  weightsync::TensorMeta meta;
  std::size_t tensor;      // which of the Mlp's fused tensors (index into metas())
  std::int64_t first_row;  // where the piece starts in it
};

inline std::vector<Piece> hf_pieces() {
  using weightsync::DType;
  std::vector<Piece> p;
  const std::int64_t l0[3][2] = {{0, 32}, {32, 16}, {48, 16}};
  const char* qkv[3] = {"q_proj", "k_proj", "v_proj"};
  for (int k = 0; k < 3; ++k) {
    p.push_back({{std::string("layers.0.") + qkv[k] + ".weight", DType::float32, {l0[k][1], kIn}}, 0, l0[k][0]});
    p.push_back({{std::string("layers.0.") + qkv[k] + ".bias", DType::float32, {l0[k][1]}}, 1, l0[k][0]});
  }
  const char* gu[2] = {"gate_proj", "up_proj"};
  for (int k = 0; k < 2; ++k) {
    p.push_back({{std::string("layers.1.") + gu[k] + ".weight", DType::float32, {kHidden / 2, kHidden}}, 2, k * kHidden / 2});
    p.push_back({{std::string("layers.1.") + gu[k] + ".bias", DType::float32, {kHidden / 2}}, 3, k * kHidden / 2});
  }
  p.push_back({{"lm_head.weight", DType::float32, {kClasses, kHidden}}, 4, 0});
  p.push_back({{"lm_head.bias", DType::float32, {kClasses}}, 5, 0});
  return p;
}

inline std::vector<weightsync::TensorMeta> hf_metas() {
  std::vector<weightsync::TensorMeta> m;
  for (const auto& p : hf_pieces()) m.push_back(p.meta);
  return m;
}

//! Where each piece's bytes are in the trainer's (fused, for training) model.
inline std::vector<const void*> hf_pointers(const Mlp& m) {
  std::vector<const void*> out;
  for (const auto& p : hf_pieces()) {
    const auto& t = m.tensor(p.tensor);
    const std::size_t row = p.meta.shape.size() == 2 ? static_cast<std::size_t>(p.meta.shape[1]) : 1;
    out.push_back(t.data() + static_cast<std::size_t>(p.first_row) * row);
  }
  return out;
}

//! The server's side: HF piece name -> fused parameter and row (q, k, v and gate, up fused).
inline weightsync::LoadMap load_map() {
  return [pieces = hf_pieces(), names = metas()](const weightsync::TensorMeta& t) -> std::optional<weightsync::Placement> {
    for (const auto& p : pieces)
      if (p.meta.name == t.name) return weightsync::Placement{names[p.tensor].name, -1, p.first_row};
    return std::nullopt;
  };
}

//! The server's parameter table: its fused tensors, under their own names.
inline std::vector<weightsync::ParamInfo> param_table(Mlp& m) {
  std::vector<weightsync::ParamInfo> out;
  const auto names = metas();
  for (std::size_t i = 0; i < names.size(); ++i)
    out.push_back({names[i].name, m.tensor(i).data(), names[i].dtype, names[i].shape});
  return out;
}

inline void init_random(Mlp& m, unsigned seed) {
  std::mt19937 rng(seed);
  auto fill = [&](std::vector<float>& v, int fan_in) {
    std::normal_distribution<float> d(0.f, std::sqrt(2.f / static_cast<float>(fan_in)));
    for (auto& x : v) x = d(rng);
  };
  fill(m.w1, kIn);
  fill(m.w2, kHidden);
  fill(m.w3, kHidden);
  for (auto* b : {&m.b1, &m.b2, &m.b3}) std::fill(b->begin(), b->end(), 0.f);
}

struct Activations {
  float h1[kHidden], h2[kHidden], logits[kClasses];
};

//! The six fused tensors wherever they lie (an Mlp's vectors, or a snapshot of the server's
//! parameters in shadow mode), in metas() order.
struct MlpView {
  const float* t[6] = {};
};

inline MlpView view(const Mlp& m) {
  MlpView v;
  for (std::size_t i = 0; i < 6; ++i) v.t[i] = m.tensor(i).data();
  return v;
}

inline void forward(const MlpView& m, float x, float y, Activations& a) {
  const float *w1 = m.t[0], *b1 = m.t[1], *w2 = m.t[2], *b2 = m.t[3], *w3 = m.t[4], *b3 = m.t[5];
  for (int j = 0; j < kHidden; ++j) {
    const float z = w1[j * kIn] * x + w1[j * kIn + 1] * y + b1[j];
    a.h1[j] = z > 0 ? z : 0;
  }
  for (int j = 0; j < kHidden; ++j) {
    float z = b2[j];
    for (int k = 0; k < kHidden; ++k) z += w2[j * kHidden + k] * a.h1[k];
    a.h2[j] = z > 0 ? z : 0;
  }
  for (int c = 0; c < kClasses; ++c) {
    float z = b3[c];
    for (int k = 0; k < kHidden; ++k) z += w3[c * kHidden + k] * a.h2[k];
    a.logits[c] = z;
  }
}

inline void forward(const Mlp& m, float x, float y, Activations& a) { forward(view(m), x, y, a); }

inline int argmax(const float (&logits)[kClasses]) {
  int best = 0;
  for (int c = 1; c < kClasses; ++c)
    if (logits[c] > logits[best]) best = c;
  return best;
}

inline int predict(const MlpView& m, float x, float y) {
  Activations a;
  forward(m, x, y, a);
  return argmax(a.logits);
}

inline int predict(const Mlp& m, float x, float y) { return predict(view(m), x, y); }

//! The server's weights before its first sync ("default").
inline constexpr unsigned kServerInitSeed = 12345;

//! One version's weights as a file: the six fused tensors' float32 bytes back to back (metas()
//! order, host byte order). The trainer writes one per sync (--weights-dir) for the checker.
inline void save(const Mlp& m, const std::string& path) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  for (std::size_t i = 0; i < 6; ++i)
    f.write(reinterpret_cast<const char*>(m.tensor(i).data()),
            static_cast<std::streamsize>(m.tensor(i).size() * sizeof(float)));
  f.flush();
  if (!f) throw std::runtime_error("could not write the weights file '" + path + "'");
}

//! @throws std::runtime_error naming the file when it is missing or not exactly one Mlp.
inline Mlp load(const std::string& path) {
  Mlp m;
  std::ifstream f(path, std::ios::binary);
  for (std::size_t i = 0; i < 6 && f; ++i)
    f.read(reinterpret_cast<char*>(m.tensor(i).data()),
           static_cast<std::streamsize>(m.tensor(i).size() * sizeof(float)));
  if (!f || f.peek() != std::ifstream::traits_type::eof())
    throw std::runtime_error("the weights file '" + path + "' is missing or not one MLP");
  return m;
}

struct Dataset {
  std::vector<float> x, y;
  std::vector<int> label;
  std::size_t size() const { return label.size(); }
};

//! Three spirals, `per_class` noisy points each.
inline Dataset spirals(int per_class, unsigned seed) {
  Dataset d;
  std::mt19937 rng(seed);
  std::normal_distribution<float> noise(0.f, 0.08f);
  for (int c = 0; c < kClasses; ++c)
    for (int i = 0; i < per_class; ++i) {
      const float r = static_cast<float>(i) / static_cast<float>(per_class);
      const float t = 4.0f * r + 2.0944f * static_cast<float>(c) + noise(rng);
      d.x.push_back(r * std::sin(t));
      d.y.push_back(r * std::cos(t));
      d.label.push_back(c);
    }
  return d;
}

inline double accuracy(const Mlp& m, const Dataset& d) {
  std::size_t ok = 0;
  for (std::size_t i = 0; i < d.size(); ++i) ok += predict(m, d.x[i], d.y[i]) == d.label[i];
  return static_cast<double>(ok) / static_cast<double>(d.size());
}

//! One epoch of mini-batch SGD with softmax cross-entropy. Returns the mean loss.
inline double train_epoch(Mlp& m, const Dataset& d, float lr, std::mt19937& rng, int batch = 32) {
  std::vector<std::size_t> order(d.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  Mlp g;
  double loss = 0;
  for (std::size_t start = 0; start < order.size(); start += static_cast<std::size_t>(batch)) {
    for (int t = 0; t < 6; ++t) std::fill(g.tensor(static_cast<std::size_t>(t)).begin(), g.tensor(static_cast<std::size_t>(t)).end(), 0.f);
    const std::size_t end = std::min(order.size(), start + static_cast<std::size_t>(batch));
    for (std::size_t s = start; s < end; ++s) {
      const std::size_t i = order[s];
      Activations a;
      forward(m, d.x[i], d.y[i], a);
      float mx = a.logits[0];
      for (float l : a.logits) mx = std::max(mx, l);
      float p[kClasses], sum = 0;
      for (int c = 0; c < kClasses; ++c) sum += p[c] = std::exp(a.logits[c] - mx);
      float d3[kClasses];
      for (int c = 0; c < kClasses; ++c) {
        p[c] /= sum;
        d3[c] = p[c] - (c == d.label[i] ? 1.f : 0.f);
      }
      loss += -std::log(std::max(p[d.label[i]], 1e-12f));
      float dh2[kHidden] = {};
      for (int c = 0; c < kClasses; ++c) {
        g.b3[c] += d3[c];
        for (int k = 0; k < kHidden; ++k) {
          g.w3[c * kHidden + k] += d3[c] * a.h2[k];
          dh2[k] += d3[c] * m.w3[c * kHidden + k];
        }
      }
      float dh1[kHidden] = {};
      for (int j = 0; j < kHidden; ++j) {
        if (a.h2[j] <= 0) continue;
        g.b2[j] += dh2[j];
        for (int k = 0; k < kHidden; ++k) {
          g.w2[j * kHidden + k] += dh2[j] * a.h1[k];
          dh1[k] += dh2[j] * m.w2[j * kHidden + k];
        }
      }
      for (int j = 0; j < kHidden; ++j) {
        if (a.h1[j] <= 0) continue;
        g.b1[j] += dh1[j];
        g.w1[j * kIn] += dh1[j] * d.x[i];
        g.w1[j * kIn + 1] += dh1[j] * d.y[i];
      }
    }
    const float scale = lr / static_cast<float>(end - start);
    for (std::size_t t = 0; t < 6; ++t)
      for (std::size_t k = 0; k < m.tensor(t).size(); ++k) m.tensor(t)[k] -= scale * g.tensor(t)[k];
  }
  return loss / static_cast<double>(d.size());
}

}  // namespace demo
