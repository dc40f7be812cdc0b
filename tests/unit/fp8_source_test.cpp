// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Fp8Source (fp8/source.hpp): which tensors it quantizes and how it names them, laziness, the
// arenas' bound, and a host trainer engine sending an FP8-converted bf16 model to a host worker
// engine across processes, in chunks small enough that every arena is reused several times; the
// worker checks every byte against quantize_fp8_host of the bf16 source.
#include <weightsync/engine.hpp>
#include <weightsync/fp8/source.hpp>
#include <weightsync/host/communicator.hpp>
#include <weightsync/packed_broadcast.hpp>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "support/catch.hpp"
#include "support/engine_options.hpp"
#include "support/host_world.hpp"
#include "support/outcomes.hpp"
#include "support/process.hpp"

// (a namespace per test source: the sources build as unity translation units)
namespace ws_test_fp8_source_test {

using namespace weightsync;
using namespace std::chrono_literals;

namespace {

// A small Qwen-style bf16 model; `taken` counts the tensors the iteration has handed out.
struct Bf16Model {
  std::vector<TensorMeta> m;
  std::vector<std::vector<std::byte>> data;
  std::size_t taken = 0;

  explicit Bf16Model(int layers = 5) {
    add("model.embed_tokens.weight", {512, 256});
    for (int l = 0; l < layers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      add(p + "self_attn.q_proj.weight", {256, 256});
      add(p + "self_attn.k_proj.weight", {128, 256});
      add(p + "self_attn.o_proj.weight", {256, 256});
      add(p + "self_attn.q_norm.weight", {64});
      add(p + "mlp.gate.weight", {8, 256});  // a router: stays bf16
      add(p + "mlp.experts.0.gate_proj.weight", {200, 256});
      add(p + "mlp.down_proj.weight", {256, 330});  // partial column blocks
      add(p + "input_layernorm.weight", {256});
    }
    add("model.norm.weight", {256});
    add("lm_head.weight", {512, 256});
  }
  void add(std::string name, std::vector<std::int64_t> shape) {
    m.push_back({std::move(name), DType::bfloat16, std::move(shape)});
    data.emplace_back(m.back().nbytes());
    std::mt19937 rng(static_cast<unsigned>(m.size()));
    std::normal_distribution<float> nd(0.0f, 0.05f);
    for (std::size_t i = 0; i + 2 <= data.back().size(); i += 2) {
      const float f = nd(rng);
      std::uint32_t u;
      std::memcpy(&u, &f, 4);
      const std::uint16_t h = weightsync::detail::f32_bits_to_bf16(u);
      std::memcpy(data.back().data() + i, &h, 2);
    }
  }
  std::vector<TensorMeta> metas() const { return m; }
  AnyTensorRange iterate() {
    taken = 0;
    return AnyTensorRange([this, i = std::size_t{0}](SourceTensorRef& out) mutable {
      if (i == m.size()) return false;
      out = SourceTensorRef{&m[i], data[i].data()};
      ++i;
      ++taken;
      return true;
    });
  }
};
static_assert(WeightSource<Bf16Model>);
static_assert(WeightSource<Fp8Source<Bf16Model>>);

// What the FP8 checkpoint of `model` holds, tensor by tensor (the reference).
std::vector<std::vector<std::byte>> expected(Bf16Model& model, const Fp8SourceOptions& o) {
  Fp8Source<Bf16Model> fp8(model, o);
  std::vector<std::vector<std::byte>> out;
  for (std::size_t i = 0; i < model.m.size(); ++i) {
    const TensorMeta& m = model.m[i];
    if (!fp8.quantized(m)) {
      out.push_back(model.data[i]);
      continue;
    }
    const auto ss = fp8_scale_shape(m, o.scaling);
    std::size_t ns = 1;
    for (auto d : ss) ns *= static_cast<std::size_t>(d);
    std::vector<std::byte> w(m.numel()), s(ns * 4);
    quantize_fp8_host(m, model.data[i].data(), o.scaling, w.data(),
                      reinterpret_cast<float*>(s.data()));
    out.push_back(std::move(w));
    out.push_back(std::move(s));
  }
  return out;
}

NcclInitInfo fp8_info(int port) {
  NcclInitInfo i = ws_test::loopback_init_info(port, 2);
  i.packed = true;
  i.packed_buffer_size_bytes = 96 * 1024;  // ~2 projections per chunk: arenas reused often
  i.packed_num_buffers = 2;
  return i;
}

EngineOptions host_options() {
  EngineOptions o;
  o.backend = "host";
  o.timeout = 20s;
  return o;
}

}  // namespace

TEST_CASE("fp8 source: names, dtypes and shapes of the checkpoint", "[unit][fp8]") {
  Bf16Model model(1);
  Fp8SourceOptions o;
  Fp8Source<Bf16Model> fp8(model, o);
  const auto metas = fp8.metas();
  std::vector<std::string> names;
  for (const auto& m : metas) names.push_back(m.name);
  const std::vector<std::string> want = {"model.embed_tokens.weight",
                                         "model.layers.0.self_attn.q_proj.weight",
                                         "model.layers.0.self_attn.q_proj.weight_scale_inv",
                                         "model.layers.0.self_attn.k_proj.weight",
                                         "model.layers.0.self_attn.k_proj.weight_scale_inv",
                                         "model.layers.0.self_attn.o_proj.weight",
                                         "model.layers.0.self_attn.o_proj.weight_scale_inv",
                                         "model.layers.0.self_attn.q_norm.weight",
                                         "model.layers.0.mlp.gate.weight",
                                         "model.layers.0.mlp.experts.0.gate_proj.weight",
                                         "model.layers.0.mlp.experts.0.gate_proj.weight_scale_inv",
                                         "model.layers.0.mlp.down_proj.weight",
                                         "model.layers.0.mlp.down_proj.weight_scale_inv",
                                         "model.layers.0.input_layernorm.weight",
                                         "model.norm.weight",
                                         "lm_head.weight"};
  CHECK(names == want);
  CHECK(metas[1].dtype == DType::float8_e4m3fn);
  CHECK(metas[2].dtype == DType::float32);
  CHECK(metas[2].shape == std::vector<std::int64_t>{2, 2});
  CHECK(metas[12].shape == std::vector<std::int64_t>{2, 3});  // down_proj [256, 330]
  CHECK(metas[8].dtype == DType::bfloat16);                   // the router stays
  // exclusion by pattern, and the per-channel names
  o.exclude = {R"(k_proj)"};
  o.scaling = Fp8Scaling::per_channel;
  Fp8Source<Bf16Model> pc(model, o);
  const auto m2 = pc.metas();
  CHECK(m2[2].name == "model.layers.0.self_attn.q_proj.weight_scale");
  CHECK(m2[2].shape == std::vector<std::int64_t>{256, 1});
  CHECK(m2[3].name == "model.layers.0.self_attn.k_proj.weight");
  CHECK(m2[3].dtype == DType::bfloat16);
}

TEST_CASE("fp8 source: lazy, bounded, and the bytes of the reference", "[unit][fp8]") {
  Bf16Model model(6);
  Fp8SourceOptions o;
  o.packed = true;
  o.buffer_size_bytes = 96 * 1024;
  o.num_buffers = 2;
  const auto want = expected(model, o);
  Fp8Source<Bf16Model> fp8(model, o);
  auto range = fp8.iterate();
  CHECK(model.taken == 0);  // nothing quantized before the pipeline asks
  std::size_t i = 0, fp8_bytes = 0;
  const auto metas = fp8.metas();
  for (auto it = range.begin(); it != range.end(); ++it, ++i) {
    const auto& t = *it;
    REQUIRE(i < want.size());
    CHECK(t.meta().name == metas[i].name);
    CHECK(t.meta().nbytes() == want[i].size());
    CHECK(std::memcmp(t.data(), want[i].data(), want[i].size()) == 0);
    if (t.meta().dtype == DType::float8_e4m3fn) fp8_bytes += t.meta().nbytes();
  }
  CHECK(i == want.size());
  CHECK(model.taken == model.m.size());
  // (K + 1) arenas of the largest chunk's quantized bytes: far below the whole fp8 model
  INFO("arenas " << fp8.arena_bytes() << " B, fp8 weights " << fp8_bytes << " B");
  CHECK(fp8.arena_bytes() <= 3 * (96 * 1024 + 2 * 256 * 330));
  CHECK(fp8.arena_bytes() < fp8_bytes / 2);
}

TEST_CASE("fp8 source, whole: every tensor held at once in one arena (ipc pulls them all)",
          "[unit][fp8]") {
  Bf16Model model(4);
  Fp8SourceOptions o;
  o.whole = true;
  o.buffer_size_bytes = 96 * 1024;  // (not used in whole mode)
  const auto want = expected(model, o);
  Fp8Source<Bf16Model> fp8(model, o);
  for (int pass = 0; pass < 2; ++pass) {  // the arena is kept and rewritten
    // take every item first, as the ipc producer does, then check them all
    std::vector<std::pair<const void*, std::size_t>> held;
    std::size_t quantized_bytes = 0;
    for (const auto& t : fp8.iterate()) {
      held.emplace_back(t.data(), t.meta().nbytes());
      if (t.meta().dtype == DType::float8_e4m3fn ||
          t.meta().name.find("_scale") != std::string::npos)
        quantized_bytes += (t.meta().nbytes() + 255) / 256 * 256;
    }
    REQUIRE(held.size() == want.size());
    for (std::size_t i = 0; i < held.size(); ++i) {
      INFO("pass " << pass << ", tensor " << i);
      REQUIRE(held[i].second == want[i].size());
      CHECK(std::memcmp(held[i].first, want[i].data(), want[i].size()) == 0);
    }
    // one arena, exactly the quantized tensors' (aligned) bytes: a whole FP8 copy of them
    CHECK(fp8.arena_bytes() == quantized_bytes);
  }
}

TEST_CASE("fp8 source: a host trainer engine sends the FP8 checkpoint to a host worker engine",
          "[unit][fp8][engine]") {
  for (Fp8Scaling scaling : {Fp8Scaling::block128, Fp8Scaling::per_channel}) {
    ws_test::Processes procs;
    const int port = ws_test::free_port();
    procs.spawn([=] {
      TrainerEngine t(ws_test::options_for<TrainerEngine>(host_options()));
      const NcclInitInfo info = fp8_info(port);
      t.trainer_init(info);
      Bf16Model model(6);
      Fp8SourceOptions o;
      o.scaling = scaling;
      o.chunking_from(info);
      Fp8Source<Bf16Model> fp8(model, o);
      for (int round = 0; round < 2; ++round) t.send_weights(fp8);
    });
    procs.spawn([=] {
      WeightTransferEngine e(ws_test::options_for<WeightTransferEngine>(host_options()));
      e.init_transfer_engine(nlohmann::json(fp8_info(port)));
      Bf16Model model(6);
      Fp8SourceOptions o;
      o.scaling = scaling;
      const auto metas = Fp8Source<Bf16Model>(model, o).metas();
      const auto want = expected(model, o);
      for (int round = 0; round < 2; ++round) {
        e.start_weight_update();
        std::size_t seen = 0;
        e.update_weights(NcclUpdateInfo::from_metas(metas), [&](std::span<const TensorView> batch,
                                                                void*) {
          for (const auto& v : batch) {
            std::size_t i = 0;
            while (metas[i].name != v.name()) ++i;
            if (v.nbytes != want[i].size() || std::memcmp(v.data, want[i].data(), v.nbytes) != 0)
              throw std::runtime_error("tensor " + metas[i].name + " differs");
            ++seen;
          }
        });
        if (seen != metas.size()) throw std::runtime_error("not every tensor arrived");
        e.finish_weight_update();
      }
    });
    ws_test::expect_all_ok(procs.wait_all(60s));
  }
}

TEST_CASE("fp8 source in the ring: quantized into the producer's slots, sent from there, bit-exact",
          "[unit][fp8]") {
  // Chunks of ~2 projections over K = 2 slots (the ring is reused many times), with a weight whose
  // scales open the next chunk somewhere, and the embedding / lm_head alone in their chunks.
  for (Fp8Scaling scaling : {Fp8Scaling::block128, Fp8Scaling::per_channel}) {
    ws_test::Processes procs;
    const int port = ws_test::free_port();
    for (int rank = 0; rank < 2; ++rank)
      procs.spawn([=] {
        auto comm = ws_test::connect_host(port, rank, 2, 15s, 15s);
        Bf16Model model(6);
        Fp8SourceOptions o;
        o.scaling = scaling;
        Fp8Source<Bf16Model> fp8(model, o);
        const auto metas = fp8.metas();
        TransferOptions opt;
        opt.buffer_size_bytes = 96 * 1024;
        opt.num_buffers = 2;
        opt.timeout = 15s;
        workspace_for<HostCommunicator> ws;
        for (int round = 0; round < 3; ++round) {
          if (rank == 0) {
            auto items = fp8.iterate(ws, opt);
            if (model.taken != 0) throw std::runtime_error("quantized before the pipeline asked");
            const auto st = packed_broadcast_producer(metas, items, comm, 0, opt, ws);
            if (!fp8.in_ring()) throw std::runtime_error("not in the ring");
            // every region of several tensors lay in its slot already: none was packed
            const detail::PiecePlan plan(metas, 0, opt);
            std::uint64_t regions = 0;
            for (const auto& r : plan.regions[0]) regions += r.solo == plan.npos && r.bytes > 0;
            if (st.chunks < 10 || regions < 8) throw std::runtime_error("expected many chunks");
            if (st.contiguous_regions != (round + 1) * regions)
              throw std::runtime_error(std::to_string(st.contiguous_regions) + " regions sent in " +
                                       "place, expected " + std::to_string((round + 1) * regions));
            // extra memory: one tensor's scales at most (no weight is alone in a chunk here)
            std::size_t largest_scales = 0;
            for (std::size_t i = 1; i < metas.size(); ++i)
              if (metas[i].dtype == DType::float32 && metas[i - 1].dtype == DType::float8_e4m3fn)
                largest_scales = std::max(largest_scales, metas[i].nbytes());
            if (fp8.arena_bytes() > largest_scales)
              throw std::runtime_error("extra memory " + std::to_string(fp8.arena_bytes()) +
                                       " B over one tensor's scales " +
                                       std::to_string(largest_scales));
          } else {
            const auto want = expected(model, o);
            std::vector<std::vector<std::byte>> got(metas.size());
            packed_broadcast_consumer(
                metas, comm, 0,
                [&](std::span<const TensorView> batch, HostStream) {
                  for (const auto& v : batch) {
                    const auto i = static_cast<std::size_t>(v.meta - metas.data());
                    got[i].assign(static_cast<const std::byte*>(v.data),
                                  static_cast<const std::byte*>(v.data) + v.nbytes);
                  }
                },
                opt, ws);
            for (std::size_t i = 0; i < metas.size(); ++i)
              if (got[i] != want[i])
                throw std::runtime_error("round " + std::to_string(round) + ": " + metas[i].name +
                                         " differs");
          }
        }
      });
    ws_test::expect_all_ok(procs.wait_all(60s));
  }
}

}  // namespace ws_test_fp8_source_test
