// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Where a process runs (node, GPU) and the placement rule of the IPC handshake: one node; one
//! GPU for ipc; a visible, peer-reachable GPU for p2p.

#include "weightsync/config.hpp"
#if !WEIGHTSYNC_HAS_CUDA
#error "<weightsync/ipc/detail/placement.hpp> needs the CUDA runtime (WEIGHTSYNC_HAS_CUDA=0)"
#endif

#include <cuda_runtime.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>

#include "weightsync/cuda/check.hpp"
#include "weightsync/detail/format.hpp"
#include "weightsync/error.hpp"
#include "weightsync/ipc/detail/plan.hpp"

namespace weightsync::detail {

//! Where a process runs: the node (boot id and host name) and the GPU (UUID).
struct ProcessLocation {
  std::string boot_id;
  std::string host;
  std::array<char, 16> uuid{};
  std::int32_t pid = 0;

  static ProcessLocation here(int device) {
    ProcessLocation p;
    std::ifstream f("/proc/sys/kernel/random/boot_id");
    std::getline(f, p.boot_id);
    char h[256] = {};
    if (::gethostname(h, sizeof h - 1) == 0) p.host = h;
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
    std::memcpy(p.uuid.data(), prop.uuid.bytes, 16);
    p.pid = static_cast<std::int32_t>(::getpid());
    return p;
  }
  static std::string uuid_string(const std::array<char, 16>& u) {
    static const char* hex = "0123456789abcdef";
    std::string s = "GPU-";
    for (int i = 0; i < 16; ++i) {
      if (i == 4 || i == 6 || i == 8 || i == 10) s += '-';
      const auto b = static_cast<unsigned char>(u[static_cast<std::size_t>(i)]);
      s += hex[b >> 4];
      s += hex[b & 15];
    }
    return s;
  }
};

//! The local CUDA device with this UUID, or -1.
inline int device_with_uuid(const std::array<char, 16>& uuid) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return -1;
  for (int d = 0; d < n; ++d) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, d) != cudaSuccess) continue;
    if (std::memcmp(prop.uuid.bytes, uuid.data(), 16) == 0) return d;
  }
  return -1;
}

//! The handshake's placement rule, on a consumer that runs at `here` on CUDA device `device`: both
//! sides use the same backend; one node (boot id and host name); `ipc`: one GPU; `p2p`: the
//! producer's GPU is visible here and reachable by peer access. @throws protocol_error saying
//! which.
inline void check_placement(const IpcPlan& plan, const ProcessLocation& here, bool same_gpu,
                            int device) {
  const char* name = same_gpu ? "ipc" : "p2p";
  if (plan.same_gpu != (same_gpu ? 1 : 0))
    throw protocol_error(0, cat("ipc handshake: the producer uses the ",
                                plan.same_gpu ? "ipc" : "p2p", " backend, this consumer ", name));
  if (plan.boot_id != here.boot_id || plan.host != here.host)
    throw protocol_error(0, cat(name, " handshake: the producer runs on another node (", plan.host,
                                ", boot ", plan.boot_id, "; here ", here.host, ", boot ",
                                here.boot_id, "): CUDA IPC needs one node; use the nccl backend"));
  if (plan.uuid == here.uuid) return;
  if (same_gpu)
    throw protocol_error(
        0, cat("ipc handshake: the producer is on ", ProcessLocation::uuid_string(plan.uuid),
               ", this consumer on ", ProcessLocation::uuid_string(here.uuid),
               ": the ipc backend needs one GPU; use p2p (or nccl) across GPUs"));
  const int d = device_with_uuid(plan.uuid);
  if (d < 0)
    throw protocol_error(
        0, cat("p2p handshake: the producer's GPU ", ProcessLocation::uuid_string(plan.uuid),
               " is not visible to this process (CUDA_VISIBLE_DEVICES?)"));
  int can = 0;
  check(cudaDeviceCanAccessPeer(&can, device, d), "cudaDeviceCanAccessPeer");
  if (!can)
    throw protocol_error(0, cat("p2p handshake: GPU ", device, " cannot access the producer's GPU ",
                                d, " (no peer access); use the nccl backend"));
}

}  // namespace weightsync::detail
