// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Model-aware loading: placements and rename maps, the param_mappings file, the HF -> vLLM model
//! maps, and the destination planner.

#include "weightsync/loading/cast.hpp"
#include "weightsync/loading/models.hpp"
#include "weightsync/loading/param_mappings.hpp"
#include "weightsync/loading/placement.hpp"
#include "weightsync/loading/planner.hpp"
