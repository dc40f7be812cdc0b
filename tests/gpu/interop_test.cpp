// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Interop with a peer that follows vLLM's worker (and vLLM's producer) exactly:
// tests/interop/vllm_peer.py, PyTorch + CuPy's NCCL, no code from this library.
// The C++ side runs in this process on GPU 0; the Python peer on GPU 1, or on GPU 0 too on a
// one-GPU machine, each process with its own NCCL_HOSTID (support/gpu_peers.hpp: GpuSharing).
#include <weightsync/cuda/stream.hpp>
#include <weightsync/engine.hpp>
#include <weightsync/nccl/backend.hpp>
#include <weightsync/layouts.hpp>
#include <weightsync/nccl/torch_bootstrap.hpp>

#include <nccl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <future>
#include <string>

#include "support/catch.hpp"
#include "support/child.hpp"
#include "support/engine_options.hpp"
#include "support/gpu_model.hpp"
#include "support/gpu_peers.hpp"
#include "support/gpu_round.hpp"
#include "support/process.hpp"

using namespace weightsync;
using namespace std::chrono_literals;

namespace {

// Why the Python peer cannot run here, or "" when it can.
std::string python_peer_missing() {
  const int rc =
      std::system("python3 -c 'import torch, cupy; from cupy.cuda import nccl' >/dev/null 2>&1");
  return rc == 0 ? "" : "python3 with torch and cupy (cupy.cuda.nccl) is not available";
}

// NCCL refuses ranks of different versions. Say so at once, rather than after a failed init.
void require_same_nccl() {
  int mine = 0;
  ncclGetVersion(&mine);
  std::string theirs;
  if (FILE* f = ::popen("python3 -c 'import torch; from cupy.cuda import nccl; "
                        "print(nccl.get_version())' 2>/dev/null",
                        "r")) {
    char buf[64] = {};
    if (std::fgets(buf, sizeof buf, f)) theirs = buf;
    ::pclose(f);
  }
  while (!theirs.empty() && (theirs.back() == '\n' || theirs.back() == ' ')) theirs.pop_back();
  INFO("this process loads NCCL "
       << mine << ", the Python peer (CuPy) NCCL " << theirs
       << ": run through tests/interop/with_python_nccl.sh so both load the same build");
  REQUIRE(theirs == std::to_string(mine));
}

// The peer's exit code, 128 + a signal, or -1 when it was still running after 150 s (killed then).
using Peer = ws_test::Child;
constexpr auto kPeerLimit = 150s;

// Where the Python peer runs: GPU 1, or GPU 0 beside this process on a one-GPU machine, with its
// own NCCL_HOSTID (and this process with another), so that NCCL takes the two for two hosts.
struct PythonPlacement {
  int device = 1;
  ws_test::EnvVars env;
};
PythonPlacement& python_placement() {
  static PythonPlacement p;
  return p;
}

// Call first in every test, before this process's first NCCL call: announces the mode and, when
// the GPU is shared, sets this process's NCCL_HOSTID and the peer's.
void place_ranks() {
  const auto sharing = ws_test::announce_sharing(2, 2);
  auto& p = python_placement();
  p.device = 1 % ws_test::device_count();
  p.env.clear();
  if (!sharing.shared) return;
  const std::string tag = std::to_string(::getpid());
  for (const auto& [k, v] : ws_test::nccl_net_env(tag, 0)) ::setenv(k.c_str(), v.c_str(), 1);
  p.env = ws_test::nccl_net_env(tag, 1);
}

Peer run_peer(const std::string& mode, const std::string& init_path, const std::string& update_path,
              int round) {
  const std::string script = std::string(WEIGHTSYNC_SOURCE_DIR) + "/tests/interop/vllm_peer.py";
  const auto& place = python_placement();
  return Peer({"python3", script, "--init-info", init_path, "--update-info", update_path, "--mode",
               mode, "--device", std::to_string(place.device), "--round", std::to_string(round),
               "--timeout-s", "120"},
              init_path + "." + mode + ".log", place.env);
}

// Starts tests/interop/<script> with `args` (python3), output to a log file.
Peer run_script(const std::string& script, std::vector<std::string> args) {
  args.insert(args.begin(), std::string(WEIGHTSYNC_SOURCE_DIR) + "/tests/interop/" + script);
  args.insert(args.begin(), "python3");
  return Peer(args, "/tmp/ws_interop_" + script + "_" + std::to_string(::getpid()) + ".log",
              python_placement().env);
}

// vLLM's TCP mode init info: the trainer (rank 0) hosts the store on 127.0.0.1:<free port>.
NcclInitInfo vllm_tcp_init_info(bool packed) {
  NcclInitInfo i;
  i.master_address = "127.0.0.1";
  i.master_port = ws_test::free_port();
  i.world_size = 2;
  i.rank_offset = 1;
  i.packed = packed;
  i.validate();
  return i;
}

void write_json(const std::string& path, const nlohmann::json& j) {
  std::ofstream(path) << j.dump();
}

// Writes the JSON a vLLM server would receive and starts the peer on it.
Peer start_peer(const std::string& mode, const NcclInitInfo& init, const NcclUpdateInfo& update,
                int round) {
  const std::string dir = "/tmp/ws_interop_" + mode + "_" + std::to_string(::getpid());
  write_json(dir + "_init.json", init);
  write_json(dir + "_update.json", update);
  return run_peer(mode, dir + "_init.json", dir + "_update.json", round);
}

// The C++ side on GPU 0, speaking vLLM's wire; bounded: a peer that died early fails the test in
// 60 s instead of hanging it.
EngineOptions vllm_engine_options() {
  EngineOptions e = ws_test::gpu_engine_options("nccl", 0, 60s);
  e.protocol = Protocol::vllm;
  return e;
}

}  // namespace

