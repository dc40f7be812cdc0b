// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// FP8 quantize kernels (cuda/fp8_quantize.hpp) against the host implementation, bit for bit:
// bf16 and fp32 inputs of several shapes (multiples of 128 and not, misaligned sources), all
// four scale layouts, special values (zero / inf / NaN blocks, subnormals, signed zeros), outputs
// poisoned before each launch. Then, where `python3 -c "import torch"` works, against torch's
// plain formula (tests/gpu/fp8_torch_ref.py); otherwise that part is skipped visibly.
// Last, Fp8Source with CudaFp8Quantizer over device tensors: the bytes it hands out, item by
// item, are the host reference's.
#include <weightsync/cuda/check.hpp>
#include <weightsync/cuda/device_buffer.hpp>
#include <weightsync/cuda/fp8_quantize.hpp>
#include <weightsync/cuda/fp8_source.hpp>
#include <weightsync/fp8/quantize.hpp>

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "support/catch.hpp"

using namespace weightsync;

namespace {

constexpr Fp8Scaling kModes[] = {Fp8Scaling::block128, Fp8Scaling::block128_ue8m0,
                                 Fp8Scaling::per_tensor, Fp8Scaling::per_channel};

std::size_t count(const std::vector<std::int64_t>& shape) {
  std::size_t n = 1;
  for (auto d : shape) n *= static_cast<std::size_t>(d);
  return n;
}

// Random weights whose rows differ in magnitude by orders; `special`: a zero block (rows 0..127,
// cols 128..255 when they exist), -0.0s, bf16/fp32 subnormals, and an inf and a NaN in other
// blocks.
std::vector<std::byte> make_input(DType dt, std::int64_t rows, std::int64_t cols, unsigned seed,
                                  bool special) {
  std::mt19937 rng(seed);
  std::vector<float> x(static_cast<std::size_t>(rows * cols));
  for (std::int64_t r = 0; r < rows; ++r) {
    std::normal_distribution<float> nd(0.0f, std::ldexp(1.0f, static_cast<int>(r % 29) - 16));
    for (std::int64_t c = 0; c < cols; ++c) x[static_cast<std::size_t>(r * cols + c)] = nd(rng);
  }
  if (special) {
    const auto at = [&](std::int64_t r, std::int64_t c) -> float& {
      return x[static_cast<std::size_t>(r * cols + c)];
    };
    for (std::int64_t r = 0; r < std::min<std::int64_t>(rows, 128); ++r)
      for (std::int64_t c = 128; c < std::min<std::int64_t>(cols, 256); ++c)
        at(r, c) = (r + c) % 3 ? 0.0f : -0.0f;
    for (std::int64_t r = 0; r < rows; r += 7) at(r, (r * 13) % cols) = std::ldexp(1.0f, -133);
    for (std::int64_t r = 1; r < rows; r += 11) at(r, (r * 5) % cols) = -std::ldexp(3.0f, -140);
    if (rows > 128) at(rows - 1, 0) = std::numeric_limits<float>::infinity();
    if (rows > 128 && cols > 128) at(130, cols - 1) = -std::numeric_limits<float>::quiet_NaN();
    if (rows > 2) at(2, cols / 2) = -std::numeric_limits<float>::infinity();  // row 2: inf scale
  }
  std::vector<std::byte> b(x.size() * dtype_size(dt));
  for (std::size_t i = 0; i < x.size(); ++i) {
    std::uint32_t u;
    std::memcpy(&u, &x[i], 4);
    if (dt == DType::bfloat16) {
      const auto h = weightsync::detail::f32_bits_to_bf16(u);
      std::memcpy(b.data() + 2 * i, &h, 2);
    } else {
      std::memcpy(b.data() + 4 * i, &u, 4);
    }
  }
  return b;
}

struct Result {
  std::vector<std::uint8_t> w;
  std::vector<float> s;
};

Result host_quantize(const TensorMeta& m, const std::vector<std::byte>& in, Fp8Scaling mode) {
  Result r{std::vector<std::uint8_t>(m.numel()),
           std::vector<float>(count(fp8_scale_shape(m, mode)))};
  quantize_fp8_host(m, in.data(), mode, r.w.data(), r.s.data());
  return r;
}

// Runs the kernels on `in` placed `offset` bytes into a device buffer, outputs poisoned first.
Result device_quantize(const TensorMeta& m, const std::vector<std::byte>& in, Fp8Scaling mode,
                       std::size_t offset, cudaStream_t stream) {
  const std::size_t ns = count(fp8_scale_shape(m, mode));
  int dev = 0;
  detail::check(cudaGetDevice(&dev), "cudaGetDevice");
  DeviceBuffer src(in.size() + offset + 16, dev), dst(m.numel() + 16, dev), sc(ns * 4 + 16, dev);
  detail::check(cudaMemcpy(src.data() + offset, in.data(), in.size(), cudaMemcpyHostToDevice),
                "cudaMemcpy");
  detail::check(cudaMemset(dst.data(), 0xab, dst.size()), "cudaMemset");
  detail::check(cudaMemset(sc.data(), 0xcd, sc.size()), "cudaMemset");
  // The memsets run on the legacy default stream, which a non-blocking `stream` does not wait
  // for: without this, a late poison could land on scales the kernel already wrote.
  detail::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  quantize_fp8(m, src.data() + offset, mode, dst.data(), reinterpret_cast<float*>(sc.data()),
               stream);
  detail::check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  Result r{std::vector<std::uint8_t>(m.numel() + 16), std::vector<float>(ns + 4)};
  detail::check(cudaMemcpy(r.w.data(), dst.data(), r.w.size(), cudaMemcpyDeviceToHost),
                "cudaMemcpy");
  detail::check(cudaMemcpy(r.s.data(), sc.data(), ns * 4 + 16, cudaMemcpyDeviceToHost),
                "cudaMemcpy");
  // nothing written past the ends
  for (std::size_t i = m.numel(); i < r.w.size(); ++i) CHECK(r.w[i] == 0xab);
  std::uint32_t tail;
  std::memcpy(&tail, &r.s[ns], 4);
  CHECK(tail == 0xcdcdcdcdu);
  r.w.resize(m.numel());
  r.s.resize(ns);
  return r;
}

std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Bit-exact comparison; `nan_any_sign`: an fp8 NaN of either sign (0x7f / 0xff) and any fp32 NaN
// are equal (torch keeps the sign of the NaN it computed; weightsync stores 0x7f).
std::size_t mismatches(const Result& a, const Result& b, bool nan_any_sign) {
  std::size_t bad = 0;
  REQUIRE(a.w.size() == b.w.size());
  REQUIRE(a.s.size() == b.s.size());
  for (std::size_t i = 0; i < a.s.size(); ++i) {
    const bool same =
        bits(a.s[i]) == bits(b.s[i]) || (nan_any_sign && std::isnan(a.s[i]) && std::isnan(b.s[i]));
    if (!same && bad++ < 5) UNSCOPED_INFO("scale " << i << ": " << a.s[i] << " vs " << b.s[i]);
  }
  for (std::size_t i = 0; i < a.w.size(); ++i) {
    const bool same =
        a.w[i] == b.w[i] || (nan_any_sign && (a.w[i] & 0x7f) == 0x7f && (b.w[i] & 0x7f) == 0x7f);
    if (!same && bad++ < 10)
      UNSCOPED_INFO("element " << i << ": 0x" << std::hex << int(a.w[i]) << " vs 0x" << int(b.w[i])
                               << std::dec);
  }
  return bad;
}

struct Case {
  DType dt;
  std::int64_t rows, cols;
  std::size_t offset;  // bytes: a misaligned source takes the element-wise path
  bool special;
};

std::vector<Case> cases() {
  std::vector<Case> v;
  for (DType dt : {DType::bfloat16, DType::float32}) {
    v.push_back({dt, 128, 128, 0, false});
    v.push_back({dt, 1024, 4096, 0, false});
    v.push_back({dt, 384, 1024, 0, true});
    v.push_back({dt, 200, 136, 0, true});  // partial edge blocks, vector path (136 % 8 == 0)
    v.push_back({dt, 129, 127, 0, true});  // odd columns: element-wise path
    v.push_back({dt, 300, 520, 2, true});  // misaligned source
    v.push_back({dt, 1, 1, 0, false});
    v.push_back({dt, 3, 4100, 0, false});  // per-tensor vector path needs n % 8: 12300 is not
  }
  v.push_back({DType::bfloat16, 12288, 4096, 0, false});  // a dense8b gate/up projection
  return v;
}

bool have_torch() {
  return std::system("python3 -c 'import torch' >/dev/null 2>&1") == 0;
}

std::vector<std::uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<std::uint8_t>(std::istreambuf_iterator<char>(f), {});
}

}  // namespace

