// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! One verified round of a GPU transfer test, whatever moves the bytes (NCCL broadcast, IPC
//! pull, the engines): the producer fills its model with the round's pattern and sends it; the
//! consumer poisons its model, receives (views copied in as vLLM's load_weights does, or straight
//! into the parameters), and counts the bytes that differ from the pattern.

#include <weightsync/cuda/check.hpp>
#include <weightsync/backends.hpp>
#include <weightsync/engine.hpp>
#include <weightsync/tensor_meta.hpp>

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "support/gpu_model.hpp"

namespace ws_test {

//! How the consumer takes the tensors: views handed to load_weights, or its own destinations.
enum class Mode { views, zero_copy };

//! Fills `model` with round `round`'s pattern and waits for it.
inline void fill_now(const DeviceModel& model, std::uint64_t round, cudaStream_t s) {
  model.fill(round, s);
  weightsync::detail::check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
}

//! Poisons `model` (0xCD everywhere) and waits for it.
inline void poison_now(const DeviceModel& model, cudaStream_t s) {
  model.poison(s);
  weightsync::detail::check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
}

//! The producer's side of a round: fills `model` with round `round`'s pattern on `s` and calls
//! `send(items, opt)` with every tensor and opt.source_stream = s.
template <class Send>
void send_round(const std::vector<weightsync::TensorMeta>& metas, const DeviceModel& model,
                weightsync::TransferOptions opt, cudaStream_t s, std::uint64_t round, Send&& send) {
  model.fill(round, s);
  opt.source_stream = s;  // the producer orders its reads after the fill
  send(ModelSource{metas, model}.iterate(), opt);
}

//! The consumer's side of a round: poisons `model`, calls `receive(opt, load)` (with
//! opt.destination set for Mode::zero_copy), and returns the bytes that differ from round
//! `round`'s pattern.
template <class Receive>
unsigned long long receive_round(std::span<const weightsync::TensorMeta> metas,
                                 const DeviceModel& model, weightsync::TransferOptions opt,
                                 cudaStream_t s, std::uint64_t round, Mode mode,
                                 Receive&& receive) {
  poison_now(model, s);
  auto index = [&](const weightsync::TensorMeta* m) {
    return static_cast<std::size_t>(m - metas.data());
  };
  if (mode == Mode::zero_copy)
    opt.destination = [&](const weightsync::TensorMeta& m) -> void* {
      return model.data(index(&m));
    };
  receive(opt, [&](std::span<const weightsync::TensorView> batch, cudaStream_t stream) {
    for (const auto& v : batch)  // what vLLM's load_weights does: copy into the parameter
      if (v.nbytes)
        weightsync::detail::check(cudaMemcpyAsync(model.data(index(v.meta)), v.data, v.nbytes,
                                                  cudaMemcpyDeviceToDevice, stream),
                                  "cudaMemcpyAsync");
  });
  return model.count_wrong(round, s);
}

//! An engine's destination function: every other tensor (odd index) straight into its parameter,
//! the rest (nullptr) through load_weights.
inline auto every_other_into(const std::vector<weightsync::TensorMeta>& metas,
                             const DeviceModel& model) {
  return [&metas, &model](const weightsync::TensorMeta& m) -> void* {
    const auto i = index_of(metas, m);
    return i % 2 ? model.data(i) : nullptr;
  };
}

//! A worker engine's update into `model`: every other tensor straight into its parameter, the
//! rest through load_weights (copied in on the stream it gets).
inline void update_half_in_place(weightsync::WeightTransferEngine& e,
                                 const weightsync::NcclUpdateInfo& u,
                                 const std::vector<weightsync::TensorMeta>& metas,
                                 const DeviceModel& model) {
  e.update_weights(u, copy_into(metas, model), every_other_into(metas, model));
}

//! The engine options of a GPU engine test: `backend` on `device`, every wait bounded by `timeout`.
inline weightsync::EngineOptions gpu_engine_options(const std::string& backend, int device,
                                                    std::chrono::milliseconds timeout) {
  weightsync::EngineOptions e;
  e.backend = backend;
  e.device = device;
  e.timeout = timeout;
  return e;
}

}  // namespace ws_test
