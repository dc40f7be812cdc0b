// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Umbrella header: everything the current configuration supports.

#include "weightsync/config.hpp"

#include "weightsync/chunk_plan.hpp"
#include "weightsync/concepts.hpp"
#include "weightsync/dtype.hpp"
#include "weightsync/error.hpp"
#include "weightsync/host/communicator.hpp"
#include "weightsync/host/device_policy.hpp"
#include "weightsync/host/rendezvous.hpp"
#include "weightsync/info.hpp"
#include "weightsync/log.hpp"
#include "weightsync/packed_broadcast.hpp"
#include "weightsync/tensor_meta.hpp"