TEST_CASE("fp8 kernels: bit-exact with the host implementation, all layouts", "[gpu][fp8]") {
  cudaStream_t stream = nullptr;
  detail::check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  unsigned seed = 1;
  for (const Case& c : cases()) {
    const TensorMeta m{"model.layers.0.mlp.up_proj.weight", c.dt, {c.rows, c.cols}};
    const auto in = make_input(c.dt, c.rows, c.cols, seed++, c.special);
    for (Fp8Scaling mode : kModes) {
      CAPTURE(dtype_name(c.dt), c.rows, c.cols, c.offset, c.special, fp8_scaling_name(mode));
      const Result want = host_quantize(m, in, mode);
      const Result got = device_quantize(m, in, mode, c.offset, stream);
      CHECK(mismatches(got, want, false) == 0);
    }
  }
  // a 3-D tensor per channel and per tensor, a 0-dim one per tensor, empty ones
  for (const TensorMeta& m :
       {TensorMeta{"e", DType::bfloat16, {8, 16, 24}}, TensorMeta{"s", DType::float32, {}},
        TensorMeta{"z", DType::bfloat16, {0, 64}}, TensorMeta{"c", DType::float32, {5, 0}}})
    for (Fp8Scaling mode : {Fp8Scaling::per_tensor, Fp8Scaling::per_channel}) {
      if (m.shape.empty() && mode == Fp8Scaling::per_channel) continue;
      CAPTURE(m.name, fp8_scaling_name(mode));
      const auto in = make_input(m.dtype, 1, static_cast<std::int64_t>(m.numel()), 99, false);
      CHECK(mismatches(device_quantize(m, in, mode, 0, stream), host_quantize(m, in, mode),
                       false) == 0);
    }
  cudaStreamDestroy(stream);
}