TEST_CASE("interop: a C++ trainer feeds a vLLM-style worker - packed and unpacked dense8b",
          "[gpu][nccl][multi_gpu][interop]") {
  if (const auto why = python_peer_missing(); !why.empty()) WS_SKIP(why);
  place_ranks();
  require_same_nccl();
  detail::check(cudaSetDevice(0), "cudaSetDevice");
  const auto metas = layouts::dense8b();
  ws_test::DeviceModel model(metas, 0);
  CudaStream s(0);
  int round = 10;
  for (bool packed : {true, false}) {
    ++round;
    ws_test::fill_now(model, static_cast<std::uint64_t>(round), s.get());
    // What the trainer POSTs to a vLLM server, exactly.
    const NcclInitInfo init = vllm_init_info(2, 1, packed);
    Peer peer = start_peer("consume", init, NcclUpdateInfo::from_metas(metas), round);
    TrainerEngine t(ws_test::options_for<TrainerEngine>(vllm_engine_options()));
    t.trainer_init(init);  // meets the peer in ncclCommInitRank, then the warm-up all-reduce
    const ws_test::ModelSource src{metas, model};
    const auto st = t.send_weights(src);
    // NCCL tears a communicator down with its peers (the Python side's destroy waits for ours).
    t.shutdown();
    const int rc = peer.wait(kPeerLimit);
    INFO("packed " << packed << "; peer output:\n" << peer.output());
    CHECK(rc == 0);
    std::printf("interop C++ -> vLLM-style worker (%s): %zu tensors, %zu bytes, %zu broadcasts; %s",
                packed ? "packed" : "unpacked", st.tensors, st.bytes, st.chunks,
                peer.output().c_str());
  }
}

TEST_CASE("interop: a vLLM-style producer feeds the C++ worker engine - packed and unpacked",
          "[gpu][nccl][multi_gpu][interop]") {
  if (const auto why = python_peer_missing(); !why.empty()) WS_SKIP(why);
  place_ranks();
  require_same_nccl();
  detail::check(cudaSetDevice(0), "cudaSetDevice");
  const auto metas = layouts::dense8b();
  ws_test::DeviceModel model(metas, 0);
  CudaStream s(0);
  int round = 20;
  for (bool packed : {true, false}) {
    ++round;
    ws_test::poison_now(model, s.get());
    const NcclInitInfo init = vllm_init_info(2, 1, packed);
    const NcclUpdateInfo update = NcclUpdateInfo::from_metas(metas);
    Peer peer = start_peer("produce", init, update, round);
    auto o = ws_test::options_for<WeightTransferEngine>(vllm_engine_options());
    o.liveness_interval = 0ms;  // the Python peer has no control channel
    WeightTransferEngine e(o);
    e.init_transfer_engine(nlohmann::json(init));
    e.start_weight_update();
    e.update_weights(nlohmann::json(update), ws_test::copy_into(metas, model));
    e.finish_weight_update("from-python");
    e.shutdown();  // NCCL tears a communicator down with its peers
    const int rc = peer.wait(kPeerLimit);
    INFO("packed " << packed << "; peer output:\n" << peer.output());
    CHECK(rc == 0);
    CHECK(model.count_wrong(static_cast<std::uint64_t>(round), s.get()) == 0);
    std::printf("interop vLLM-style producer -> C++ engine (%s): %zu bytes verified; %s",
                packed ? "packed" : "unpacked", model.bytes(), peer.output().c_str());
  }
}

TEST_CASE("interop: TCP mode - a C++ trainer hosts vLLM's store and feeds a vLLM-style worker",
          "[gpu][nccl][multi_gpu][interop][tcp_store]") {
  if (const auto why = python_peer_missing(); !why.empty()) WS_SKIP(why);
  place_ranks();
  require_same_nccl();
  detail::check(cudaSetDevice(0), "cudaSetDevice");
  const auto metas = layouts::dense8b();
  ws_test::DeviceModel model(metas, 0);
  CudaStream s(0);
  int round = 30;
  for (bool packed : {true, false}) {
    ++round;
    model.fill(static_cast<std::uint64_t>(round), s.get());
    detail::check(cudaStreamSynchronize(s.get()), "sync");
    const NcclInitInfo init = vllm_tcp_init_info(packed);  // master_address + master_port
    Peer peer = start_peer("consume", init, NcclUpdateInfo::from_metas(metas), round);
    TrainerEngine::Options o;
    o.engine = vllm_engine_options();
    TrainerEngine t(o);
    t.trainer_init(init);  // StatelessProcessGroup store + pickled id, ncclCommInitRank, warm-up
    const ws_test::ModelSource src{metas, model};
    const auto st = t.send_weights(src);
    t.shutdown();
    const int rc = peer.wait(kPeerLimit);
    INFO("packed " << packed << "; peer output:\n" << peer.output());
    CHECK(rc == 0);
    std::printf("interop TCP mode C++ -> vLLM-style worker (%s): %zu tensors, %zu bytes; %s",
                packed ? "packed" : "unpacked", st.tensors, st.bytes, peer.output().c_str());
  }
}

