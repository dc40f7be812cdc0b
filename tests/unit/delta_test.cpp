// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Delta syncs: the blob codec against a plain reference, malformed blobs, the update info JSON
// (ours and vLLM's sparse_nccl), and rounds of random deltas over the host backend that end
// bit-exact on every rank, with a wrong base refused on every rank.
#include <weightsync/delta/codec.hpp>
#include <weightsync/delta/source.hpp>
#include <weightsync/engine.hpp>

#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>
#include <thread>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "support/catch.hpp"
#include "support/engine_options.hpp"
#include "support/files.hpp"
#include "support/host_world.hpp"
#include "support/outcomes.hpp"
#include "support/process.hpp"

// (a namespace per test source: the sources build as unity translation units)
namespace ws_test_delta_test {

using namespace weightsync;
using namespace std::chrono_literals;

namespace {

// Changes a `density` share of the elements of `b` (elements of eb bytes), at random positions.
void mutate(std::vector<std::byte>& b, unsigned eb, double density, std::mt19937& rng) {
  const std::size_t n = b.size() / eb;
  std::bernoulli_distribution pick(density);
  for (std::size_t i = 0; i < n; ++i)
    if (pick(rng)) {
      // flip a random bit: always a change, and any pattern (NaNs, -0.0) can come out
      const std::size_t byte = i * eb + rng() % eb;
      b[byte] ^= std::byte(1u << (rng() % 8));
    }
}

std::vector<std::byte> random_bytes(std::size_t n, std::mt19937& rng) {
  std::vector<std::byte> v(n);
  for (auto& x : v) x = std::byte(rng());
  return v;
}

// What applying `blob` onto `dst` must give, computed without the codec: every changed element
// (bitwise) takes src's value; in a bucket the smallest encoding sends raw, every element does.
std::vector<std::byte> expected_after_apply(const std::vector<std::byte>& src,
                                            const std::vector<std::byte>& ref,
                                            const std::vector<std::byte>& dst, unsigned eb,
                                            std::uint32_t bucket) {
  std::vector<std::byte> out = dst;
  const std::size_t n = src.size() / eb;
  for (std::size_t b0 = 0; b0 < n; b0 += bucket) {
    const std::size_t len = std::min<std::size_t>(bucket, n - b0);
    std::size_t changed = 0;
    for (std::size_t i = b0; i < b0 + len; ++i)
      changed += std::memcmp(&src[i * eb], &ref[i * eb], eb) != 0;
    const bool raw = changed > 0 && delta::choose_kind(len, changed, eb) == delta::BucketKind::raw;
    for (std::size_t i = b0; i < b0 + len; ++i)
      if (raw || std::memcmp(&src[i * eb], &ref[i * eb], eb) != 0)
        std::memcpy(&out[i * eb], &src[i * eb], eb);
  }
  return out;
}

}  // namespace

TEST_CASE("delta codec: random densities, sizes and element widths apply bit-exactly",
          "[unit][delta]") {
  std::mt19937 rng(7);
  const std::uint32_t bucket = 256;  // small buckets: many per tensor, every kind appears
  std::size_t kinds_seen[4] = {};
  for (unsigned eb : {1u, 2u, 4u, 8u})
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{31}, std::size_t{255},
                          std::size_t{257}, std::size_t{3 * 256 + 17}, std::size_t{20000}})
      for (double d : {0.0, 0.001, 0.01, 0.05, 0.2, 0.6, 0.97, 1.0}) {
        CAPTURE(eb, n, d);
        const auto ref = random_bytes(n * eb, rng);
        auto src = ref;
        mutate(src, eb, d, rng);
        const auto blob = delta::encode_delta_host(src.data(), ref.data(), n, eb, bucket);
        // every bucket's kind is the smallest for its count
        delta::BlobHeader h;
        std::memcpy(&h, blob.data(), sizeof h);
        REQUIRE(h.n_buckets == delta::bucket_count(n, bucket));
        for (std::uint32_t b = 0; b < h.n_buckets; ++b) {
          delta::BucketEntry e;
          std::memcpy(&e, blob.data() + sizeof h + b * sizeof e, sizeof e);
          ++kinds_seen[e.kind];
        }
        // onto the reference: the source
        auto dst = ref;
        delta::apply_delta_host(blob.data(), blob.size(), dst.data(), n, eb, "t");
        REQUIRE(dst == src);
        // onto anything else: exactly the changed elements (and raw buckets) are written
        const auto poison = random_bytes(n * eb, rng);
        auto p = poison;
        delta::apply_delta_host(blob.data(), blob.size(), p.data(), n, eb, "t");
        REQUIRE(p == expected_after_apply(src, ref, poison, eb, bucket));
      }
  CHECK(kinds_seen[0] > 0);
  CHECK(kinds_seen[1] > 0);
  CHECK(kinds_seen[2] > 0);
  CHECK(kinds_seen[3] > 0);
}

