// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Model-aware loading: placements and rename maps, the param_mappings file, the HF -> vLLM model
//! maps, and the destination planner.

#include "weightsync/config.hpp"
#include "weightsync/loading/cast.hpp"
#include "weightsync/loading/models.hpp"
#include "weightsync/loading/param_mappings.hpp"
#include "weightsync/loading/placement.hpp"
#include "weightsync/loading/planner.hpp"
#if WEIGHTSYNC_HAS_CUDA
// LoadPlan::load and loader() on a cudaStream_t (gathers and quantize on load). Always with CUDA: a
// plan that gathers would otherwise compile without it and fail at run time, and two translation
// units that disagree on it would instantiate LoadPlan::load<cudaStream_t> differently.
#include "weightsync/cuda/fp8_load.hpp"
#include "weightsync/cuda/gather.hpp"
#endif
