// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Errors that say what failed: a backend this build left out, a GPU backend on a machine without
// a GPU, and a metadata mismatch in the handshake (the first differing tensor, both sides).
#include <weightsync/backends.hpp>
#include <weightsync/engine.hpp>

#include <chrono>
#include <cstddef>
#include <random>
#include <string>
#include <vector>

#include "support/catch.hpp"
#include "support/engine_options.hpp"
#include "support/host_world.hpp"
#include "support/process.hpp"

#if WEIGHTSYNC_HAS_CUDA
#include <cuda_runtime_api.h>
#endif

// (a namespace per test source: the sources build as unity translation units)
namespace ws_test_errors_test {

using namespace weightsync;
using namespace std::chrono_literals;

namespace {

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no exception)";
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

struct Model {
  std::vector<TensorMeta> m;
  std::vector<std::vector<std::byte>> data;
  explicit Model(std::vector<TensorMeta> metas) : m(std::move(metas)) {
    for (const auto& t : m) data.emplace_back(t.nbytes(), std::byte{7});
  }
  std::vector<TensorMeta> metas() const { return m; }
  std::vector<SourceTensorRef> iterate() {
    std::vector<SourceTensorRef> v;
    for (std::size_t i = 0; i < m.size(); ++i) v.push_back({&m[i], data[i].data()});
    return v;
  }
};

const std::vector<TensorMeta> kTrainerModel = {
    {"w1", DType::float32, {3, 5}}, {"b1", DType::float32, {5}}, {"w2", DType::bfloat16, {4, 4}}};

EngineOptions host_engine() {
  EngineOptions o;
  o.backend = "host";
  o.timeout = 15s;
  return o;
}

// A trainer and one worker whose declared metadata is `worker_model`; returns both outcomes.
std::vector<ws_test::Result> sync_with(const std::vector<TensorMeta>& worker_model) {
  ws_test::Processes procs;
  const int port = ws_test::free_port();
  procs.spawn([=] {
    TrainerEngine t(ws_test::options_for<TrainerEngine>(host_engine()));
    t.trainer_init(ws_test::loopback_init_info(port, 2));
    Model src(kTrainerModel);
    t.send_weights(src);
  });
  procs.spawn([=] {
    WeightTransferEngine e(ws_test::options_for<WeightTransferEngine>(host_engine()));
    e.init_transfer_engine(ws_test::loopback_init_info(port, 2));
    e.start_weight_update();
    e.update_weights(NcclUpdateInfo::from_metas(worker_model),
                     [](std::span<const TensorView>, void*) {});
  });
  return procs.wait_all(60s);
}

}  // namespace

TEST_CASE("backend registry: a built-in backend this build left out says it was not compiled in",
          "[unit][errors]") {
  const std::string nccl = BackendRegistry::not_compiled_in("nccl", true, false);
  CHECK(contains(nccl, "nccl backend not compiled in"));
  CHECK(contains(nccl, "this build has no NCCL"));
  CHECK(contains(nccl, "WEIGHTSYNC_WITH_NCCL=ON"));
  CHECK(contains(BackendRegistry::not_compiled_in("ipc", false, false),
                 "ipc backend not compiled in (this build has no CUDA"));
  CHECK(BackendRegistry::not_compiled_in("nccl", true, true).empty());
  CHECK(BackendRegistry::not_compiled_in("carrier-pigeon", false, false).empty());
  const std::string made = message_of([] { (void)BackendRegistry::global().make("nccl"); });
#if WEIGHTSYNC_HAS_NCCL
  CHECK(made == "(no exception)");
#else
  // What a g++-only (no NCCL) build answers for "nccl": not "unknown backend".
  INFO(made);
  CHECK(contains(made, "[weightsync.config] backend: nccl backend not compiled in"));
  CHECK(contains(made, "(known: host"));
  CHECK(!contains(made, "unknown backend"));
#endif
}

