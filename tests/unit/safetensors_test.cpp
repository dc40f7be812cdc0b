// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// safetensors: byte-exact format (hand-built bytes in the reference writer's layout), round trips
// through the mmap reader and the writer, every malformed-header case, truncation at every byte.
#include <weightsync/host/communicator.hpp>
#include <weightsync/layouts.hpp>
#include <weightsync/packed_broadcast.hpp>
#include <weightsync/safetensors.hpp>

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "support/catch.hpp"
#include "support/process.hpp"

// (a namespace per test source: the sources build as unity translation units)
namespace ws_test_safetensors_test {

using namespace weightsync;
using namespace std::chrono_literals;

namespace {

std::vector<std::byte> file_bytes(const std::string& json, std::size_t data_bytes,
                                  std::uint8_t fill = 0) {
  std::vector<std::byte> f(8 + json.size() + data_bytes, std::byte{fill});
  const std::uint64_t n = json.size();
  for (int i = 0; i < 8; ++i)
    f[static_cast<std::size_t>(i)] = std::byte(static_cast<std::uint8_t>(n >> (8 * i)));
  std::memcpy(f.data() + 8, json.data(), json.size());
  return f;
}

// The error parse_safetensors_header throws for this file; fails the test if it parses or throws
// anything but config_error.
std::string error_of(const std::vector<std::byte>& f) {
  try {
    (void)parse_safetensors_header(f);
  } catch (const config_error& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL("not a config_error: " << e.what());
  }
  FAIL("parsed without error");
  return {};
}

std::string error_of(const std::string& json, std::size_t data_bytes) {
  return error_of(file_bytes(json, data_bytes));
}

std::string temp_path(const char* tag) {
  return "/tmp/ws_st_" + std::to_string(::getpid()) + "_" + tag + ".safetensors";
}

std::vector<std::byte> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> c((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> b(c.size());
  if (!c.empty()) std::memcpy(b.data(), c.data(), c.size());
  return b;
}

bool contains_all(const std::string& m, std::initializer_list<const char*> parts) {
  for (const char* p : parts)
    if (m.find(p) == std::string::npos) return false;
  return true;
}

std::string finish_error(SafetensorsWriter& w) {
  try {
    w.finish();
  } catch (const config_error& e) {
    return e.what();
  }
  return "finish() did not throw";
}

}  // namespace

// The message of a config_error contains every one of the given parts.
#define CHECK_ERR(expr, ...)                     \
  do {                                           \
    const std::string ws_msg_ = (expr);          \
    INFO(ws_msg_);                               \
    CHECK(contains_all(ws_msg_, {__VA_ARGS__})); \
  } while (0)

TEST_CASE("safetensors: the writer produces the reference layout byte for byte",
          "[unit][safetensors]") {
  // What safetensors' serialize() writes for {"attn.0": float32 (1, 1, 2, 3) = 0..5}: the length
  // prefix, the compact JSON with keys dtype, shape, data_offsets, spaces up to a multiple of 8.
  const std::string json = R"({"attn.0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}})";
  REQUIRE(json.size() == 66);
  std::vector<std::byte> want = file_bytes(json + "      ", 24);
  REQUIRE(std::to_integer<int>(want[0]) == 72);
  float vals[6] = {0, 1, 2, 3, 4, 5};
  std::memcpy(want.data() + 8 + 72, vals, sizeof vals);

  const TensorMeta m{"attn.0", DType::float32, {1, 1, 2, 3}};
  const std::vector<SourceTensorRef> src{{&m, vals}};
  const auto path = temp_path("ref");
  write_safetensors(path, src);
  CHECK(read_file(path) == want);

  auto f = SafetensorsFile::open(path);
  REQUIRE(f.metas().size() == 1);
  CHECK(f.metas()[0] == m);
  CHECK(f.header().data_offset == 80);
  CHECK(std::memcmp(f.bytes(0).data(), vals, 24) == 0);
  ::unlink(path.c_str());
}