TEST_CASE("delta codec: NaN payloads and -0.0 are changes, equal NaN bits are not",
          "[unit][delta]") {
  std::vector<float> ref(1000, 1.0f), src;
  ref[3] = 0.0f;
  ref[7] = std::numeric_limits<float>::quiet_NaN();
  ref[9] = std::numeric_limits<float>::quiet_NaN();
  src = ref;
  src[3] = -0.0f;  // == 0.0f as a float, a change as bits
  std::uint32_t other_nan = 0x7fc00001u;
  std::memcpy(&src[7], &other_nan, 4);  // another NaN payload
  const auto blob = delta::encode_delta_host(src.data(), ref.data(), src.size(), 4);
  const auto counts = delta::bucket_changes_host(src.data(), ref.data(), src.size(), 4,
                                                 delta::kDefaultBucketElems);
  CHECK(counts.size() == 1);
  CHECK(counts[0] == 2);  // [3] and [7]; [9] has the same NaN bits on both sides
  auto dst = ref;
  delta::apply_delta_host(blob.data(), blob.size(), dst.data(), dst.size(), 4, "nan");
  CHECK(std::memcmp(dst.data(), src.data(), src.size() * 4) == 0);
  CHECK(std::signbit(dst[3]));
}

TEST_CASE("delta codec: 1% of a bf16 tensor costs at most 2.5% of its bytes", "[unit][delta]") {
  std::mt19937 rng(11);
  const std::size_t n = std::size_t{1} << 22;  // 8 MiB of bf16
  const auto ref = random_bytes(n * 2, rng);
  auto src = ref;
  mutate(src, 2, 0.01, rng);
  const auto blob = delta::encode_delta_host(src.data(), ref.data(), n, 2);
  const double share = static_cast<double>(blob.size()) / static_cast<double>(n * 2);
  CAPTURE(share);
  CHECK(share <= 0.025);
  CHECK(share >= 0.02);  // 4 bytes per changed element: the offsets and values are all there
}

TEST_CASE("delta codec: a malformed blob is refused, naming the tensor, and changes nothing",
          "[unit][delta]") {
  std::mt19937 rng(3);
  const std::size_t n = 5000;
  const auto ref = random_bytes(n * 2, rng);
  auto src = ref;
  mutate(src, 2, 0.01, rng);
  const auto good = delta::encode_delta_host(src.data(), ref.data(), n, 2, 1024);
  auto refused = [&](std::vector<std::byte> blob, std::size_t numel, unsigned eb,
                     const std::string& why) {
    auto dst = ref;
    try {
      delta::apply_delta_host(blob.data(), blob.size(), dst.data(), numel, eb, "layer.w");
      return std::string("accepted");
    } catch (const protocol_error& e) {
      const std::string what = e.what();
      if (dst != ref) return std::string("wrote before refusing");
      if (what.find("layer.w") == std::string::npos) return "no tensor name: " + what;
      if (what.find(why) == std::string::npos) return "wrong reason: " + what;
      return std::string("refused");
    }
  };
  CHECK(refused(std::vector<std::byte>(good.begin(), good.begin() + 20), n, 2, "header") ==
        "refused");
  auto bad = good;
  bad[0] = std::byte{0};
  CHECK(refused(bad, n, 2, "magic") == "refused");
  CHECK(refused(good, n + 1, 2, "numel") == "refused");
  CHECK(refused(good, n / 2, 4, "elem_bytes") == "refused");
  bad = good;
  bad.pop_back();
  CHECK(refused(bad, n, 2, "blob_bytes") == "refused");
  // the first changed bucket's offset, then its first word / offsets
  delta::BucketEntry e;
  std::size_t b = 0;
  for (;; ++b) {
    std::memcpy(&e, good.data() + sizeof(delta::BlobHeader) + b * sizeof e, sizeof e);
    if (e.kind != 0) break;
  }
  REQUIRE(e.kind == static_cast<std::uint8_t>(delta::BucketKind::sparse));
  bad = good;
  delta::BucketEntry moved = e;
  moved.offset += 8;
  std::memcpy(bad.data() + sizeof(delta::BlobHeader) + b * sizeof e, &moved, sizeof e);
  CHECK(refused(bad, n, 2, "payload at") == "refused");
  bad = good;
  if (e.count >= 2) {  // two offsets swapped: out of order
    std::swap(bad[e.offset], bad[e.offset + 2]);
    std::swap(bad[e.offset + 1], bad[e.offset + 3]);
    CHECK(refused(bad, n, 2, "out of order") == "refused");
  }
  bad = good;
  moved = e;
  moved.kind = 9;
  std::memcpy(bad.data() + sizeof(delta::BlobHeader) + b * sizeof e, &moved, sizeof e);
  CHECK(refused(bad, n, 2, "kind") == "refused");
}

