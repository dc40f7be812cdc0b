// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// FP8 quantize throughput (GB/s of bf16 / fp32 input) of the CUDA kernels on dense8b's projection
// shapes, per scale layout: CUDA events around `reps` launches after `warmup`, the median of
// `trials` such timings. Before timing, each output is checked bit for bit against the host
// implementation (the whole tensor for q_proj; the first 256 rows elsewhere, per-tensor excepted).
//   fp8_quantize_bench [--reps N] [--trials N] [--dtype bfloat16|float32] [--json FILE]
#include <weightsync/cuda/check.hpp>
#include <weightsync/cuda/device_buffer.hpp>
#include <weightsync/cuda/fp8_quantize.hpp>
#include <weightsync/fp8/quantize.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

using namespace weightsync;

namespace {

struct Shape {
  const char* name;
  std::int64_t rows, cols;
};

std::size_t scale_count(const TensorMeta& m, Fp8Scaling s) {
  std::size_t n = 1;
  for (auto d : fp8_scale_shape(m, s)) n *= static_cast<std::size_t>(d);
  return n;
}

// Deterministic weights, normal-ish, row magnitudes varying.
std::vector<std::byte> make_input(DType dt, std::int64_t rows, std::int64_t cols) {
  std::vector<std::byte> b(static_cast<std::size_t>(rows * cols) * dtype_size(dt));
  std::uint64_t x = 0x9e3779b97f4a7c15ull;
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      const float u = static_cast<float>(static_cast<std::int32_t>(x >> 32)) / 2147483648.0f;
      const float v = u * u * u * std::ldexp(1.0f, static_cast<int>(r % 9) - 6);
      std::uint32_t bits;
      std::memcpy(&bits, &v, 4);
      const auto i = static_cast<std::size_t>(r * cols + c);
      if (dt == DType::bfloat16) {
        const auto h = weightsync::detail::f32_bits_to_bf16(bits);
        std::memcpy(b.data() + 2 * i, &h, 2);
      } else {
        std::memcpy(b.data() + 4 * i, &bits, 4);
      }
    }
  return b;
}

