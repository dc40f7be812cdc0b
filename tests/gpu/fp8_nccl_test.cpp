// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Fp8Source over NCCL, two processes: the producer sends a bf16 device model as its FP8
// checkpoint (Fp8Source<_, CudaFp8Quantizer>: quantized when the pipeline asks, into K + 1 chunk
// arenas, or into the producer's ring slots), the consumer checks every received byte against
// quantize_fp8_host of the same bf16 tensors. Packed with K = 1, 2, 3 and small chunks (every arena
// reused many times while broadcasts are in flight), and unpacked. On a machine with one GPU both
// ranks share it through NCCL's socket transport (support/gpu_peers.hpp: a distinct NCCL_HOSTID per
// rank process).
#include <weightsync/cuda/check.hpp>
#include <weightsync/cuda/device_buffer.hpp>
#include <weightsync/cuda/device_policy.hpp>
#include <weightsync/cuda/fp8_source.hpp>
#include <weightsync/cuda/stream.hpp>
#include <weightsync/nccl/communicator.hpp>
#include <weightsync/packed_broadcast.hpp>

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/catch.hpp"
#include "support/gpu_peers.hpp"
#include "support/process.hpp"
#include "support/role.hpp"
#include "support/spawn.hpp"

using namespace weightsync;
using namespace std::chrono_literals;

namespace {

int gpu_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

// A bf16 model, identical on both ranks (host bytes; the producer copies them to the device).
struct Bf16Model {
  std::vector<TensorMeta> m;
  std::vector<std::vector<std::byte>> host;
  Bf16Model() {
    add("model.embed_tokens.weight", {2048, 512});
    for (int l = 0; l < 6; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      add(p + "self_attn.q_proj.weight", {512, 512});
      add(p + "self_attn.k_proj.weight", {128, 512});
      add(p + "self_attn.k_norm.weight", {128});
      add(p + "mlp.up_proj.weight", {1024, 512});
      add(p + "mlp.down_proj.weight", {512, 1000});  // partial column blocks
      add(p + "post_attention_layernorm.weight", {512});
    }
    add("lm_head.weight", {2048, 512});
  }
  void add(std::string name, std::vector<std::int64_t> shape) {
    m.push_back({std::move(name), DType::bfloat16, std::move(shape)});
    host.emplace_back(m.back().nbytes());
    std::mt19937 rng(static_cast<unsigned>(1000 + m.size()));
    std::normal_distribution<float> nd(0.0f, 0.03f);
    for (std::size_t i = 0; i + 2 <= host.back().size(); i += 2) {
      const float f = nd(rng);
      std::uint32_t u;
      std::memcpy(&u, &f, 4);
      const auto h = weightsync::detail::f32_bits_to_bf16(u);
      std::memcpy(host.back().data() + i, &h, 2);
    }
  }
};

// The producer's WeightSource: the model's tensors in device memory.
struct DeviceSource {
  const Bf16Model* model = nullptr;
  std::vector<DeviceBuffer> dev;
  DeviceSource(const Bf16Model& mdl, int device) : model(&mdl) {
    for (const auto& h : mdl.host) {
      dev.emplace_back(h.size(), device);
      detail::check(cudaMemcpy(dev.back().data(), h.data(), h.size(), cudaMemcpyHostToDevice),
                    "cudaMemcpy");
    }
    detail::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");  // see fp8_test.cpp
  }
  std::vector<TensorMeta> metas() const { return model->m; }
  std::vector<SourceTensorRef> iterate() {
    std::vector<SourceTensorRef> v;
    for (std::size_t i = 0; i < dev.size(); ++i) v.push_back({&model->m[i], dev[i].data()});
    return v;
  }
};

// The consumer's view of the source: its metadata only (what the update info carries).
struct MetasOnly {
  const Bf16Model* model = nullptr;
  std::vector<TensorMeta> metas() const { return model->m; }
  std::vector<SourceTensorRef> iterate() { return {}; }
};

// The FP8 checkpoint's bytes per output name.
std::vector<std::vector<std::byte>> expected(const Bf16Model& model,
                                             const std::vector<TensorMeta>& out,
                                             const Fp8SourceOptions& o) {
  std::vector<std::vector<std::byte>> want;
  std::size_t j = 0;
  for (std::size_t i = 0; i < model.m.size(); ++i) {
    const TensorMeta& m = model.m[i];
    if (out[j].dtype != DType::float8_e4m3fn) {
      want.push_back(model.host[i]);
      ++j;
      continue;
    }
    std::vector<std::byte> w(out[j].nbytes()), s(out[j + 1].nbytes());
    quantize_fp8_host(m, model.host[i].data(), o.scaling, w.data(),
                      reinterpret_cast<float*>(s.data()));
    want.push_back(std::move(w));
    want.push_back(std::move(s));
    j += 2;
  }
  return want;
}

}  // namespace