TEST_CASE("safetensors: round trip of every dtype, scalars, empty tensors and metadata",
          "[unit][safetensors]") {
  std::vector<TensorMeta> metas;
  for (DType d : all_dtypes()) metas.push_back({"t." + std::string(dtype_name(d)), d, {3, 5}});
  metas.push_back({"scalar", DType::float32, {}});
  metas.push_back({"empty", DType::bfloat16, {0, 7}});
  metas.push_back({"model.layers.0.self_attn.q_proj.weight", DType::bfloat16, {64, 32}});
  std::mt19937 rng(7);
  std::vector<std::vector<std::byte>> data;
  std::vector<SourceTensorRef> src;
  for (const auto& m : metas) {
    data.emplace_back(m.nbytes());
    for (auto& b : data.back()) b = std::byte(static_cast<std::uint8_t>(rng()));
  }
  for (std::size_t i = 0; i < metas.size(); ++i) src.push_back({&metas[i], data[i].data()});
  STATIC_REQUIRE(TensorIterator<std::vector<SourceTensorRef>>);

  const auto path = temp_path("rt");
  write_safetensors(path, src, {{"format", "pt"}, {"step", "12"}});
  auto f = SafetensorsFile::open(path);
  CHECK(f.metas() == metas);  // the writer lays tensors out in the given order
  CHECK(f.header().metadata ==
        std::vector<std::pair<std::string, std::string>>{{"format", "pt"}, {"step", "12"}});
  CHECK(f.header().data_offset % 8 == 0);
  const auto items = f.tensors();
  REQUIRE(items.size() == metas.size());
  for (std::size_t i = 0; i < metas.size(); ++i) {
    CHECK(items[i].meta() == metas[i]);
    CHECK((metas[i].nbytes() == 0 ||
           std::memcmp(items[i].data(), data[i].data(), metas[i].nbytes()) == 0));
  }
  // A file read back and written again is the same file.
  const auto path2 = temp_path("rt2");
  write_safetensors(path2, f.tensors(), f.header().metadata);
  CHECK(read_file(path2) == read_file(path));
  ::unlink(path.c_str());
  ::unlink(path2.c_str());
}

TEST_CASE("safetensors: a file in another writer's order is read in data order",
          "[unit][safetensors]") {
  // Header order differs from data order (the reference writer sorts by alignment, then name).
  const std::string json =
      R"({"__metadata__":{"format":"pt"},"b":{"dtype":"BF16","shape":[2],"data_offsets":[8,12]},)"
      R"("a":{"dtype":"I64","shape":[1],"data_offsets":[0,8]},"z":{"dtype":"U8","shape":[0],"data_offsets":[12,12]}})";
  const auto h = parse_safetensors_header(file_bytes(json, 12));
  REQUIRE(h.tensors.size() == 3);
  CHECK(h.tensors[0].meta == TensorMeta{"a", DType::int64, {1}});
  CHECK(h.tensors[1].meta == TensorMeta{"b", DType::bfloat16, {2}});
  CHECK(h.tensors[2].meta.name == "z");
  CHECK(h.data_bytes == 12);
  CHECK(parse_safetensors_header(file_bytes("{}", 0)).tensors.empty());
  // Trailing spaces (the writers' padding) are part of the header.
  CHECK(parse_safetensors_header(
            file_bytes(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}   )", 2))
            .tensors.size() == 1);
}