TEST_CASE("fp8 kernels: against torch's plain formula (tests/gpu/fp8_torch_ref.py)",
          "[gpu][fp8][torch]") {
  if (!have_torch()) WS_SKIP("python3 cannot import torch: the torch comparison did not run");
  const std::string dir = "fp8_torch_ref_tmp";
  REQUIRE(std::system(("mkdir -p " + dir).c_str()) == 0);
  cudaStream_t stream = nullptr;
  detail::check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  unsigned seed = 100;
  for (const Case& c : cases()) {
    if (c.rows * c.cols > (1 << 22)) continue;  // the script's byte lists are slow
    const auto in = make_input(c.dt, c.rows, c.cols, seed++, c.special);
    const TensorMeta m{"w", c.dt, {c.rows, c.cols}};
    {
      std::ofstream f(dir + "/in.bin", std::ios::binary);
      f.write(reinterpret_cast<const char*>(in.data()), static_cast<std::streamsize>(in.size()));
    }
    // one python process per input, every layout (torch's import dominates its run time)
    const std::string cmd =
        std::string("python3 '") + WEIGHTSYNC_SOURCE_DIR + "/tests/gpu/fp8_torch_ref.py' " + dir +
        "/in.bin " + std::string(dtype_name(c.dt)) + " " + std::to_string(c.rows) + " " +
        std::to_string(c.cols) + " block128,block128_ue8m0,per_tensor,per_channel " + dir + "/out";
    REQUIRE(std::system(cmd.c_str()) == 0);
    for (Fp8Scaling mode : kModes) {
      CAPTURE(dtype_name(c.dt), c.rows, c.cols, c.special, fp8_scaling_name(mode));
      const std::string out = dir + "/out." + fp8_scaling_name(mode);
      Result torch_r{read_file(out + ".w"), {}};
      const auto sb = read_file(out + ".s");
      torch_r.s.resize(sb.size() / 4);
      std::memcpy(torch_r.s.data(), sb.data(), sb.size());
      const Result got = device_quantize(m, in, mode, c.offset, stream);
      CHECK(mismatches(got, torch_r, true) == 0);
    }
  }
  cudaStreamDestroy(stream);
}

