// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// What a delta trainer keeps of the receivers' version (delta/low_byte.hpp, DeltaReference):
// the low-byte reference's nearest-value rebuild, its block check catching a change that kept the
// low byte (and sending that block whole in the same round), rounds of random changes (a random
// bit of a random byte: half of the 2-byte changes keep the low byte) that end bit-exact on the
// receiver against the full reference's rounds, the memory each option keeps, and full anchors.
#include <weightsync/delta/codec.hpp>
#include <weightsync/delta/low_byte.hpp>
#include <weightsync/delta/source.hpp>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "support/catch.hpp"

// (a namespace per test source: the sources build as unity translation units)
namespace ws_test_delta_reference_test {

using namespace weightsync;
using namespace weightsync::delta;

namespace {

using Bytes = std::vector<std::byte>;

std::uint16_t get16(const Bytes& b, std::size_t i) {
  std::uint16_t v;
  std::memcpy(&v, b.data() + 2 * i, 2);
  return v;
}
void put16(Bytes& b, std::size_t i, std::uint16_t v) {
  std::memcpy(b.data() + 2 * i, &v, 2);
}

// bf16-like values: random signs, exponents near 1.0, random mantissas.
Bytes weights(std::size_t n, std::mt19937& rng) {
  Bytes b(2 * n);
  for (std::size_t i = 0; i < n; ++i)
    put16(b, i, static_cast<std::uint16_t>((rng() & 0x8000u) | (0x3c00u + rng() % 0x600u)));
  return b;
}

// An optimizer-like step: `density` of the elements move by 1..3 steps of their magnitude.
void small_step(Bytes& b, double density, std::mt19937& rng) {
  std::bernoulli_distribution pick(density);
  for (std::size_t i = 0; i < b.size() / 2; ++i)
    if (pick(rng)) {
      const std::uint16_t v = get16(b, i);
      const int d = static_cast<int>(rng() % 3) + 1;
      put16(b, i, static_cast<std::uint16_t>((v & 0x8000u) | ((v & 0x7fffu) + d)));
    }
}

// One low-byte round of `src` against `ref` (updated in place): the blob, applied onto `dst`.
struct Round {
  std::vector<std::uint32_t> counts;
  std::uint64_t failed = 0, sent = 0;
};
Round low_byte_round(const Bytes& src, Bytes& ref, Bytes& dst, std::uint32_t bucket) {
  const std::uint64_t n = src.size() / 2;
  Round r;
  std::vector<std::uint64_t> bits;
  r.counts = low_byte_changes_host(src.data(), ref.data(), n, bucket, bits, &r.failed);
  Bytes blob(blob_bytes_for(r.counts, n, 2, bucket));
  encode_delta_host_if(src.data(), n, 2, bucket, r.counts, blob.data(), blob.size(),
                       [&](std::uint64_t i) { return (bits[i / 64] >> (i % 64)) & 1u; });
  apply_delta_host(blob.data(), blob.size(), dst.data(), n, 2, "t");
  for (auto c : r.counts) r.sent += c;
  return r;
}

}  // namespace

TEST_CASE("low-byte reference: the nearest value with a given low byte", "[unit][delta]") {
  CHECK(low_byte_nearest(0x3f80, 0x7f) == 0x3f7f);  // one step down
  CHECK(low_byte_nearest(0x3f7f, 0x80) == 0x3f80);  // one step up, across the byte
  CHECK(low_byte_nearest(0xbf80, 0x7e) == 0xbf7e);  // the sign is kept
  CHECK(low_byte_nearest(0x0001, 0xff) == 0x00ff);  // no magnitude below 0: the next one up
  CHECK(low_byte_nearest(0x7fff, 0x00) == 0x7f00);  // none above 0x7fff: the next one down
  std::mt19937 rng(3);
  for (int k = 0; k < 100000; ++k) {
    const auto s = static_cast<std::uint16_t>(rng());
    const auto lo = static_cast<std::uint8_t>(rng());
    const std::uint16_t r = low_byte_nearest(s, lo);
    REQUIRE((r & 0xff) == lo);
    REQUIRE((r & 0x8000) == (s & 0x8000));
    const int d = std::abs(static_cast<int>(r & 0x7fff) - static_cast<int>(s & 0x7fff));
    REQUIRE(d <= 255);
    // no value with that low byte is nearer
    for (int m : {static_cast<int>(r & 0x7fff) - 256, static_cast<int>(r & 0x7fff) + 256})
      if (m >= 0 && m <= 0x7fff) REQUIRE(std::abs(m - static_cast<int>(s & 0x7fff)) >= d);
  }
}

TEST_CASE("low-byte reference: a change that kept the low byte is caught and its block sent "
          "whole in the same round",
          "[unit][delta]") {
  constexpr std::size_t n = 5000;  // 19.5 blocks of 256
  constexpr std::uint32_t bucket = 1024;
  std::mt19937 rng(11);
  Bytes v0 = weights(n, rng), ref(low_byte_ref_bytes(n)), receiver = v0;
  low_byte_seed_host(ref.data(), v0.data(), n);
  CHECK(ref.size() == 5000 + 20 * 8);

  // 1 % small steps: exactly the changed elements go, no block fails
  Bytes v1 = v0;
  small_step(v1, 0.01, rng);
  std::uint64_t changed = 0;
  for (std::size_t i = 0; i < n; ++i) changed += get16(v1, i) != get16(v0, i);
  REQUIRE(changed > 0);
  Round r = low_byte_round(v1, ref, receiver, bucket);
  CHECK(r.failed == 0);
  CHECK(r.sent == changed);
  CHECK(receiver == v1);

  // changes the low bytes do not show: -x (block 1), +0.0 -> -0.0 (block 3), 4x (block 7, an
  // exponent change by 2 keeps the low byte), and a step of 300 (block 12: the low byte moves
  // but the nearest rebuild is wrong); each one's block goes whole, the rest as before
  Bytes v2 = v1;
  put16(v2, 300, static_cast<std::uint16_t>(get16(v2, 300) ^ 0x8000u));
  put16(v1, 800, 0x0000);  // (the reference's value there, re-seeded below)
  put16(v2, 800, 0x8000);
  put16(v2, 1900, static_cast<std::uint16_t>(get16(v2, 1900) + 0x0100u));
  put16(v2, 3100, static_cast<std::uint16_t>(get16(v2, 3100) + 300));
  small_step(v2, 0.01, rng);
  receiver = v1;
  low_byte_seed_host(ref.data(), v1.data(), n);
  r = low_byte_round(v2, ref, receiver, bucket);
  CHECK(r.failed == 4);
  CHECK(receiver == v2);  // bit-exact in this same round
  std::uint64_t low_changes = 0;
  for (std::size_t i = 0; i < n; ++i)
    low_changes += (get16(v2, i) & 0xff) != (get16(v1, i) & 0xff);
  CHECK(r.sent >= 4 * 256);
  CHECK(r.sent <= low_changes + 4 * 256);

  // the reference is v2's now: nothing changed, nothing sent
  r = low_byte_round(v2, ref, receiver, bucket);
  CHECK(r.failed == 0);
  CHECK(r.sent == 0);
  CHECK(receiver == v2);
}

namespace {

// A trainer's model of every width (as delta_test.cpp's); round r changes a random bit of a random
// byte of a `density` share of the elements: half of the 2-byte changes keep the low byte.
struct Model {
  std::vector<TensorMeta> m = {{"embed", DType::bfloat16, {300, 64}},
                               {"w", DType::float32, {128, 40}},
                               {"h", DType::float16, {7, 9}},
                               {"q", DType::float8_e4m3fn, {50, 50}},
                               {"scale", DType::bfloat16, {}},
                               {"empty", DType::int8, {0}},
                               {"d", DType::float64, {33}}};
  std::vector<Bytes> data;
  Model() {
    std::mt19937 rng(1);
    for (const auto& t : m) {
      Bytes b(t.nbytes());
      for (auto& x : b) x = std::byte(rng());
      data.push_back(std::move(b));
    }
  }
  void step(int round, double density) {
    std::mt19937 rng(static_cast<unsigned>(round));
    std::bernoulli_distribution pick(density);
    for (std::size_t i = 0; i < m.size(); ++i) {
      const std::size_t eb = dtype_size(m[i].dtype);
      for (std::size_t e = 0; e < data[i].size() / eb; ++e)
        if (pick(rng)) data[i][e * eb + rng() % eb] ^= std::byte(1u << (rng() % 8));
    }
  }
  std::vector<TensorMeta> metas() const { return m; }
  std::vector<SourceTensorRef> iterate() {
    std::vector<SourceTensorRef> v;
    for (std::size_t i = 0; i < m.size(); ++i) v.push_back({&m[i], data[i].data()});
    return v;
  }
};

// Lands a prepared round on `dst` (a receiver's tensors) as a worker does: whole tensors copied,
// blobs applied in place.
template <class D>
void land(D& d, const NcclUpdateInfo& info, std::vector<Bytes>& dst, const std::string& held) {
  const auto wire = weightsync::detail::update_wire(info, held);
  auto range = d.iterate();
  std::size_t k = 0;
  for (auto it = std::ranges::begin(range); it != std::ranges::end(range); ++it, ++k) {
    auto&& item = *it;
    REQUIRE(k < wire.what.size());
    const auto& x = wire.what[k];
    const TensorMeta& t = wire.tensors[x.tensor];
    using K = weightsync::detail::WireTensor::Kind;
    if (x.kind == K::whole) {
      if (t.nbytes() > 0) std::memcpy(dst[x.tensor].data(), item.data(), t.nbytes());
    } else if (x.kind == K::blob) {
      apply_delta_host(static_cast<const std::byte*>(item.data()), item.meta().nbytes(),
                       dst[x.tensor].data(), t.numel(), static_cast<unsigned>(dtype_size(t.dtype)),
                       t.name);
    }
  }
  CHECK(k == wire.what.size());
}

}  // namespace

TEST_CASE("delta source with a low-byte reference: rounds end bit-exact with about half the "
          "reference memory, as the full reference's do",
          "[unit][delta]") {
  Model model;
  const auto plain = NcclUpdateInfo::from_metas(model.metas());
  DeltaOptions full_o;
  full_o.bucket_elems = 1024;
  full_o.mode = DeltaMode::always;
  DeltaOptions low_o = full_o;
  low_o.reference = DeltaReference::low_byte;
  DeltaSource<Model> full(model, full_o), low(model, low_o);
  std::vector<Bytes> at_full = model.data, at_low = model.data;  // the two receivers
  const double dens[] = {0.0, 0.001, 0.01, 0.03, 0.1, 0.5, 0.01};
  std::uint64_t failed = 0;
  for (int r = 1; r <= 7; ++r) {
    CAPTURE(r);
    if (r > 1) model.step(r, dens[r - 1]);
    const std::string v = "v" + std::to_string(r);
    const auto fi = full.prepare(v, plain);
    const auto li = low.prepare(v, plain);
    CHECK(full.stats().whole_round == (r == 1));
    CHECK(low.stats().whole_round == (r == 1));
    land(full, fi, at_full, full.base_version());
    land(low, li, at_low, low.base_version());
    full.commit();
    low.commit();
    failed += low.stats().failed_blocks;
    for (std::size_t i = 0; i < model.m.size(); ++i) {
      CAPTURE(model.m[i].name);
      REQUIRE(at_full[i] == model.data[i]);
      REQUIRE(at_low[i] == model.data[i]);
    }
    // the low-byte rounds send the same changes, plus their failed blocks whole
    if (r > 1) CHECK(low.stats().changed_elements >= full.stats().changed_elements);
  }
  CHECK(failed > 0);  // the random bit flips kept many low bytes: the check caught them
  // memory: bf16 / fp16 tensors 1 byte per element + 8 per 256, the others whole
  std::uint64_t want = 0;
  for (const auto& t : model.m)
    want += dtype_size(t.dtype) == 2 ? low_byte_ref_bytes(t.numel()) : t.nbytes();
  CHECK(low.reference_bytes() == want);
  CHECK(full.reference_bytes() == full.stats().tensor_bytes);
  CHECK(low.reference_bytes() < full.reference_bytes());

  // a round that is never committed leaves the reference ahead of the receivers: whole next
  model.step(9, 0.01);
  (void)low.prepare("v8", plain);
  CHECK_FALSE(low.stats().whole_round);
  const auto again = low.prepare("v8", plain);
  CHECK(low.stats().whole_round);
  land(low, again, at_low, "");
  low.commit();
  for (std::size_t i = 0; i < model.m.size(); ++i) CHECK(at_low[i] == model.data[i]);
}

TEST_CASE("delta source: anchors cost a whole round each and no memory", "[unit][delta]") {
  Model model;
  const auto plain = NcclUpdateInfo::from_metas(model.metas());
  DeltaOptions o;
  o.bucket_elems = 1024;
  o.anchor_every = 3;
  DeltaSource<Model> d(model, o);
  std::vector<Bytes> at = model.data;
  std::uint64_t anchored = 0, rounds = 0;
  for (int r = 1; r <= 7; ++r) {
    if (r > 1) model.step(r, 0.01);
    const auto info = d.prepare("a" + std::to_string(r), plain);
    land(d, info, at, d.base_version());
    d.commit();
    for (std::size_t i = 0; i < model.m.size(); ++i) REQUIRE(at[i] == model.data[i]);
    ++rounds;
    if (d.stats().whole_round) {
      ++anchored;
      CHECK(d.stats().wire_bytes == d.stats().tensor_bytes);
    } else {
      CHECK(d.stats().wire_bytes * 5 < d.stats().tensor_bytes);
    }
  }
  CHECK(anchored == 3);  // rounds 1, 4, 7
  CHECK(rounds == 7);
}

namespace {
struct FullOnly : HostDeltaCodec {
  static constexpr bool kLowByteReference = false;
};
}  // namespace

TEST_CASE("delta source: a codec without low-byte references refuses the option, naming it",
          "[unit][delta]") {
  Model model;
  DeltaOptions o;
  o.reference = DeltaReference::low_byte;
  try {
    DeltaSource<Model, FullOnly> d(model, o);
    FAIL("accepted");
  } catch (const config_error& e) {
    CHECK(e.field() == "reference");
  }
}

}  // namespace ws_test_delta_reference_test
