// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! BackendRegistry: backends by name; the built-ins ("host"; "nccl" with NCCL; "ipc" and "p2p"
//! with CUDA) are registered on first use, and applications may add their own.

#include "weightsync/config.hpp"

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "weightsync/engine/backend.hpp"
#include "weightsync/engine/comm_backend.hpp"
#include "weightsync/engine/ipc_backend.hpp"
#include "weightsync/error.hpp"

namespace weightsync {

//! Backends by name. The built-ins ("host"; "nccl" when NCCL is available; "ipc" and "p2p" with
//! CUDA) are registered on first use; applications may add their own.
class BackendRegistry {
 public:
  using Factory = std::function<std::unique_ptr<Backend>()>;

  static BackendRegistry& global();

  //! @throws config_error when `name` is taken (naming the known ones).
  void add(const std::string& name, Factory f) {
    std::lock_guard lock(mutex_);
    if (name.empty()) throw config_error("backend", "a backend needs a name");
    if (factories_.count(name))
      throw config_error("backend", "a backend named '" + name +
                                        "' is already registered (known: " + known_locked() + ")");
    factories_[name] = std::move(f);
  }
  //! @throws config_error for an unknown name, listing the known ones; for a built-in backend
  //!   this build left out ("nccl" without NCCL, "ipc"/"p2p" without CUDA), saying so.
  std::unique_ptr<Backend> make(const std::string& name) const {
    std::lock_guard lock(mutex_);
    auto it = factories_.find(name);
    if (it == factories_.end()) {
      const std::string why = not_compiled_in(name, WEIGHTSYNC_HAS_CUDA, WEIGHTSYNC_HAS_NCCL);
      throw config_error(
          "backend", why.empty() ? "unknown backend '" + name + "' (known: " + known_locked() + ")"
                                 : why + " (known: " + known_locked() + ")");
    }
    return it->second();
  }
  //! Why the built-in backend `name` is missing from a build with these features ("" when it is
  //! not a built-in one, or would be there).
  static std::string not_compiled_in(const std::string& name, bool has_cuda, bool has_nccl) {
    if (name == "nccl" && !has_nccl)
      return "nccl backend not compiled in (this build has no NCCL: configure with the CUDA "
             "toolkit and NCCL, WEIGHTSYNC_WITH_NCCL=ON)";
    if ((name == "ipc" || name == "p2p") && !has_cuda)
      return name +
             " backend not compiled in (this build has no CUDA: configure with the CUDA toolkit, "
             "WEIGHTSYNC_WITH_CUDA=ON)";
    return "";
  }
  std::vector<std::string> names() const {
    std::lock_guard lock(mutex_);
    std::vector<std::string> v;
    for (const auto& [k, f] : factories_) v.push_back(k);
    return v;
  }

 private:
  std::string known_locked() const {
    std::string s;
    for (const auto& [k, f] : factories_) s += (s.empty() ? "" : ", ") + k;
    return s;
  }
  mutable std::mutex mutex_;
  std::map<std::string, Factory> factories_;
};

inline BackendRegistry& BackendRegistry::global() {
  static BackendRegistry* r = [] {
    auto* reg = new BackendRegistry;  // never destroyed: usable from static destructors too
    reg->add("host", make_host_backend);
#if WEIGHTSYNC_HAS_CUDA
    reg->add("ipc", [] { return make_ipc_backend(); });
    reg->add("p2p", [] { return make_p2p_backend(); });
#endif
#if WEIGHTSYNC_HAS_NCCL
    reg->add("nccl", make_nccl_backend);
#endif
    return reg;
  }();
  return *r;
}

}  // namespace weightsync
