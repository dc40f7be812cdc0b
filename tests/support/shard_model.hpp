// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! A model split over M trainer ranks for the sharded tests: the full tensors (deterministic
//! bytes), and each rank's local shards cut out of them by the test's own index arithmetic (not
//! by ShardPiece's geometry), so that a receiver's result is checked against an independent
//! computation.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "weightsync/shard.hpp"
#include "weightsync/tensor_meta.hpp"

namespace ws_test {

using weightsync::DType;
using weightsync::ShardSpec;
using weightsync::SourceTensorRef;
using weightsync::TensorMeta;

//! Tensors of every kind: dim-0 and dim-1 (and dim-2) splits, sizes not divisible by M, explicit
//! uneven sizes with permuted ranks, replicated tensors on rank 0 and on rank M-1, empty and
//! 0-dim tensors.
inline void sharded_layout(int m, std::vector<TensorMeta>& metas, std::vector<ShardSpec>& specs) {
  auto add = [&](TensorMeta t, ShardSpec s) {
    metas.push_back(std::move(t));
    specs.push_back(std::move(s));
  };
  std::vector<std::int64_t> uneven;
  std::vector<int> reversed;
  for (int r = 0; r < m; ++r) {
    uneven.push_back(2 * r + 1);  // 1, 3, 5: sums to 4 (M=2) or 9 (M=3)
    reversed.push_back(m - 1 - r);
  }
  std::int64_t uneven_total = 0;
  for (auto v : uneven) uneven_total += v;
  add({"embed", DType::bfloat16, {37, 8}}, {0, {}, {}});
  add({"q", DType::float32, {5, 7}}, {1, {}, {}});
  add({"norm", DType::float32, {11}}, {});
  add({"o", DType::float16, {3, uneven_total, 4}}, {1, uneven, reversed});
  add({"bias", DType::float64, {6}}, {-1, {}, {m - 1}});
  add({"empty", DType::float32, {0, 4}}, {0, {}, {}});
  add({"scalar", DType::float32, {}}, {});
  add({"big", DType::float32, {64, 33}}, {0, {}, {}});
  add({"w2", DType::bfloat16, {9, 64}}, {1, {}, {}});
  add({"i8", DType::int8, {2, 3, 5}}, {2, {}, {}});
  add({"tiny", DType::uint8, {1, 2}}, {0, {}, {}});  // 1 row over M ranks: the others empty
}

//! Rows [begin, end) of the split dim for every piece, computed by the test: torch.chunk's ceil
//! split, or the explicit sizes; and each piece's rank.
struct TestPiece {
  int rank;
  std::int64_t begin, end;
};
inline std::vector<TestPiece> test_pieces(const TensorMeta& t, const ShardSpec& s, int m) {
  if (s.dim < 0) return {{s.ranks.empty() ? 0 : s.ranks[0], 0, 1}};
  const std::int64_t n = t.shape[static_cast<std::size_t>(s.dim)];
  std::vector<std::int64_t> sizes = s.sizes;
  if (sizes.empty()) {  // torch.chunk over the pieces: one per rank listed, else one per trainer
    const int k = s.ranks.empty() ? m : static_cast<int>(s.ranks.size());
    const std::int64_t per = (n + k - 1) / k;
    for (int r = 0; r < k; ++r)
      sizes.push_back(std::max<std::int64_t>(0, std::min(per, n - per * r)));
  }
  std::vector<TestPiece> out;
  std::int64_t at = 0;
  for (std::size_t p = 0; p < sizes.size(); ++p) {
    out.push_back({s.ranks.empty() ? static_cast<int>(p) : s.ranks[p], at, at + sizes[p]});
    at += sizes[p];
  }
  return out;
}

//! The bytes of rows [b, e) of dim d, as a contiguous tensor: element by element.
inline std::vector<std::byte> cut(const TensorMeta& t, const std::vector<std::byte>& full, int d,
                                  std::int64_t b, std::int64_t e) {
  if (d < 0) return full;
  const std::size_t es = weightsync::dtype_size(t.dtype);
  std::size_t outer = 1, inner = 1;
  for (std::size_t k = 0; k < t.shape.size(); ++k) {
    if (static_cast<int>(k) < d) outer *= static_cast<std::size_t>(t.shape[k]);
    if (static_cast<int>(k) > d) inner *= static_cast<std::size_t>(t.shape[k]);
  }
  const auto n = static_cast<std::size_t>(t.shape[static_cast<std::size_t>(d)]);
  std::vector<std::byte> out;
  for (std::size_t o = 0; o < outer; ++o)
    for (auto row = static_cast<std::size_t>(b); row < static_cast<std::size_t>(e); ++row)
      for (std::size_t i = 0; i < inner; ++i)
        for (std::size_t x = 0; x < es; ++x)
          out.push_back(full[((o * n + row) * inner + i) * es + x]);
  return out;
}

//! The full model of one round, and this trainer rank's shards of it.
struct ShardedModel {
  std::vector<TensorMeta> metas;
  std::vector<ShardSpec> specs;
  std::vector<std::vector<std::byte>> full;
  std::vector<std::vector<std::byte>> local;  // this rank's pieces, in declared order
  std::vector<const TensorMeta*> local_meta;

  //! `keep`: only the first `keep` tensors of the layout (a small model).
  ShardedModel(int m, int rank, std::uint64_t seed, int round,
               std::size_t keep = static_cast<std::size_t>(-1)) {
    sharded_layout(m, metas, specs);
    if (keep < metas.size()) {
      metas.resize(keep);
      specs.resize(keep);
    }
    for (std::size_t i = 0; i < metas.size(); ++i) {
      full.emplace_back(metas[i].nbytes());
      std::mt19937_64 rng(seed * 1000003 + i * 7919 + static_cast<std::uint64_t>(round));
      for (auto& b : full.back()) b = static_cast<std::byte>(rng());
    }
    for (std::size_t i = 0; i < metas.size(); ++i)
      for (const auto& p : test_pieces(metas[i], specs[i], m))
        if (p.rank == rank) {
          local.push_back(cut(metas[i], full[i], specs[i].dim, p.begin, p.end));
          local_meta.push_back(&metas[i]);
        }
  }
  std::vector<SourceTensorRef> items() const {
    std::vector<SourceTensorRef> v;
    for (std::size_t i = 0; i < local.size(); ++i)
      v.push_back({local_meta[i], local[i].empty() ? nullptr : local[i].data()});
    return v;
  }
};

}  // namespace ws_test