TEST_CASE("update wire cache: a repeated update gets the same wire, a changed one a new wire",
          "[unit][delta]") {
  UpdateRequest u;
  u.metas = {{"a", DType::bfloat16, {64}}, {"b", DType::bfloat16, {8, 8}}, {"c", DType::float32, {4}}};
  u.delta = DeltaUpdate{"v1", 32, {-1, 40, 0}, {}};
  detail::UpdateWireCache cache;
  const auto w1 = cache.get(u, "v1");
  REQUIRE(w1->metas.size() == 3);  // the marker, a whole, b's blob (c unchanged: nothing)
  CHECK(w1->metas[0].name == std::string(detail::kDeltaMarker) + "v1");
  CHECK(w1->metas[1].name == "a");
  CHECK(w1->metas[2].dtype == DType::uint8);
  CHECK(w1->metas[2].nbytes() == 40);
  const auto w2 = cache.get(UpdateRequest(u), "v1");
  CHECK(w2.get() == w1.get());  // the same update: the same wire, nothing built
  // each change builds a new wire: the held version, a payload, the base, the tensors
  const auto w3 = cache.get(u, "v0");
  CHECK(w3.get() != w1.get());
  CHECK(w3->metas[0].name == std::string(detail::kDeltaMarker) + "v0");
  auto v = u;
  v.delta->payload_bytes[1] = 48;
  const auto w4 = cache.get(v, "v0");
  CHECK(w4.get() != w3.get());
  CHECK(w4->metas[2].nbytes() == 48);
  v.delta->base_version.clear();  // a whole round: no marker
  const auto w5 = cache.get(v, "v0");
  CHECK(w5->metas.size() == 2);
  v.metas[2].shape = {5};
  const auto w6 = cache.get(v, "v0");
  CHECK(w6.get() != w5.get());
  CHECK(w6->tensors[2].shape == std::vector<std::int64_t>{5});
  // a receiver over the shared wire sees its tensors; the older wires stay valid
  detail::UpdateReceiver rx(w6, {}, {}, false);
  CHECK(rx.metas().size() == w6->metas.size());
  CHECK(w1->metas.size() == 3);
}