namespace {
// Device tensors of a few projections and a norm, as a WeightSource.
struct DeviceModel {
  std::vector<TensorMeta> m;
  std::vector<std::vector<std::byte>> host;
  std::vector<DeviceBuffer> dev;
  DeviceModel() {
    int d = 0;
    detail::check(cudaGetDevice(&d), "cudaGetDevice");
    const std::vector<std::pair<std::string, std::vector<std::int64_t>>> t = {
        {"model.embed_tokens.weight", {300, 256}},
        {"model.layers.0.self_attn.q_proj.weight", {256, 256}},
        {"model.layers.0.self_attn.k_proj.weight", {128, 256}},
        {"model.layers.0.input_layernorm.weight", {256}},
        {"model.layers.0.mlp.down_proj.weight", {256, 330}},
        {"model.layers.1.self_attn.q_proj.weight", {256, 256}},
        {"model.layers.1.mlp.up_proj.weight", {640, 256}},
        {"lm_head.weight", {300, 256}}};
    unsigned seed = 7;
    for (const auto& [name, shape] : t) {
      m.push_back({name, DType::bfloat16, shape});
      host.push_back(
          make_input(DType::bfloat16, shape[0], shape.size() > 1 ? shape[1] : 1, seed++, false));
      dev.emplace_back(host.back().size(), d);
      detail::check(cudaMemcpy(dev.back().data(), host.back().data(), host.back().size(),
                               cudaMemcpyHostToDevice),
                    "cudaMemcpy");
    }
    // A pageable cudaMemcpy may return before its DMA lands; the quantizer's non-blocking stream
    // would not wait for it.
    detail::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
  std::vector<TensorMeta> metas() const { return m; }
  std::vector<SourceTensorRef> iterate() {
    std::vector<SourceTensorRef> v;
    for (std::size_t i = 0; i < m.size(); ++i) v.push_back({&m[i], dev[i].data()});
    return v;
  }
};
}  // namespace

TEST_CASE("fp8 source on the device: the checkpoint's bytes, from K + 1 arenas", "[gpu][fp8]") {
  DeviceModel model;
  Fp8SourceOptions o;
  o.buffer_size_bytes = 64 * 1024;  // chunks of ~1-2 projections: every arena is reused
  o.num_buffers = 2;
  cudaStream_t stream = nullptr;
  detail::check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  Fp8Source<DeviceModel, CudaFp8Quantizer> fp8(model, o, CudaFp8Quantizer{stream, -1});
  const auto metas = fp8.metas();
  auto range = fp8.iterate();
  std::size_t i = 0, src = 0;
  for (auto it = range.begin(); it != range.end(); ++it, ++i) {
    const auto& t = *it;
    REQUIRE(i < metas.size());
    CAPTURE(metas[i].name);
    CHECK(t.meta().name == metas[i].name);
    std::vector<std::byte> got(t.meta().nbytes());
    detail::check(cudaMemcpy(got.data(), t.data(), got.size(), cudaMemcpyDeviceToHost),
                  "cudaMemcpy");
    const TensorMeta& sm = model.m[src];
    if (!fp8.quantized(sm)) {
      CHECK(got == model.host[src]);
      ++src;
      continue;
    }
    const Result want = host_quantize(sm, model.host[src], o.scaling);
    CHECK(std::memcmp(got.data(), want.w.data(), want.w.size()) == 0);
    ++it, ++i;  // the scales follow
    REQUIRE(i < metas.size());
    CHECK((*it).meta().name == sm.name + "_scale_inv");
    std::vector<float> s(want.s.size());
    detail::check(cudaMemcpy(s.data(), (*it).data(), s.size() * 4, cudaMemcpyDeviceToHost),
                  "cudaMemcpy");
    CHECK(std::memcmp(s.data(), want.s.data(), s.size() * 4) == 0);
    ++src;
  }
  CHECK(i == metas.size());
  CHECK(src == model.m.size());
  cudaStreamDestroy(stream);
}
