// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#include <cstdint>
#include <weightsync/dtype.hpp>
#include <weightsync/tensor_meta.hpp>

#include <limits>
#include <string>

#include "support/catch.hpp"

// (a namespace per test source: the sources build as unity translation units)
namespace ws_test_dtype_test {

using namespace weightsync;

TEST_CASE("dtype names, sizes and parsing round-trip", "[unit][dtype]") {
  const std::pair<const char*, std::size_t> expected[] = {
      {"float32", 4}, {"float16", 2}, {"bfloat16", 2}, {"float64", 8},
      {"int8", 1},    {"uint8", 1},   {"int16", 2},    {"int32", 4},
      {"int64", 8},   {"bool", 1},    {"float8_e4m3fn", 1}, {"float8_e5m2", 1}};
  const auto all = all_dtypes();
  REQUIRE(all.size() == std::size(expected));
  for (std::size_t i = 0; i < all.size(); ++i) {
    CHECK(dtype_name(all[i]) == expected[i].first);
    CHECK(dtype_size(all[i]) == expected[i].second);
    CHECK(parse_dtype(expected[i].first) == all[i]);
    CHECK(parse_dtype(std::string("torch.") + expected[i].first) == all[i]);
  }
  CHECK(parse_dtype("bool") == DType::bool_);
}

TEST_CASE("parse_dtype names the unknown dtype", "[unit][dtype]") {
  for (const char* bad : {"float", "bf16", "Float32", "", "torch.", "float8_e4m3"}) {
    try {
      (void)parse_dtype(bad);
      FAIL("accepted " << bad);
    } catch (const config_error& e) {
      CHECK(std::string(e.what()).find(std::string("'") + bad + "'") != std::string::npos);
      CHECK(std::string(e.what()).find("bfloat16") != std::string::npos);  // lists known names
    }
  }
}

TEST_CASE("TensorMeta numel and nbytes", "[unit][dtype]") {
  TensorMeta scalar{"s", DType::float32, {}};
  CHECK(scalar.numel() == 1);
  CHECK(scalar.nbytes() == 4);
  TensorMeta empty{"e", DType::bfloat16, {3, 0, 5}};
  CHECK(empty.numel() == 0);
  CHECK(empty.nbytes() == 0);
  TensorMeta m{"w", DType::bfloat16, {151936, 4096}};
  CHECK(m.numel() == 151936ull * 4096);
  CHECK(m.nbytes() == 151936ull * 4096 * 2);
}

TEST_CASE("TensorMeta rejects negative dims and overflow", "[unit][dtype]") {
  TensorMeta neg{"layer.w", DType::float32, {4, -1}};
  CHECK_THROWS_AS(neg.numel(), config_error);
  try {
    neg.validate();
  } catch (const config_error& e) {
    CHECK(std::string(e.what()).find("layer.w") != std::string::npos);
    CHECK(std::string(e.what()).find("-1") != std::string::npos);
  }
  const auto big = std::numeric_limits<std::int64_t>::max();
  TensorMeta over{"o", DType::float32, {big, big}};
  CHECK_THROWS_AS(over.numel(), config_error);
  // numel fits, nbytes does not
  TensorMeta over_bytes{"ob", DType::float64, {std::int64_t{1} << 62}};
  CHECK(over_bytes.numel() == (std::size_t{1} << 62));
  CHECK_THROWS_AS(over_bytes.nbytes(), config_error);
  // a zero dim makes any product valid
  TensorMeta zero{"z", DType::float32, {big, 0, big}};
  CHECK(zero.nbytes() == 0);
}

}  // namespace ws_test_dtype_test
