// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! A model's tensors in one device arena (256-byte aligned offsets), filled with a per-tensor
//! pattern, poisoned, and verified bit-exactly on the device. Shared by GPU tests and benchmarks.

#include <weightsync/cuda/check.hpp>
#include <weightsync/cuda/device_buffer.hpp>
#include <weightsync/tensor_meta.hpp>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cuda_pattern.hpp"

namespace ws_test {

inline std::uint64_t tensor_seed(std::uint64_t round, std::size_t index) {
  return round * 1000003ull + index * 7919ull + 17;
}

// Mixed dtypes, a 0-dim and zero-size tensors, odd sizes, and a few large tensors.
inline std::vector<weightsync::TensorMeta> mixed_layout() {
  using weightsync::DType;
  using weightsync::TensorMeta;
  std::vector<TensorMeta> m = {
      {"embed", DType::bfloat16, {32768, 1024}},  // 64 MiB
      {"scalar", DType::float32, {}},
      {"empty", DType::bfloat16, {0, 16}},
      {"q", DType::float16, {1024, 1024}},
      {"bias", DType::float64, {3}},
      {"mask", DType::bool_, {7}},
      {"idx", DType::int64, {5}},
      {"f8", DType::float8_e4m3fn, {333}},
      {"f8b", DType::float8_e5m2, {2, 3}},
      {"i8", DType::int8, {9}},
      {"u8", DType::uint8, {1}},
      {"i16", DType::int16, {4}},
      {"i32", DType::int32, {4, 1}},
      {"empty2", DType::float32, {0}},
  };
  for (int l = 0; l < 8; ++l) {
    m.push_back({"layers." + std::to_string(l) + ".w", DType::bfloat16, {4096, 1024 + l}});
    m.push_back({"layers." + std::to_string(l) + ".norm", DType::float32, {1023}});
  }
  m.push_back({"lm_head", DType::bfloat16, {32768, 1024}});
  return m;
}

class DeviceModel {
 public:
  //! `gap` bytes between tensors (0: back to back when sizes are multiples of 256, as a flat
  //! parameter buffer; > 0: scattered, as separately allocated parameters).
  DeviceModel(const std::vector<weightsync::TensorMeta>& metas, int device, std::size_t gap = 0)
      : metas_(&metas) {
    std::size_t off = 0;
    for (const auto& m : metas) {
      offsets_.push_back(off);
      bytes_ += m.nbytes();
      off += (m.nbytes() + 255) / 256 * 256 + gap;
    }
    // Whole 2 MiB pages, as PyTorch's caching allocator rounds large segments: the driver may map
    // an allocation of another size with small pages, and copy engines reading it over NVLink or
    // through a CUDA IPC mapping then lose about a quarter of their speed (BENCHMARKS.md).
    extent_ = off;
    arena_ = weightsync::DeviceBuffer((off + kPage - 1) / kPage * kPage, device);
    weightsync::detail::CurrentDeviceGuard g(device);
    weightsync::detail::check(cudaMalloc(reinterpret_cast<void**>(&counter_), sizeof(unsigned long long)), "cudaMalloc");
    // Every rank's padding holds the poison from the start, so that a whole arena can be checked
    // against a reference in one pass (count_wrong): a broadcast of the arena carries 0xCD there.
    // (cudaMemset may return before it is done, on the legacy stream, which the callers' non-
    // blocking streams do not wait for: wait here, or it lands on a fill: run 115.)
    weightsync::detail::check(cudaMemset(arena_.data(), 0xCD, arena_.size()), "cudaMemset");
    weightsync::detail::check(cudaStreamSynchronize(cudaStreamLegacy), "cudaStreamSynchronize");
  }
  DeviceModel(const DeviceModel&) = delete;
  DeviceModel& operator=(const DeviceModel&) = delete;
  ~DeviceModel() { cudaFree(counter_); }

  static constexpr std::size_t kPage = std::size_t{2} << 20;
  //! Models up to this size keep a reference copy for count_wrong.
  static constexpr std::size_t kReferenceMax = std::size_t{256} << 20;

  std::byte* data(std::size_t i) const { return arena_.data() + offsets_[i]; }
  std::byte* arena() const { return arena_.data(); }
  std::size_t arena_bytes() const { return arena_.size(); }
  //! Bytes from the first tensor to the end of the last (without the page rounding).
  std::size_t extent() const { return extent_; }
  //! Sum of tensor sizes (without the alignment padding).
  std::size_t bytes() const { return bytes_; }
  std::size_t size() const { return offsets_.size(); }