TEST_CASE("update info: delta and vLLM's sparse_nccl JSON round-trip and are checked, naming the "
          "field",
          "[unit][delta]") {
  const auto vllm_sparse = nlohmann::json::parse(R"({
    "names": ["model.layers.0.mlp.down_proj.weight", "lm_head.weight"],
    "dtype_names": ["bfloat16", "bfloat16"], "shapes": [[64, 32], [100, 32]],
    "num_updates_list": [12, 0], "is_checkpoint_format": true})");
  const auto u = vllm_sparse.get<NcclUpdateInfo>();
  REQUIRE(u.num_updates_list);
  CHECK(*u.num_updates_list == std::vector<std::int64_t>{12, 0});
  CHECK(nlohmann::json(u).get<NcclUpdateInfo>() == u);
  const auto wire = detail::update_wire(u, "");
  REQUIRE(wire.metas.size() == 2);  // lm_head has no updates: nothing travels for it
  CHECK(wire.metas[0].dtype == DType::int32);
  CHECK(wire.metas[1].shape == std::vector<std::int64_t>{12});

  auto field_of = [](const std::string& text) -> std::string {
    try {
      (void)nlohmann::json::parse(text).get<NcclUpdateInfo>();
    } catch (const config_error& e) {
      return e.field();
    }
    return "";
  };
  const std::string base = R"("names": ["a"], "dtype_names": ["float32"], "shapes": [[4]])";
  CHECK(field_of("{" + base + R"(, "num_updates_list": [5]})") == "num_updates_list[0]");
  CHECK(field_of("{" + base + R"(, "num_updates_list": [1, 2]})") == "num_updates_list");
  CHECK(field_of("{" + base + R"(, "num_updates_list": [-1]})") == "num_updates_list[0]");
  CHECK(field_of("{" + base + R"(, "delta": {"base_version": "v1", "payload_bytes": [-2]}})") ==
        "delta.payload_bytes[0]");
  CHECK(field_of("{" + base + R"(, "delta": {"base_version": "", "payload_bytes": [40]}})") ==
        "delta.payload_bytes[0]");
  CHECK(field_of("{" + base + R"(, "delta": {"base_version": "v1", "payload_bytes": []}})") ==
        "delta.payload_bytes");
  CHECK(field_of("{" + base + R"(, "delta": {"base": "v1", "payload_bytes": [0]}})") == "base");
  CHECK(field_of("{" + base +
                 R"(, "delta": {"base_version": "v1", "bucket_elems": 100, "payload_bytes": [0]}})") ==
        "delta.bucket_elems");
  CHECK(field_of("{" + base + R"(, "delta": {"base_version": "v1", "payload_bytes": [0]}})") == "");
}

namespace {

// The trainer's model: a few tensors of every width; round r's bytes are round r-1's with a
// `density` share of elements changed (deterministic per round).
struct Model {
  std::vector<TensorMeta> m = {{"embed", DType::bfloat16, {300, 64}},
                               {"w", DType::float32, {128, 40}},
                               {"h", DType::float16, {7, 9}},
                               {"q", DType::float8_e4m3fn, {50, 50}},
                               {"scale", DType::bfloat16, {}},
                               {"empty", DType::int8, {0}},
                               {"d", DType::float64, {33}}};
  std::vector<std::vector<std::byte>> data;
  Model() {
    std::mt19937 rng(1);
    for (const auto& t : m) data.push_back(random_bytes(t.nbytes(), rng));
  }
  void step(int round, double density) {
    std::mt19937 rng(static_cast<unsigned>(round));
    for (std::size_t i = 0; i < m.size(); ++i)
      mutate(data[i], static_cast<unsigned>(dtype_size(m[i].dtype)), density, rng);
  }
  std::vector<TensorMeta> metas() const { return m; }
  std::vector<SourceTensorRef> iterate() {
    std::vector<SourceTensorRef> v;
    for (std::size_t i = 0; i < m.size(); ++i) v.push_back({&m[i], data[i].data()});
    return v;
  }
};
// The update infos travel from the trainer process to the workers as files (HTTP in a real
// setup).
using ws_test::wait_for_file;
using ws_test::write_file;

constexpr double kDensity[] = {0, 0.001, 0.01, 0.03, 0.1, 0.5, 0.0};  // round r uses [r]

NcclInitInfo host_info(int port, int world) {
  NcclInitInfo i = ws_test::loopback_init_info(port, world, 1);
  i.packed = true;
  i.packed_buffer_size_bytes = 4096;
  return i;
}
EngineOptions host_engine() {
  EngineOptions o;
  o.backend = "host";
  o.timeout = 20s;
  o.acknowledge = Acknowledge::each_transfer;
  return o;
}

// A worker's own parameters (the destinations the deltas apply to), starting as the trainer's
// round 0 (version "default").
struct Server {
  Model model;
  void* destination(const TensorMeta& t) {
    for (std::size_t i = 0; i < model.m.size(); ++i)
      if (model.m[i] == t) return model.data[i].data();
    return nullptr;
  }
};

}  // namespace

