// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Whether CUDA MPS is serving this process's GPU clients. Processes that share a GPU without MPS
//! run in time slices: a wait on the other process (a colocated `ipc` sync, NCCL ranks sharing a
//! GPU) can cost a slice, milliseconds. Under MPS their work runs side by side (BENCHMARKS.md:
//! lora8b colocated 430.7 -> 235.8 us on one H200). Start it with `nvidia-cuda-mps-control -d`.

#include "weightsync/config.hpp"

#if !WEIGHTSYNC_HAS_CUDA
#error "<weightsync/cuda/mps.hpp> needs the CUDA runtime (WEIGHTSYNC_HAS_CUDA=0)"
#endif

#include <unistd.h>

#include <cstdlib>
#include <string>

namespace weightsync {

//! The MPS pipe directory a CUDA client of this process uses: CUDA_MPS_PIPE_DIRECTORY, else the
//! default /tmp/nvidia-mps.
inline std::string mps_pipe_directory() {
  const char* d = std::getenv("CUDA_MPS_PIPE_DIRECTORY");
  return d && *d ? std::string(d) : std::string("/tmp/nvidia-mps");
}

//! True when an MPS control daemon listens in mps_pipe_directory() (its `control` pipe exists):
//! CUDA contexts this process creates from now on are MPS clients.
inline bool mps_active() {
  return ::access((mps_pipe_directory() + "/control").c_str(), F_OK) == 0;
}

//! One line for a log or a benchmark header: whether MPS is active, and what is lost without it.
inline std::string mps_note() {
  if (mps_active())
    return "MPS active (" + mps_pipe_directory() + "): processes sharing the GPU run side by side";
  return "MPS not running: processes sharing the GPU run in time slices, and a wait on the other "
         "process can cost a slice (ms); start nvidia-cuda-mps-control -d (README, ipc)";
}

}  // namespace weightsync