TEST_CASE(
    "a GPU backend on a machine without a CUDA device says so at once, not after a "
    "rendezvous timeout",
    "[unit][errors]") {
#if !WEIGHTSYNC_HAS_CUDA
  SUCCEED("this build has no CUDA: the GPU backends are not compiled in (tested above)");
#else
  int n = 0;
  if (cudaGetDeviceCount(&n) == cudaSuccess && n > 0) {
    SUCCEED("this machine has a CUDA device");
    return;
  }
  (void)cudaGetLastError();
  std::vector<std::string> backends = {"ipc"};
#if WEIGHTSYNC_HAS_NCCL
  backends.push_back("nccl");
#endif
  for (const auto& name : backends) {
    WeightTransferEngine::Options o;
    o.engine.backend = name;
    o.engine.timeout = 60s;
    WeightTransferEngine e(o);
    const auto t0 = std::chrono::steady_clock::now();
    // Nobody listens on the port: without the check this waited the whole 60 s timeout.
    const std::string what =
        message_of([&] { e.init_transfer_engine(ws_test::loopback_init_info(1, 2)); });
    const auto took = std::chrono::steady_clock::now() - t0;
    INFO(name << ": " << what);
    CHECK(contains(what, name + " backend: no CUDA device"));
    CHECK(contains(what, "the host backend does not"));
    CHECK(took < 10s);
  }
#endif
}

TEST_CASE("handshake: a metadata mismatch names the first differing tensor on both sides",
          "[unit][errors][engine]") {
  SECTION("a dtype differs") {
    auto worker = kTrainerModel;
    worker[1].dtype = DType::int32;
    const auto r = sync_with(worker);
    for (std::size_t rank = 0; rank < r.size(); ++rank) {
      INFO("rank " << rank << ": " << ws_test::outcome_name(r[rank].outcome) << " "
                   << r[rank].message);
      CHECK(r[rank].outcome == ws_test::Outcome::protocol);
      CHECK(contains(r[rank].message,
                     "first differing tensor: index 1: rank 0 has 'b1' float32 "
                     "(5,), rank 1 has 'b1' int32 (5,)"));
    }
  }
  SECTION("a shape and a name differ, and a tensor is missing") {
    auto worker = kTrainerModel;
    worker[2].shape = {4, 8};
    worker[2].name = "w2_renamed";
    auto shorter = kTrainerModel;
    shorter.pop_back();
    for (const auto& model : {worker, shorter}) {
      const auto r = sync_with(model);
      for (std::size_t rank = 0; rank < r.size(); ++rank) {
        INFO("rank " << rank << ": " << ws_test::outcome_name(r[rank].outcome) << " "
                     << r[rank].message);
        CHECK(r[rank].outcome == ws_test::Outcome::protocol);
        CHECK(contains(r[rank].message,
                       "first differing tensor: index 2: rank 0 has 'w2' "
                       "bfloat16 (4, 4), rank 1 has "));
      }
    }
  }
}

TEST_CASE("metadata lists on the wire: round trip, bounds, and garbage", "[unit][errors]") {
  using namespace weightsync::detail;
  std::size_t count = 0;
  const std::string wire = metadata_wire(kTrainerModel, count);
  CHECK(count == 3);
  const auto back = parse_metadata_wire(wire);
  REQUIRE(back.size() == 3);
  CHECK(back[2].name == "w2");
  CHECK(back[2].dtype == static_cast<std::uint8_t>(DType::bfloat16));
  CHECK(back[2].shape == std::vector<std::int64_t>{4, 4});
  CHECK(first_metadata_difference(back, 3, 0, back, 3, 1).empty());
  // Cut anywhere: whole entries only, never a read past the end.
  for (std::size_t cut = 0; cut < wire.size(); ++cut)
    CHECK(parse_metadata_wire(std::string_view(wire).substr(0, cut)).size() < 3);
  std::mt19937 rng(5);
  for (int i = 0; i < 200; ++i) {
    std::string junk(rng() % 64, '\0');
    for (auto& c : junk) c = static_cast<char>(rng());
    (void)parse_metadata_wire(junk);
  }
  // A huge list is cut at the bound, after a whole tensor.
  std::vector<TensorMeta> many(20000, TensorMeta{std::string(100, 'x'), DType::uint8, {1, 2, 3}});
  const std::string big = metadata_wire(many, count);
  CHECK(big.size() <= kMetadataWireMaxBytes);
  CHECK(count < many.size());
  CHECK(parse_metadata_wire(big).size() == count);
}

}  // namespace ws_test_errors_test