// Checks the device output of rows [0, rows_checked) (the whole tensor for per-tensor scales).
bool check(const TensorMeta& m, Fp8Scaling s, const std::vector<std::byte>& in,
           const DeviceBuffer& dst, const DeviceBuffer& sc, std::int64_t rows_checked) {
  const std::int64_t cols = m.shape[1];
  if (s == Fp8Scaling::per_tensor) rows_checked = m.shape[0];
  const TensorMeta part{m.name, m.dtype, {rows_checked, cols}};
  std::vector<std::uint8_t> w(part.numel()), got(part.numel());
  std::vector<float> sw(scale_count(part, s)), sgot(sw.size());
  quantize_fp8_host(part, in.data(), s, w.data(), sw.data());
  detail::check(cudaMemcpy(got.data(), dst.data(), got.size(), cudaMemcpyDeviceToHost),
                "cudaMemcpy");
  // block scales of the first rows: the first ceil(rows_checked/128) rows of the scale grid
  detail::check(cudaMemcpy(sgot.data(), sc.data(), sgot.size() * 4, cudaMemcpyDeviceToHost),
                "cudaMemcpy");
  return w == got && std::memcmp(sw.data(), sgot.data(), sw.size() * 4) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 20, trials = 7;
  DType dt = DType::bfloat16;
  std::string json;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--reps")
      reps = std::stoi(argv[i + 1]);
    else if (a == "--trials")
      trials = std::stoi(argv[i + 1]);
    else if (a == "--dtype")
      dt = parse_dtype(argv[i + 1]);
    else if (a == "--json")
      json = argv[i + 1];
    else {
      std::fprintf(stderr, "unknown option %s\n", argv[i]);
      return 2;
    }
  }
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::printf("SKIPPED: no CUDA device\n");
    return 4;
  }
  cudaDeviceProp prop{};
  detail::check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf("# fp8_quantize_bench on %s, input %s, median of %d trials of %d launches\n",
              prop.name, std::string(dtype_name(dt)).c_str(), trials, reps);
  std::printf("# %-10s %13s %-15s %10s %10s %10s %6s\n", "tensor", "shape", "scaling", "in_MB",
              "time_us", "in_GB/s", "check");
  const Shape shapes[] = {{"q_proj", 4096, 4096},
                          {"k_proj", 1024, 4096},
                          {"gate_proj", 12288, 4096},
                          {"down_proj", 4096, 12288},
                          {"embed", 151936, 4096}};
  std::ofstream js;
  if (!json.empty()) js.open(json);
  cudaStream_t stream = nullptr;
  detail::check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  cudaEvent_t e0, e1;
  detail::check(cudaEventCreate(&e0), "cudaEventCreate");
  detail::check(cudaEventCreate(&e1), "cudaEventCreate");
  bool all_ok = true;
  for (const Shape& sh : shapes) {
    const TensorMeta m{sh.name, dt, {sh.rows, sh.cols}};
    const auto in = make_input(dt, sh.rows, sh.cols);
    DeviceBuffer src(in.size(), 0), dst(m.numel(), 0);
    detail::check(cudaMemcpy(src.data(), in.data(), in.size(), cudaMemcpyHostToDevice),
                  "cudaMemcpy");
    for (Fp8Scaling s : {Fp8Scaling::block128, Fp8Scaling::block128_ue8m0, Fp8Scaling::per_tensor,
                         Fp8Scaling::per_channel}) {
      DeviceBuffer sc(scale_count(m, s) * 4, 0);
      detail::check(cudaMemset(dst.data(), 0xab, dst.size()), "cudaMemset");
      // (the legacy stream's memset and upload must land before the non-blocking stream reads)
      detail::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      quantize_fp8(m, src.data(), s, dst.data(), reinterpret_cast<float*>(sc.data()), stream);
      detail::check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      const bool whole = std::string(sh.name) == "q_proj";
      const bool ok = (s == Fp8Scaling::per_tensor && sh.rows > 16384) ||
                      check(m, s, in, dst, sc, whole ? sh.rows : 256);
      all_ok = all_ok && ok;
      for (int w = 0; w < 3; ++w)
        quantize_fp8(m, src.data(), s, dst.data(), reinterpret_cast<float*>(sc.data()), stream);
      std::vector<float> ms;
      for (int t = 0; t < trials; ++t) {
        detail::check(cudaEventRecord(e0, stream), "cudaEventRecord");
        for (int r = 0; r < reps; ++r)
          quantize_fp8(m, src.data(), s, dst.data(), reinterpret_cast<float*>(sc.data()), stream);
        detail::check(cudaEventRecord(e1, stream), "cudaEventRecord");
        detail::check(cudaEventSynchronize(e1), "cudaEventSynchronize");
        float x = 0;
        detail::check(cudaEventElapsedTime(&x, e0, e1), "cudaEventElapsedTime");
        ms.push_back(x / static_cast<float>(reps));
      }
      std::sort(ms.begin(), ms.end());
      const double us = ms[ms.size() / 2] * 1e3;
      const double mb = static_cast<double>(in.size()) / 1e6;
      const double gbs = static_cast<double>(in.size()) / (us * 1e-6) / 1e9;
      const std::string shape = std::to_string(sh.rows) + "x" + std::to_string(sh.cols);
      const char* check_text = (s == Fp8Scaling::per_tensor && sh.rows > 16384) ? "skip"
                               : ok                                             ? "ok"
                                                                                : "FAIL";
      std::printf("  %-10s %13s %-15s %10.1f %10.1f %10.1f %6s\n", sh.name, shape.c_str(),
                  fp8_scaling_name(s), mb, us, gbs, check_text);
      if (js)
        js << "{\"tensor\":\"" << sh.name << "\",\"shape\":\"" << shape << "\",\"dtype\":\""
           << dtype_name(dt) << "\",\"scaling\":\"" << fp8_scaling_name(s)
           << "\",\"in_bytes\":" << in.size() << ",\"time_us\":" << us << ",\"in_GBps\":" << gbs
           << ",\"check\":\"" << check_text << "\",\"device\":\"" << prop.name << "\"}\n";
    }
  }
  std::printf("# check: %s\n", all_ok ? "all outputs match the host implementation" : "MISMATCH");
  return all_ok ? 0 : 1;
}