TEST_CASE("nccl fp8 source: a bf16 device model arrives as its FP8 checkpoint, bit-exact",
          "[gpu][nccl][fp8]") {
  const auto& role = ws_test::role();
  if (!role.is_peer()) {
    ws_test::run_peers_expect_ok(ws_test::current_test_name(), 2, 300s);
    return;
  }
  const int device = role.rank % gpu_count();
  detail::check(cudaSetDevice(device), "cudaSetDevice");
  RendezvousOptions o;
  o.address = "127.0.0.1";
  o.port = role.port;
  o.rank = role.rank;
  o.world_size = 2;
  o.timeout = 60s;
  NcclOptions n;
  n.device = device;
  n.timeout = 120s;
  auto comm = NcclCommunicator::connect(o, n);
  CudaStream stream(device);

  const Bf16Model model;
  struct Round {
    bool packed;
    int k;
    Fp8Scaling scaling;
    bool ring;  // Fp8Source::iterate(workspace, options): into the producer's own slots
  };
  for (const Round r :
       {Round{true, 1, Fp8Scaling::block128, false}, Round{true, 2, Fp8Scaling::block128, false},
        Round{true, 3, Fp8Scaling::block128_ue8m0, false},
        Round{false, 2, Fp8Scaling::per_channel, false}, Round{true, 1, Fp8Scaling::block128, true},
        Round{true, 2, Fp8Scaling::block128, true}, Round{true, 3, Fp8Scaling::per_channel, true},
        Round{false, 2, Fp8Scaling::block128_ue8m0, true}}) {
    TransferOptions opt;
    opt.packed = r.packed;
    opt.buffer_size_bytes = 256 * 1024;
    opt.num_buffers = r.k;
    Fp8SourceOptions fo;
    fo.scaling = r.scaling;
    fo.packed = opt.packed;
    fo.buffer_size_bytes = opt.buffer_size_bytes;
    fo.num_buffers = opt.num_buffers;
    if (role.rank == 0) {
      DeviceSource src(model, device);
      Fp8Source<DeviceSource, CudaFp8Quantizer> fp8(src, fo,
                                                    CudaFp8Quantizer{stream.get(), device});
      const auto metas = fp8.metas();
      workspace_for<NcclCommunicator> wsp{CudaPolicy(device)};
      for (int again = 0; again < (r.ring ? 2 : 1); ++again) {  // the ring reused across syncs
        auto items = r.ring ? fp8.iterate(wsp, opt) : fp8.iterate();
        if (r.ring && !fp8.in_ring()) throw std::runtime_error("not in the ring");
        packed_broadcast_producer(metas, items, comm, 0, opt, wsp);
      }
      continue;
    }
    MetasOnly declared{&model};
    const auto metas = Fp8Source<MetasOnly>(declared, fo).metas();
    const auto want = expected(model, metas, fo);
    for (int again = 0; again < (r.ring ? 2 : 1); ++again) {
      std::size_t seen = 0, bad = 0;
      std::string first_bad;
      packed_broadcast_consumer(
          metas, comm, 0,
          [&](std::span<const TensorView> batch, cudaStream_t s) {
            for (const auto& v : batch) {
              std::size_t i = 0;
              while (metas[i].name != v.name()) ++i;
              std::vector<std::byte> got(v.nbytes);
              detail::check(
                  cudaMemcpyAsync(got.data(), v.data, v.nbytes, cudaMemcpyDeviceToHost, s),
                  "cudaMemcpyAsync");
              detail::check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
              if (got != want[i] && bad++ == 0) first_bad = metas[i].name;
              ++seen;
            }
          },
          opt);
      if (bad != 0)
        throw std::runtime_error(detail::cat(bad, " tensors differ, the first ", first_bad,
                                             " (packed ", r.packed, ", K ", r.k, ", ring ", r.ring,
                                             ")"));
      if (seen != metas.size()) throw std::runtime_error("not every tensor arrived");
    }
  }
}
