// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! @deprecated Moved to <weightsync/vllm/http_server.hpp>; this forwarding header goes in the next
//! release.

#include "weightsync/config.hpp"
#if !__has_include(<httplib.h>)
#error "<weightsync/http/server.hpp> needs cpp-httplib (<httplib.h>)"
#endif

#include "weightsync/vllm/http_server.hpp"  // IWYU pragma: export
