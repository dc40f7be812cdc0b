// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// The backend registry holds no backend: engine.hpp registers the default ("host"), a built-in
// whose header the program did not include is named with that header, a name is registered
// once, and a backend of the application's own gets the group as a GroupInfo.
#include <weightsync/detail/base64.hpp>
#include <weightsync/engine.hpp>
#include <weightsync/vllm.hpp>

#include <algorithm>
#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "support/catch.hpp"

namespace ws_test_registry_test {

using namespace weightsync;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no exception)";
}

TEST_CASE("backend registry: engine.hpp registers the default backend, host", "[unit][engine]") {
  CHECK(EngineOptions{}.backend == "host");
  CHECK(detail::host_backend_registered);
  auto& reg = BackendRegistry::global();
  CHECK(reg.contains("host"));
  const auto names = reg.names();
  CHECK(std::count(names.begin(), names.end(), "host") == 1);
  const auto b = reg.make("host");
  REQUIRE(b != nullptr);
  CHECK(b->name() == "host");
  CHECK(!b->initialized());
}

TEST_CASE("backend registry: a built-in backend whose header was not included names the header",
          "[unit][engine]") {
  CHECK(BackendRegistry::builtin_header("host") == "weightsync/host/backend.hpp");
  CHECK(BackendRegistry::builtin_header("nccl") == "weightsync/nccl/backend.hpp");
  CHECK(BackendRegistry::builtin_header("ipc") == "weightsync/ipc/backend.hpp");
  CHECK(BackendRegistry::builtin_header("p2p") == "weightsync/ipc/backend.hpp");
  CHECK(BackendRegistry::builtin_header("carrier-pigeon").empty());
  for (const std::string name : {"host", "nccl", "ipc", "p2p"}) {
    const std::string why = BackendRegistry::missing_builtin(name, true, true);
    INFO(why);
    CHECK(contains(why, name + " backend not registered"));
    CHECK(contains(why, "<" + BackendRegistry::builtin_header(name) + ">"));
    CHECK(contains(why, "<weightsync/backends.hpp>"));
  }
  // A build without the feature still says so, not "include ...".
  CHECK(contains(BackendRegistry::missing_builtin("nccl", true, false),
                 "nccl backend not compiled in"));
  CHECK(contains(BackendRegistry::missing_builtin("p2p", false, false),
                 "p2p backend not compiled in"));
  CHECK(BackendRegistry::missing_builtin("carrier-pigeon", true, true).empty());

  // What make() answers in this build, from a registry where nothing was registered.
  BackendRegistry empty;
  const std::string nccl = message_of([&] { (void)empty.make("nccl"); });
  const std::string p2p = message_of([&] { (void)empty.make("p2p"); });
  INFO(nccl << "\n" << p2p);
#if WEIGHTSYNC_HAS_NCCL
  CHECK(contains(nccl, "[weightsync.config] backend: nccl backend not registered"));
  CHECK(contains(nccl, "<weightsync/nccl/backend.hpp>"));
#else
  CHECK(contains(nccl, "[weightsync.config] backend: nccl backend not compiled in"));
#endif
#if WEIGHTSYNC_HAS_CUDA
  CHECK(contains(p2p, "[weightsync.config] backend: p2p backend not registered"));
  CHECK(contains(p2p, "<weightsync/ipc/backend.hpp>"));
#else
  CHECK(contains(p2p, "[weightsync.config] backend: p2p backend not compiled in"));
#endif
  CHECK(contains(message_of([&] { (void)empty.make("carrier-pigeon"); }),
                 "unknown backend 'carrier-pigeon' (known: )"));
}

