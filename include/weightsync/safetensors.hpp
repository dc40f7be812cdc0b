// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! safetensors: the header parser (pure, fuzzable), the mmap reader (a TensorIterator) and the
//! writer (a host-path LoadWeightsFn).

#include "weightsync/safetensors/file.hpp"
#include "weightsync/safetensors/header.hpp"
#include "weightsync/safetensors/writer.hpp"
