// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#include <weightsync/chunk_plan.hpp>
#include <weightsync/layouts.hpp>

#include <random>
#include <vector>

#include "support/catch.hpp"

// (a namespace per test source: the sources build as unity translation units)
namespace ws_test_chunk_plan_test {

using namespace weightsync;

namespace {
// The rule as vLLM's packed producer states it, written independently of chunk_plan_sizes: keep
// taking tensors into the current chunk; after each one, if the chunk's total is strictly greater
// than B, the chunk ends there. Returns, for each tensor, the index of its chunk.
std::vector<std::size_t> naive_chunk_of(const std::vector<std::size_t>& sizes, std::size_t B) {
  std::vector<std::size_t> chunk_of(sizes.size());
  std::size_t chunk = 0;
  std::size_t total = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    chunk_of[i] = chunk;
    total += sizes[i];
    if (total > B) {
      ++chunk;
      total = 0;
    }
  }
  return chunk_of;
}

std::vector<Chunk> plan_of(std::initializer_list<std::size_t> sizes, std::size_t B) {
  std::vector<std::size_t> v(sizes);
  return chunk_plan_sizes(v, B);
}
}  // namespace

TEST_CASE("chunk plan: hand cases", "[unit][chunk_plan]") {
  // B=8: 2 then 100 closes (102 > 8); 3 is alone at the end.
  CHECK(plan_of({2, 100, 3}, 8) == std::vector<Chunk>{{0, 2, 102}, {2, 3, 3}});
  // 4+4 = 8 is not > 8: the chunk stays open; 12 > 8 closes it.
  CHECK(plan_of({4, 4, 4}, 8) == std::vector<Chunk>{{0, 3, 12}});
  CHECK(plan_of({8, 1}, 8) == std::vector<Chunk>{{0, 2, 9}});
  CHECK(plan_of({9, 1}, 8) == std::vector<Chunk>{{0, 1, 9}, {1, 2, 1}});
  CHECK(plan_of({}, 8).empty());
  CHECK(plan_of({0, 0}, 8) == std::vector<Chunk>{{0, 2, 0}});
  CHECK(plan_of({0, 9, 0}, 8) == std::vector<Chunk>{{0, 2, 9}, {2, 3, 0}});
  CHECK(plan_of({5, 5, 5, 5}, 1) ==
        std::vector<Chunk>{{0, 1, 5}, {1, 2, 5}, {2, 3, 5}, {3, 4, 5}});
  CHECK_THROWS_AS(plan_of({1}, 0), config_error);
}

TEST_CASE("chunk plan from metadata counts 0-dim and zero-size tensors", "[unit][chunk_plan]") {
  const std::vector<TensorMeta> metas = {
      {"scalar", DType::float32, {}},      // 4 bytes
      {"empty", DType::bfloat16, {0, 7}},  // 0 bytes
      {"w", DType::bfloat16, {2, 3}},      // 12 bytes
      {"b", DType::int64, {1}},            // 8 bytes
  };
  CHECK(chunk_plan(metas, 15) == std::vector<Chunk>{{0, 3, 16}, {3, 4, 8}});
  CHECK(chunk_plan(metas, 16) == std::vector<Chunk>{{0, 4, 24}});
  CHECK(unpacked_plan(metas) ==
        std::vector<Chunk>{{0, 1, 4}, {1, 2, 0}, {2, 3, 12}, {3, 4, 8}});
  CHECK(max_chunk_bytes(chunk_plan(metas, 15)) == 16);
}

TEST_CASE("chunk plan property: matches the naive rule on random layouts", "[unit][chunk_plan]") {
  std::mt19937_64 rng(20261121);
  std::size_t cases = 0;
  std::size_t exact_b_closures_kept_open = 0;
  std::size_t oversize = 0;
  for (int iter = 0; iter < 12000; ++iter) {
    const std::size_t B = 1 + rng() % (iter % 3 == 0 ? 16 : 4096);
    const std::size_t n = rng() % 40;
    std::vector<std::size_t> sizes(n);
    for (auto& s : sizes) {
      switch (rng() % 6) {
        case 0: s = 0; break;                  // zero-size tensor
        case 1: s = 4; break;                  // 0-dim float32
        case 2: s = B; break;                  // exactly B
        case 3: s = B + 1 + rng() % (3 * B); break;  // larger than B
        case 4: s = B - std::min<std::size_t>(B, 1 + rng() % 4); break;  // near B
        default: s = rng() % (B + 1); break;
      }
    }
    // Force some running totals to land exactly on B.
    if (n >= 2 && iter % 5 == 0) {
      sizes[0] = B / 2;
      sizes[1] = B - B / 2;
    }
    const auto plan = chunk_plan_sizes(sizes, B);
    const auto ref = naive_chunk_of(sizes, B);
    // Same partition.
    std::vector<std::size_t> got(n);
    for (std::size_t c = 0; c < plan.size(); ++c)
      for (std::size_t i = plan[c].begin; i < plan[c].end; ++i) got[i] = c;
    REQUIRE(got == ref);
    // Structural properties.
    std::size_t expect_begin = 0;
    for (std::size_t c = 0; c < plan.size(); ++c) {
      const auto& ch = plan[c];
      REQUIRE(ch.begin == expect_begin);
      REQUIRE(ch.end > ch.begin);
      std::size_t bytes = 0, before_last = 0;
      for (std::size_t i = ch.begin; i < ch.end; ++i) {
        before_last = bytes;
        bytes += sizes[i];
      }
      REQUIRE(ch.bytes == bytes);
      REQUIRE(before_last <= B);  // every prefix but the whole chunk stays <= B
      if (c + 1 < plan.size()) REQUIRE(bytes > B);  // only the last chunk may be <= B
      if (bytes == B) ++exact_b_closures_kept_open;
      if (ch.size() == 1 && bytes > B) ++oversize;
      expect_begin = ch.end;
    }
    REQUIRE(expect_begin == n);
    ++cases;
  }
  CHECK(cases >= 10000);
  CHECK(exact_b_closures_kept_open > 0);  // the generator did hit totals of exactly B
  CHECK(oversize > 0);
}

TEST_CASE("benchmark layouts match DESIGN.md", "[unit][chunk_plan][layouts]") {
  using namespace weightsync::layouts;
  CHECK(dense8b().size() == 399);
  CHECK(moe30b().size() == 18867);
  CHECK(small1b().size() == 310);
  CHECK(lora8b().size() == 504);
  // DESIGN.md rounds to 16.38 GB, 61.06 GB, 1.19 GB, 87 MB.
  CHECK(total_bytes(dense8b()) / 10'000'000 == 1638);
  CHECK(total_bytes(moe30b()) / 10'000'000 == 6106);
  CHECK(total_bytes(small1b()) / 10'000'000 == 119);
  CHECK(total_bytes(lora8b()) / 1'000'000 == 87);
  CHECK(by_name("synthetic:3x10").size() == 3);
  CHECK_THROWS_AS(by_name("synthetic:3"), config_error);
  CHECK_THROWS_AS(by_name("dense9b"), config_error);
}

}  // namespace ws_test_chunk_plan_test