  void fill(std::uint64_t round, cudaStream_t s) const {
    for (std::size_t i = 0; i < size(); ++i)
      ws_pattern::fill(data(i), (*metas_)[i].nbytes(), tensor_seed(round, i), s);
  }
  void poison(cudaStream_t s) const {
    weightsync::detail::check(cudaMemsetAsync(arena_.data(), 0xCD, arena_.size(), s),
                              "cudaMemsetAsync");
  }
  //! Bytes that differ from round `round`'s pattern, over every tensor (and, for a model of at
  //! most kReferenceMax bytes, its padding, which must hold the poison). Synchronizes `s`.
  //! A small model is compared with a reference copy of the round in one launch, not one launch
  //! per tensor: a benchmark that checks every sync of 504 tensors would otherwise launch 504
  //! kernels between its syncs.
  unsigned long long count_wrong(std::uint64_t round, cudaStream_t s) const {
    weightsync::detail::check(cudaMemsetAsync(counter_, 0, sizeof *counter_, s), "cudaMemsetAsync");
    if (extent_ <= kReferenceMax && size() > 1) {
      if (!reference_ || reference_round_ != round) {
        reference_.emplace(arena_.size(), arena_.device());
        weightsync::detail::check(cudaMemsetAsync(reference_->data(), 0xCD, reference_->size(), s),
                                  "cudaMemsetAsync");
        for (std::size_t i = 0; i < size(); ++i)
          ws_pattern::fill(reference_->data() + offsets_[i], (*metas_)[i].nbytes(),
                           tensor_seed(round, i), s);
        reference_round_ = round;
      }
      ws_pattern::count_diff(arena(), reference_->data(), extent_, counter_, s);
    } else {
      for (std::size_t i = 0; i < size(); ++i)
        ws_pattern::count_wrong(data(i), (*metas_)[i].nbytes(), tensor_seed(round, i), counter_, s);
    }
    unsigned long long host = 0;
    weightsync::detail::check(cudaMemcpyAsync(&host, counter_, sizeof host, cudaMemcpyDeviceToHost, s),
                              "cudaMemcpyAsync");
    weightsync::detail::check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    return host;
  }

  //! Bytes where this model and `other` (the same layout) differ. Synchronizes `s`.
  unsigned long long count_diff(const DeviceModel& other, cudaStream_t s) const {
    weightsync::detail::check(cudaMemsetAsync(counter_, 0, sizeof *counter_, s), "cudaMemsetAsync");
    ws_pattern::count_diff(arena(), other.arena(), extent(), counter_, s);
    unsigned long long host = 0;
    weightsync::detail::check(cudaMemcpyAsync(&host, counter_, sizeof host, cudaMemcpyDeviceToHost, s),
                              "cudaMemcpyAsync");
    weightsync::detail::check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    return host;
  }

 private:
  const std::vector<weightsync::TensorMeta>* metas_;
  std::vector<std::size_t> offsets_;
  std::size_t bytes_ = 0;
  std::size_t extent_ = 0;
  weightsync::DeviceBuffer arena_;
  unsigned long long* counter_ = nullptr;
  mutable std::optional<weightsync::DeviceBuffer> reference_;  // see count_wrong
  mutable std::uint64_t reference_round_ = 0;
};

//! What a TrainerEngine sends: the model's tensors, in the declared order (a WeightSource).
struct ModelSource {
  const std::vector<weightsync::TensorMeta>& declared;
  const DeviceModel& model;
  std::vector<weightsync::TensorMeta> metas() const { return declared; }
  std::vector<weightsync::SourceTensorRef> iterate() const {
    std::vector<weightsync::SourceTensorRef> v;
    for (std::size_t i = 0; i < declared.size(); ++i) v.push_back({&declared[i], model.data(i)});
    return v;
  }
};

//! The index of the tensor named like `m` (the engines hand out their own copies of the metadata).
inline std::size_t index_of(const std::vector<weightsync::TensorMeta>& metas, const weightsync::TensorMeta& m) {
  return static_cast<std::size_t>(
      std::find_if(metas.begin(), metas.end(), [&](const weightsync::TensorMeta& x) { return x.name == m.name; }) -
      metas.begin());
}

//! load_weights for the engines: copies every view into the model tensor of the same name, on the
//! stream it is given (what vLLM's load_weights does with copy_).
inline std::function<void(std::span<const weightsync::TensorView>, void*)> copy_into(
    const std::vector<weightsync::TensorMeta>& metas, const DeviceModel& model) {
  return [&metas, &model](std::span<const weightsync::TensorView> batch, void* stream) {
    for (const auto& v : batch)
      weightsync::detail::check(cudaMemcpyAsync(model.data(index_of(metas, *v.meta)), v.data, v.nbytes,
                                                cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(stream)),
                                "cudaMemcpyAsync");
  };
}

}  // namespace ws_test