TEST_CASE("safetensors: every malformed header is a config_error naming the tensor and field",
          "[unit][safetensors]") {
  const auto ok = [](const std::string& body) { return "{\"w\":{" + body + "}}"; };
  // Length prefix and framing.
  CHECK_ERR(error_of(std::vector<std::byte>{}), "header length", "0 bytes");
  CHECK_ERR(error_of(std::vector<std::byte>(7)), "header length");
  {
    auto f = file_bytes("{}", 0);
    f[0] = std::byte{200};
    CHECK_ERR(error_of(f), "header length", "truncated");
    f[0] = std::byte{2};
    f[7] = std::byte{0xff};  // 2^63-ish: over the limit, and no overflow in the bound check
    CHECK_ERR(error_of(f), "over the limit");
  }
  CHECK_ERR(error_of("", 0), "starting with '{'");
  CHECK_ERR(error_of("  {}", 0), "starting with '{'");
  CHECK_ERR(error_of("{\"w\":", 0), "invalid JSON");
  CHECK_ERR(error_of("{\"a\":1}", 0), "'a'", "expected an object");
  CHECK_ERR(error_of("{\"a\":{\"b\":{\"c\":[[1]]}}}", 0), "nested deeper");
  // Keys of an entry.
  CHECK_ERR(error_of(ok(R"("shape":[1],"data_offsets":[0,1])"), 1), "'w' dtype", "missing");
  CHECK_ERR(error_of(ok(R"("dtype":"U8","data_offsets":[0,1])"), 1), "'w' shape", "missing");
  CHECK_ERR(error_of(ok(R"("dtype":"U8","shape":[1])"), 1), "'w' data_offsets", "missing");
  CHECK_ERR(error_of(ok(R"("dtype":"U8","shape":[1],"data_offsets":[0,1],"x":1)"), 1), "'w' x",
            "unknown key");
  // dtype.
  CHECK_ERR(error_of(ok(R"("dtype":3,"shape":[1],"data_offsets":[0,1])"), 1), "'w' dtype",
            "string");
  CHECK_ERR(error_of(ok(R"("dtype":"U16","shape":[1],"data_offsets":[0,2])"), 2), "'w' dtype",
            "'U16'");
  CHECK_ERR(error_of(ok(R"("dtype":"bf16","shape":[1],"data_offsets":[0,2])"), 2), "'w' dtype");
  // shape.
  CHECK_ERR(error_of(ok(R"("dtype":"U8","shape":1,"data_offsets":[0,1])"), 1), "'w' shape",
            "array");
  CHECK_ERR(error_of(ok(R"("dtype":"U8","shape":[-1],"data_offsets":[0,1])"), 1), "'w' shape[0]",
            ">= 0");
  CHECK_ERR(error_of(ok(R"("dtype":"U8","shape":[1,1.5],"data_offsets":[0,1])"), 1),
            "'w' shape[1]");
  CHECK_ERR(error_of(ok(R"("dtype":"U8","shape":[18446744073709551615],"data_offsets":[0,1])"), 1),
            "'w' shape[0]", "out of range");
  CHECK_ERR(
      error_of(ok(R"("dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,1])"), 1),
      "'w' shape", "overflows");
  CHECK_ERR(error_of(ok(R"("dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,1])"), 1),
            "'w' shape", "overflows");
  // data_offsets.
  CHECK_ERR(error_of(ok(R"("dtype":"U8","shape":[1],"data_offsets":[0])"), 1), "'w' data_offsets");
  CHECK_ERR(error_of(ok(R"("dtype":"U8","shape":[1],"data_offsets":{"a":0})"), 1),
            "'w' data_offsets");
  CHECK_ERR(error_of(ok(R"("dtype":"U8","shape":[1],"data_offsets":[-1,0])"), 1),
            "'w' data_offsets[0]");
  CHECK_ERR(error_of(ok(R"("dtype":"U8","shape":[1],"data_offsets":[0,"1"])"), 1),
            "'w' data_offsets[1]");
  CHECK_ERR(error_of(ok(R"("dtype":"U8","shape":[0],"data_offsets":[1,0])"), 1), "'w' data_offsets",
            "after end");
  CHECK_ERR(error_of(ok(R"("dtype":"F32","shape":[2],"data_offsets":[0,4])"), 4),
            "'w' data_offsets", "needs 8");
  CHECK_ERR(error_of(ok(R"("dtype":"U8","shape":[4],"data_offsets":[0,4])"), 3), "'w' data_offsets",
            "past the data buffer");
  CHECK_ERR(
      error_of(
          ok(R"("dtype":"U8","shape":[1],"data_offsets":[18446744073709551614,18446744073709551615])"),
          1),
      "'w' data_offsets");
  // Tiling of the data buffer.
  const std::string two =
      R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[)";
  CHECK_ERR(error_of(two + "2,6]}}", 6), "'b' data_offsets", "overlaps tensor 'a'");
  CHECK_ERR(error_of(two + "5,9]}}", 9), "'b' data_offsets", "hole");
  CHECK_ERR(error_of(two + "4,8]}}", 9), "safetensors data", "trailing");
  CHECK_ERR(
      error_of(
          R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
          2),
      "'a'", "twice");
  // __metadata__.
  CHECK_ERR(error_of(R"({"__metadata__":[1]})", 0), "__metadata__");
  CHECK_ERR(error_of(R"({"__metadata__":{"k":1}})", 0), "__metadata__.k", "string");
}

TEST_CASE("safetensors: every truncation and random corruption of a file is handled",
          "[unit][safetensors]") {
  const std::string json =
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]},)"
      R"("b":{"dtype":"F32","shape":[],"data_offsets":[12,16]}})";
  const auto good = file_bytes(json, 16, 0x5a);
  REQUIRE(parse_safetensors_header(good).tensors.size() == 2);
  for (std::size_t n = 0; n < good.size(); ++n) {
    INFO("truncated to " << n << " bytes");
    (void)error_of(
        std::vector<std::byte>(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n)));
  }
  std::mt19937 rng(42);
  int parsed = 0, rejected = 0;
  for (int it = 0; it < 20000; ++it) {
    auto f = good;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k)
      f[rng() % (8 + json.size())] = std::byte(static_cast<std::uint8_t>(rng()));
    try {
      const auto h = parse_safetensors_header(f);
      for (const auto& e : h.tensors) REQUIRE(h.data_offset + e.end <= f.size());
      ++parsed;
    } catch (const config_error&) {
      ++rejected;
    }
  }
  CHECK(rejected > 0);
  INFO(parsed << " corrupted files still parsed");
}

