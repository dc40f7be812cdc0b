// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Version macros and the feature switches WEIGHTSYNC_HAS_CUDA / WEIGHTSYNC_HAS_NCCL (0 or 1).
//! CMake's targets define each one that is 1 (weightsync::cuda) and WEIGHTSYNC_HOST_TARGET (every
//! target): what none defines is 0. Code built without CMake falls back to __has_include.

#define WEIGHTSYNC_VERSION_MAJOR 0
#define WEIGHTSYNC_VERSION_MINOR 1
#define WEIGHTSYNC_VERSION_PATCH 0
#define WEIGHTSYNC_VERSION_STRING "0.1.0"
#define WEIGHTSYNC_VERSION \
  (WEIGHTSYNC_VERSION_MAJOR * 10000 + WEIGHTSYNC_VERSION_MINOR * 100 + WEIGHTSYNC_VERSION_PATCH)

#if !defined(WEIGHTSYNC_HAS_CUDA) && defined(WEIGHTSYNC_HOST_TARGET)
#define WEIGHTSYNC_HAS_CUDA 0  // CMake: weightsync::cuda (or weightsync::weightsync) not linked
#endif
#ifndef WEIGHTSYNC_HAS_CUDA
#if defined(__has_include)
#if __has_include(<cuda_runtime_api.h>)
#define WEIGHTSYNC_HAS_CUDA 1
#endif
#endif
#endif
#ifndef WEIGHTSYNC_HAS_CUDA
#define WEIGHTSYNC_HAS_CUDA 0
#endif

#if !defined(WEIGHTSYNC_HAS_NCCL) && defined(WEIGHTSYNC_HOST_TARGET)
#define WEIGHTSYNC_HAS_NCCL 0  // CMake: no linked target found NCCL
#endif
#ifndef WEIGHTSYNC_HAS_NCCL
#if WEIGHTSYNC_HAS_CUDA && defined(__has_include)
#if __has_include(<nccl.h>)
#define WEIGHTSYNC_HAS_NCCL 1
#endif
#endif
#endif
#ifndef WEIGHTSYNC_HAS_NCCL
#define WEIGHTSYNC_HAS_NCCL 0
#endif

#if WEIGHTSYNC_HAS_NCCL && !WEIGHTSYNC_HAS_CUDA
#error "WEIGHTSYNC_HAS_NCCL=1 needs WEIGHTSYNC_HAS_CUDA=1"
#endif