TEST_CASE("delta source: whole rounds exactly when needed, anchors, and no reference on a link as "
          "fast as the diff",
          "[unit][delta]") {
  Model src;
  const auto plain = NcclUpdateInfo::from_metas(src.metas());
  DeltaOptions o;
  o.bucket_elems = 1024;
  DeltaSource<Model> d(src, o);
  auto u = d.prepare("v1", plain);
  CHECK(d.stats().whole_round);  // the first round
  CHECK(u.delta->base_version.empty());
  CHECK(d.stats().wire_bytes == d.stats().tensor_bytes);
  d.commit();
  CHECK(d.base_version() == "v1");
  CHECK(d.reference_bytes() == d.stats().tensor_bytes);
  src.step(2, 0.01);
  u = d.prepare("v2", plain);
  CHECK_FALSE(d.stats().whole_round);
  CHECK(u.delta->base_version == "v1");
  CHECK(d.stats().blobs > 0);
  CHECK(d.stats().wire_bytes * 5 < d.stats().tensor_bytes);
  u = d.prepare("v2", plain);  // v2 was never committed: the receivers' state is unknown
  CHECK(d.stats().whole_round);
  d.commit();
  u = d.prepare("v3", plain);  // nothing changed since v2
  CHECK_FALSE(d.stats().whole_round);
  CHECK(d.stats().wire_bytes == 0);
  CHECK(d.stats().unchanged == src.m.size());
  d.commit();
  d.invalidate();
  CHECK(d.prepare("v4", plain).delta->base_version.empty());
  d.commit();

  DeltaOptions a = o;
  a.anchor_every = 2;
  DeltaSource<Model> anchored(src, a);
  std::vector<bool> whole;
  for (int r = 1; r <= 5; ++r) {
    (void)anchored.prepare("a" + std::to_string(r), plain);
    whole.push_back(anchored.stats().whole_round);
    anchored.commit();
  }
  CHECK(whole == std::vector<bool>{true, false, true, false, true});

  DeltaOptions fast = o;
  fast.link_bytes_per_s = 1e15;  // faster than any diff: never worth it
  DeltaSource<Model> f(src, fast);
  for (int r = 1; r <= 2; ++r) {
    (void)f.prepare("f" + std::to_string(r), plain);
    CHECK(f.stats().whole_round);
    f.commit();
    CHECK(f.reference_bytes() == 0);  // nothing kept, nothing to update
  }

  // The link's speed, learnt from a round's stats: 1 TB/s is faster than the host diff.
  DeltaSource<Model> learn(src, o);
  (void)learn.prepare("l1", plain);
  TransferStats round;
  round.bytes = 1'000'000'000;
  round.data = std::chrono::milliseconds(1);
  learn.commit(round);
  CHECK(std::abs(learn.link_bytes_per_s() - 1e12) < 1e3);
  (void)learn.prepare("l2", plain);
  CHECK(learn.stats().whole_round);
  learn.commit(round);
  CHECK(learn.reference_bytes() == 0);

  auto field_of = [&](DeltaOptions x) -> std::string {
    try {
      DeltaSource<Model> bad(src, x);
    } catch (const config_error& e) {
      return e.field();
    }
    return "";
  };
  DeltaOptions x = o;
  x.max_payload_fraction = 0;
  CHECK(field_of(x) == "max_payload_fraction");
  x = o;
  x.bucket_elems = 33;
  CHECK(field_of(x) == "bucket_elems");
  x = o;
  x.anchor_every = -1;
  CHECK(field_of(x) == "anchor_every");
  CHECK_THROWS_AS(d.prepare("", plain), config_error);
  DeltaSource<Model> fresh(src, o);
  CHECK_THROWS_AS(fresh.commit(), state_error);
}