TEST_CASE("safetensors: open errors", "[unit][safetensors]") {
  CHECK_THROWS_AS(SafetensorsFile::open("/nonexistent/x.safetensors"), system_error);
  const auto path = temp_path("bad");
  { std::ofstream(path, std::ios::binary) << "abc"; }
  CHECK_THROWS_AS(SafetensorsFile::open(path), config_error);
  ::unlink(path.c_str());
}

TEST_CASE("safetensors: a consumer dumps what it receives, a producer sends a file from disk",
          "[unit][safetensors][pipeline]") {
  std::vector<TensorMeta> metas;
  for (int i = 0; i < 12; ++i)
    metas.push_back({"layer." + std::to_string(i),
                     i % 2 ? DType::bfloat16 : DType::float32,
                     {static_cast<std::int64_t>(100 + 37 * i), 3}});
  metas.push_back({"empty", DType::float16, {0}});
  std::vector<std::vector<std::byte>> data;
  std::vector<SourceTensorRef> src;
  std::mt19937 rng(3);
  for (const auto& m : metas) {
    data.emplace_back(m.nbytes());
    for (auto& b : data.back()) b = std::byte(static_cast<std::uint8_t>(rng()));
  }
  for (std::size_t i = 0; i < metas.size(); ++i) src.push_back({&metas[i], data[i].data()});
  const auto in = temp_path("in"), out = temp_path("out");
  write_safetensors(in, src);

  ws_test::Processes procs;
  const int port = ws_test::free_port();
  for (int rank = 0; rank < 2; ++rank)
    procs.spawn([=] {
      RendezvousOptions o;
      o.port = port;
      o.rank = rank;
      o.world_size = 2;
      o.timeout = 10000ms;
      auto comm = HostCommunicator::connect(o, 5000ms);
      TransferOptions opt;
      opt.packed = true;
      opt.buffer_size_bytes = 1000;
      if (rank == 0) {
        auto f = SafetensorsFile::open(in);
        (void)packed_broadcast_producer(f.metas(), f.tensors(), comm, 0, opt);
      } else {
        SafetensorsWriter w(out, metas);
        (void)packed_broadcast_consumer(metas, comm, 0, w, opt);
        w.finish();
      }
    });
  for (const auto& r : procs.wait_all(60s)) {
    INFO(ws_test::outcome_name(r.outcome) << ": " << r.message);
    CHECK(r.outcome == ws_test::Outcome::ok);
  }
  CHECK(read_file(out) == read_file(in));
  ::unlink(in.c_str());
  ::unlink(out.c_str());
}

TEST_CASE("safetensors writer: undeclared, duplicate, mismatched and missing tensors",
          "[unit][safetensors]") {
  const auto path = temp_path("w");
  const std::vector<TensorMeta> metas{{"a", DType::uint8, {2}}, {"b", DType::uint8, {3}}};
  SafetensorsWriter w(path, metas);
  std::byte buf[3]{};
  const TensorMeta other{"c", DType::uint8, {2}}, wrong{"a", DType::uint8, {3}};
  const TensorView vc{&other, buf, 2}, va{&metas[0], buf, 2}, vwrong{&wrong, buf, 3};
  CHECK_THROWS_AS(w(std::span<const TensorView>(&vc, 1)), config_error);
  CHECK_THROWS_AS(w(std::span<const TensorView>(&vwrong, 1)), config_error);
  w(std::span<const TensorView>(&va, 1));
  CHECK_THROWS_AS(w(std::span<const TensorView>(&va, 1)), config_error);
  CHECK_ERR(finish_error(w), "'b'", "never written");
  CHECK_THROWS_AS(SafetensorsWriter(path, {{"x", DType::uint8, {1}}, {"x", DType::uint8, {1}}}),
                  config_error);
  ::unlink(path.c_str());
}

TEST_CASE("safetensors: a header with moe30b's 18867 names writes and parses",
          "[unit][safetensors]") {
  const auto layout = layouts::moe30b();
  std::vector<TensorMeta> metas;
  for (const auto& m : layout) metas.push_back({m.name, DType::bfloat16, {2}});  // tiny tensors
  std::vector<std::uint16_t> data(2 * metas.size(), 0x3f80);
  std::vector<SourceTensorRef> src;
  for (std::size_t i = 0; i < metas.size(); ++i) src.push_back({&metas[i], data.data() + 2 * i});
  const auto path = temp_path("many");
  write_safetensors(path, src);
  auto f = SafetensorsFile::open(path);
  REQUIRE(f.metas().size() == 18867);
  CHECK(f.metas() == metas);  // data order is the writer's order
  ::unlink(path.c_str());
}

}  // namespace ws_test_safetensors_test
