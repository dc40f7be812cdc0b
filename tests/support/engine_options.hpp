// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! The options of a test's engines: a TrainerEngine or WeightTransferEngine over given
//! EngineOptions, everything else at its default.

#include <weightsync/engine.hpp>

namespace ws_test {

//! `Engine::Options` (TrainerEngine, WeightTransferEngine) with `engine` as its EngineOptions.
template <class Engine>
typename Engine::Options options_for(const weightsync::EngineOptions& engine) {
  typename Engine::Options o;
  o.engine = engine;
  return o;
}

}  // namespace ws_test