TEST_CASE("delta rounds over the host backend end bit-exact on every rank, a wrong base is "
          "refused on every rank, then a whole round repairs it",
          "[unit][delta][engine]") {
  ws_test::Processes procs;
  const int port = ws_test::free_port();
  constexpr int kRounds = 6;
  // The update infos travel as files (in a real setup, HTTP): round r's at info_r.json.
  const ws_test::TempDir tmp;
  const std::string dir = tmp.path();
  procs.spawn([=] {  // the trainer
    TrainerEngine t(ws_test::options_for<TrainerEngine>(host_engine()));
    t.trainer_init(host_info(port, 3));
    Model src;
    DeltaOptions o;
    o.bucket_elems = 1024;
    DeltaSource<Model> d(src, o);
    // round 0: "default" is what the servers loaded; the trainer states it by a whole round.
    for (int r = 1; r <= kRounds; ++r) {
      src.step(r, kDensity[r]);
      const std::string version = "v" + std::to_string(r);
      auto info = d.prepare(version, t.update_info(src.metas()));
      write_file(dir + "/info_" + std::to_string(r) + ".json", nlohmann::json(info).dump());
      if (r == 1 && !d.stats().whole_round) throw std::runtime_error("round 1 was not whole");
      if (r > 1 && r != 4 && d.stats().whole_round)
        throw std::runtime_error("round " + std::to_string(r) + " went whole");
      if (r == 2 && d.stats().wire_bytes * 10 > d.stats().tensor_bytes)
        throw std::runtime_error("0.1% density sent more than 10% of the bytes");
      if (r == 3) {  // rank 2 holds another version: refused on every rank, nothing applied
        try {
          t.send_weights(d);
          throw std::runtime_error("a delta onto a wrong base was sent");
        } catch (const protocol_error& e) {
          const std::string what = e.what();
          if (what.find("base_version=v2") == std::string::npos ||
              what.find("base_version=v2-other") == std::string::npos)
            throw std::runtime_error("the refusal does not name both versions: " + what);
        }
        continue;  // not committed: the next round goes whole
      }
      t.send_weights(d);
      d.commit();
    }
  });
  for (int local = 0; local < 2; ++local)
    procs.spawn([=] {
      auto o = ws_test::options_for<WeightTransferEngine>(host_engine());
      o.parallel.tensor_parallel_size = 2;
      o.parallel.local_rank = local;
      WeightTransferEngine e(o);
      Server server;
      Model want;  // what the trainer's model is after each round
      e.init_transfer_engine(host_info(port, 3));
      for (int r = 1; r <= kRounds; ++r) {
        want.step(r, kDensity[r]);
        const auto text = wait_for_file(dir + "/info_" + std::to_string(r) + ".json", 20s);
        const auto info = nlohmann::json::parse(text).get<NcclUpdateInfo>();
        e.start_weight_update();
        const auto before = server.model.data;
        try {
          e.update_weights(
              info,
              [](std::span<const TensorView> views, void*) {
                for (const auto& v : views)  // ("empty" has no bytes, so no address to land at)
                  if (v.nbytes > 0) throw std::runtime_error(v.name() + " without a destination");
              },
              [&](const TensorMeta& t) { return server.destination(t); });
          if (r == 3) throw std::runtime_error("round 3 landed");
        } catch (const protocol_error& x) {
          if (r != 3) throw;
          if (server.model.data != before) throw std::runtime_error("the refused delta wrote");
          const std::string what = x.what();
          if (what.find("base_version=v2-other") == std::string::npos)
            throw std::runtime_error("the refusal does not name rank 2's version: " + what);
          continue;
        }
        // rank 2 names round 2 otherwise: round 3's delta (base v2) is refused
        e.finish_weight_update(r == 2 && local == 1 ? "v2-other" : "v" + std::to_string(r));
        for (std::size_t i = 0; i < want.m.size(); ++i)
          if (server.model.data[i] != want.data[i])
            throw std::runtime_error("round " + std::to_string(r) + ": " + want.m[i].name +
                                     " differs from the trainer's");
      }
    });
  ws_test::expect_all_ok(procs.wait_all(120s));
}

