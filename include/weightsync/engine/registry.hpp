// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! BackendRegistry: backends by name. It includes no backend: each built-in registers itself from
//! its own header when the program starts ("host": host/backend.hpp, which engine.hpp includes;
//! "nccl": nccl/backend.hpp; "ipc" and "p2p": ipc/backend.hpp; all of them: backends.hpp),
//! and applications may add their own.

#include "weightsync/config.hpp"

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "weightsync/engine/backend.hpp"
#include "weightsync/error.hpp"

namespace weightsync {

//! Backends by name. The built-ins register themselves when the program starts, from the header
//! that defines them, so a program has those whose headers one of its sources includes:
//!
//! | name          | header                                       | needs |
//! |---------------|----------------------------------------------|-------|
//! | "host"        | <weightsync/host/backend.hpp> (engine.hpp)   |       |
//! | "nccl"        | <weightsync/nccl/backend.hpp>                | NCCL  |
//! | "ipc", "p2p"  | <weightsync/ipc/backend.hpp>                 | CUDA  |
//!
//! <weightsync/backends.hpp> (and weightsync.hpp) includes every built-in this build has.
//! Applications add their own with add(), usually from main() before the engines are created.
class BackendRegistry {
 public:
  using Factory = std::function<std::unique_ptr<Backend>()>;

  //! The registry the engines use. Never destroyed: usable from static destructors too.
  static BackendRegistry& global() {
    static BackendRegistry* r = new BackendRegistry;
    return *r;
  }

  //! @throws config_error when `name` is empty or taken (naming the known ones).
  void add(const std::string& name, Factory f) {
    std::lock_guard lock(mutex_);
    if (name.empty()) throw config_error("backend", "a backend needs a name");
    if (factories_.count(name))
      throw config_error("backend", "a backend named '" + name +
                                        "' is already registered (known: " + known_locked() + ")");
    factories_[name] = std::move(f);
  }
  //! @throws config_error for an unknown name, listing the known ones; for a built-in backend
  //!   this build left out ("nccl" without NCCL, "ipc"/"p2p" without CUDA), saying so; for one
  //!   it has but this program did not register, naming the header to include.
  std::unique_ptr<Backend> make(const std::string& name) const {
    std::lock_guard lock(mutex_);
    auto it = factories_.find(name);
    if (it == factories_.end()) {
      const std::string why = missing_builtin(name, WEIGHTSYNC_HAS_CUDA, WEIGHTSYNC_HAS_NCCL);
      throw config_error(
          "backend", why.empty() ? "unknown backend '" + name + "' (known: " + known_locked() + ")"
                                 : why + " (known: " + known_locked() + ")");
    }
    return it->second();
  }
  //! The header that defines the built-in backend `name` ("" when `name` is not a built-in).
  static std::string builtin_header(const std::string& name) {
    if (name == "host") return "weightsync/host/backend.hpp";
    if (name == "nccl") return "weightsync/nccl/backend.hpp";
    if (name == "ipc" || name == "p2p") return "weightsync/ipc/backend.hpp";
    return "";
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
  //! Why the built-in backend `name` is not in a registry of a build with these features: not
  //! compiled in (see not_compiled_in), or its header was not included ("" when `name` is not a
  //! built-in).
  static std::string missing_builtin(const std::string& name, bool has_cuda, bool has_nccl) {
    std::string why = not_compiled_in(name, has_cuda, has_nccl);
    if (!why.empty()) return why;
    const std::string header = builtin_header(name);
    if (header.empty()) return "";
    return name + " backend not registered: this program includes no <" + header +
           "> (include it, or <weightsync/backends.hpp> for every built-in backend, in one of its "
           "sources)";
  }
  std::vector<std::string> names() const {
    std::lock_guard lock(mutex_);
    std::vector<std::string> v;
    for (const auto& [k, f] : factories_) v.push_back(k);
    return v;
  }
  bool contains(const std::string& name) const {
    std::lock_guard lock(mutex_);
    return factories_.count(name) != 0;
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

namespace detail {
//! A built-in backend's self-registration, run when the program starts from an inline variable in
//! its header (one initialization per program, however many sources include it):
//! `inline const bool x_backend_registered = register_builtin_backend("x", make_x_backend);`.
//! Never throws (it runs before main): a name already taken (the same built-in reached through
//! a second copy of the header, in a shared library) keeps its first factory.
inline bool register_builtin_backend(const char* name, BackendRegistry::Factory f) noexcept {
  try {
    auto& r = BackendRegistry::global();
    if (r.contains(name)) return false;
    r.add(name, std::move(f));
    return true;
  } catch (...) {
    return false;
  }
}
}  // namespace detail

}  // namespace weightsync