TEST_CASE("interop: TCP mode - a vLLM-style trainer (trainer_init) feeds the C++ worker engine",
          "[gpu][nccl][multi_gpu][interop][tcp_store]") {
  if (const auto why = python_peer_missing(); !why.empty()) WS_SKIP(why);
  place_ranks();
  require_same_nccl();
  detail::check(cudaSetDevice(0), "cudaSetDevice");
  const auto metas = layouts::dense8b();
  ws_test::DeviceModel model(metas, 0);
  CudaStream s(0);
  int round = 40;
  for (bool packed : {true, false}) {
    ++round;
    model.poison(s.get());
    detail::check(cudaStreamSynchronize(s.get()), "sync");
    const NcclInitInfo init = vllm_tcp_init_info(packed);
    const NcclUpdateInfo update = NcclUpdateInfo::from_metas(metas);
    Peer peer = start_peer("produce", init, update, round);  // hosts the store as vLLM's rank 0
    WeightTransferEngine::Options o;
    o.engine = vllm_engine_options();
    o.liveness_interval = 0ms;
    WeightTransferEngine e(o);
    e.init_transfer_engine(nlohmann::json(init));  // joins the Python trainer's store
    e.start_weight_update();
    e.update_weights(nlohmann::json(update), ws_test::copy_into(metas, model));
    e.finish_weight_update("from-python-tcp");
    e.shutdown();
    const int rc = peer.wait(kPeerLimit);
    INFO("packed " << packed << "; peer output:\n" << peer.output());
    CHECK(rc == 0);
    CHECK(model.count_wrong(static_cast<std::uint64_t>(round), s.get()) == 0);
  }
}

TEST_CASE("interop: a torch.distributed NCCL group - broadcast Python -> C++ and C++ -> Python",
          "[gpu][nccl][multi_gpu][interop][torch_pg]") {
  if (const auto why = python_peer_missing(); !why.empty()) WS_SKIP(why);
  place_ranks();
  require_same_nccl();
  const std::size_t n = (64u << 20) + 3;
  std::vector<std::uint8_t> expected(n);
  for (std::size_t i = 0; i < n; ++i) expected[i] = static_cast<std::uint8_t>((i * 7 + 3) % 251);
  for (const std::string group : {"", "weight_sync"}) {
    for (int cpp_rank : {1, 0}) {  // C++ receives from a hosting Python rank 0, then the reverse
      const int port = ws_test::free_port();
      std::vector<std::string> args = {"--port",   std::to_string(port),
                                       "--rank",   std::to_string(1 - cpp_rank),
                                       "--src",    "0",
                                       "--nbytes", std::to_string(n),
                                       "--device", std::to_string(python_placement().device)};
      if (!group.empty()) args.insert(args.end(), {"--group", group});
      Peer peer = run_script("torch_pg_peer.py", args);
      StoreGroupOptions g;
      g.port = port;
      g.rank = cpp_rank;
      g.world_size = 2;
      g.timeout = 60s;
      NcclOptions no;
      no.device = 0;
      no.timeout = 60s;
      detail::check(cudaSetDevice(0), "cudaSetDevice");
      const auto keys = group.empty() ? TorchGroupKeys{} : TorchGroupKeys::named(group);
      auto c = TorchGroupCommunicator::create(g, keys, no);
      void* d = nullptr;
      detail::check(cudaMalloc(&d, n), "cudaMalloc");
      if (cpp_rank == 0)
        detail::check(cudaMemcpy(d, expected.data(), n, cudaMemcpyHostToDevice), "copy");
      else
        detail::check(cudaMemset(d, 0, n), "memset");
      CudaStream s(0);
      c.comm().broadcast(d, n, 0, s.get());
      c.comm().synchronize(s.get());
      std::vector<std::uint8_t> got(n);
      detail::check(cudaMemcpy(got.data(), d, n, cudaMemcpyDeviceToHost), "copy back");
      cudaFree(d);
      const int rc = peer.wait(kPeerLimit);
      INFO("group '" << group << "', C++ rank " << cpp_rank << "; peer output:\n" << peer.output());
      CHECK(rc == 0);
      CHECK(got == expected);
      std::printf("interop torch.distributed group '%s', C++ rank %d: %s", group.c_str(), cpp_rank,
                  peer.output().c_str());
    }
  }
}