TEST_CASE("delta in shadow mode: without copy_live_at_start the shadow does not hold the base, "
          "so the delta is refused on every rank",
          "[unit][delta][engine][shadow]") {
  ws_test::Processes procs;
  const int port = ws_test::free_port();
  const ws_test::TempDir tmp;
  const std::string dir = tmp.path();
  procs.spawn([=] {  // the trainer: its reference is what the server loaded ("default")
    TrainerEngine t(ws_test::options_for<TrainerEngine>(host_engine()));
    t.trainer_init(host_info(port, 2));
    Model src;
    DeltaSource<Model> d(src);
    d.seed("default");
    src.step(1, 0.01);
    const auto info = d.prepare("v1", t.update_info(src.metas()));
    if (d.stats().whole_round) throw std::runtime_error("round 1 went whole");
    write_file(dir + "/info.json", nlohmann::json(info).dump());
    try {
      t.send_weights(d);
    } catch (const protocol_error& e) {
      if (std::string(e.what()).find("copy_live_at_start") == std::string::npos)
        throw std::runtime_error(std::string("the refusal does not say why: ") + e.what());
      return;
    }
    throw std::runtime_error("a delta reached a shadow that does not hold its base");
  });
  procs.spawn([=] {
    auto o = ws_test::options_for<WeightTransferEngine>(host_engine());
    o.shadow.enabled = true;
    o.shadow.copy_live_at_start = false;
    WeightTransferEngine e(o);
    Server server;
    std::vector<ShadowParameter> table;
    for (std::size_t i = 0; i < server.model.m.size(); ++i)
      table.push_back({server.model.m[i], server.model.data[i].data(), nullptr});
    e.register_parameters(table);
    e.init_transfer_engine(host_info(port, 2));
    const auto info =
        nlohmann::json::parse(wait_for_file(dir + "/info.json", 20s)).get<NcclUpdateInfo>();
    e.start_weight_update();
    const Model before = server.model;
    try {
      e.update_weights(info, [](std::span<const TensorView>, void*) {});
    } catch (const protocol_error& x) {
      if (std::string(x.what()).find("copy_live_at_start") == std::string::npos)
        throw std::runtime_error(std::string("the refusal does not say why: ") + x.what());
      if (server.model.data != before.data) throw std::runtime_error("the refused delta wrote");
      if (e.acquire()->version() != "default") throw std::runtime_error("the live version moved");
      if (e.delta_base() != "default")
        throw std::runtime_error("a refused update in shadow mode lost the base: " + e.delta_base());
      return;
    }
    throw std::runtime_error("the worker accepted a delta onto a shadow without its base");
  });
  ws_test::expect_all_ok(procs.wait_all(60s));
}

TEST_CASE("vLLM sparse_nccl: our trainer speaks it (two broadcasts per tensor, Protocol::vllm) "
          "and our worker applies it in place",
          "[unit][delta][engine]") {
  ws_test::Processes procs;
  const int port = ws_test::free_port();
  auto engine = host_engine();
  engine.protocol = Protocol::vllm;
  engine.acknowledge = Acknowledge::next_transfer;
  Model base;
  Model next = base;
  next.step(1, 0.02);
  std::vector<SparsePatch> patches;
  for (std::size_t i = 0; i < base.m.size(); ++i) {
    const std::size_t eb = dtype_size(base.m[i].dtype);
    SparsePatch p{base.m[i], {}, {}};
    for (std::size_t k = 0; k < base.m[i].numel(); ++k)
      if (std::memcmp(&base.data[i][k * eb], &next.data[i][k * eb], eb) != 0) {
        p.indices.push_back(static_cast<std::int32_t>(k));
        p.values.insert(p.values.end(), next.data[i].begin() + static_cast<std::ptrdiff_t>(k * eb),
                        next.data[i].begin() + static_cast<std::ptrdiff_t>((k + 1) * eb));
      }
    patches.push_back(std::move(p));
  }
  SparseSource sparse(patches);
  const auto info = sparse.update_info();
  CHECK(nlohmann::json(info).contains("num_updates_list"));
  procs.spawn([=]() mutable {
    TrainerEngine t(ws_test::options_for<TrainerEngine>(engine));
    auto init = host_info(port, 2);
    init.packed = false;
    t.trainer_init(init);
    t.send_weights(sparse);
  });
  procs.spawn([=] {
    auto o = ws_test::options_for<WeightTransferEngine>(engine);
    WeightTransferEngine e(o);
    Server server;
    auto init = host_info(port, 2);
    init.packed = false;
    e.init_transfer_engine(init);
    e.start_weight_update();
    e.update_weights(
        nlohmann::json(info), [](std::span<const TensorView>, void*) {},
        [&](const TensorMeta& t) { return server.destination(t); });
    e.finish_weight_update("v1");
    for (std::size_t i = 0; i < next.m.size(); ++i)
      if (server.model.data[i] != next.data[i])
        throw std::runtime_error(next.m[i].name + " differs after the sparse update");
  });
  ws_test::expect_all_ok(procs.wait_all(60s));
}

}  // namespace ws_test_delta_test