TEST_CASE("backend registry: a name is registered once", "[unit][engine]") {
  BackendRegistry reg;
  reg.add("mine", make_host_backend);
  const std::string twice = message_of([&] { reg.add("mine", make_host_backend); });
  CHECK(contains(twice,
                 "[weightsync.config] backend: a backend named 'mine' is already "
                 "registered (known: mine)"));
  CHECK_THROWS_AS(reg.add("", make_host_backend), config_error);
  CHECK(reg.names() == std::vector<std::string>{"mine"});
  // The global registry refuses a second "host"; a built-in's own registration, run again (a
  // second copy of its header in a shared library), keeps the first factory and throws nothing.
  CHECK_THROWS_AS(BackendRegistry::global().add("host", make_host_backend), config_error);
  CHECK(!detail::register_builtin_backend("host", [] { return std::unique_ptr<Backend>(); }));
  CHECK(BackendRegistry::global().make("host") != nullptr);
}

//! A Backend of the application's own: records the group it was asked to join.
class RecordingBackend final : public Backend {
 public:
  explicit RecordingBackend(std::optional<GroupInfo>* seen, int* rank) : seen_(seen), rank_(rank) {}
  std::string name() const override { return "ws-test-recording"; }
  void init(const GroupInfo& info, int rank, const EngineOptions&) override {
    *seen_ = info;
    *rank_ = rank;
  }
  bool initialized() const noexcept override { return seen_->has_value(); }
  bool healthy() const noexcept override { return true; }
  int rank() const noexcept override { return *rank_; }
  int world_size() const noexcept override { return *seen_ ? (*seen_)->world_size : 0; }
  void check() override {}
  TransferStats receive(std::span<const TensorMeta>, TransferOptions, const AnyLoadWeights&,
                        const ShardLayout*) override {
    return {};
  }
  TransferStats send(std::span<const TensorMeta>, AnyTensorRange&, TransferOptions,
                     const ShardLayout*) override {
    return {};
  }
  void shutdown() noexcept override {}

 private:
  std::optional<GroupInfo>* seen_;
  int* rank_;
};

TEST_CASE("backend registry: an application's backend joins the group as a GroupInfo",
          "[unit][engine]") {
  static std::optional<GroupInfo> seen;
  static int rank = -1;
  if (!BackendRegistry::global().contains("ws-test-recording"))
    BackendRegistry::global().add("ws-test-recording",
                                  [] { return std::make_unique<RecordingBackend>(&seen, &rank); });
  NcclInitInfo info;  // vLLM's init info: the unique id in base64
  std::vector<std::byte> id(kNcclUniqueIdBytes);
  for (std::size_t i = 0; i < id.size(); ++i) id[i] = static_cast<std::byte>(i * 3);
  info.nccl_unique_id_b64 = detail::base64_encode(id);
  info.world_size = 3;
  info.rank_offset = 1;
  TrainerEngine::Options o;
  o.engine.backend = "ws-test-recording";
  TrainerEngine trainer(o);
  trainer.trainer_init(info);
  REQUIRE(seen.has_value());
  CHECK(rank == 0);
  CHECK(seen->world_size == 3);
  CHECK(!seen->master_address);
  CHECK(!seen->master_port);
  REQUIRE(seen->uses_unique_id());
  CHECK(std::equal(id.begin(), id.end(), seen->nccl_unique_id->begin()));
  CHECK(*seen == info.group_info());

  NcclInitInfo tcp;  // TCP mode: address and port, no id
  tcp.master_address = "127.0.0.1";
  tcp.master_port = 29500;
  tcp.world_size = 2;
  const GroupInfo g = tcp.group_info();
  CHECK(g.world_size == 2);
  CHECK(g.master_address == std::optional<std::string>("127.0.0.1"));
  CHECK(g.master_port == std::optional<int>(29500));
  CHECK(!g.uses_unique_id());
  CHECK_NOTHROW(g.validate());
  tcp.master_port = 0;
  CHECK_THROWS_AS(tcp.group_info(), config_error);  // the vLLM side validates first
  GroupInfo both = g;
  both.nccl_unique_id.emplace();
  CHECK_THROWS_AS(both.validate(), config_error);
}

}  // namespace ws_test_registry_test
