// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! NcclGroup: a scope in which operations on a GroupedCommunicator are fused into one launch
//! (ncclGroupStart in the constructor, ncclGroupEnd in the destructor). During unwinding the
//! group is still ended, without throwing.

#include <exception>

#include "weightsync/concepts.hpp"
#include "weightsync/log.hpp"

namespace weightsync {

template <GroupedCommunicator C>
class NcclGroup {
 public:
  explicit NcclGroup(C& comm) : comm_(comm), exceptions_(std::uncaught_exceptions()) {
    comm_.group_start();
  }
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;
  //! Ends the group. Throws what group_end() throws, unless an exception is already in flight.
  ~NcclGroup() noexcept(false) {
    if (std::uncaught_exceptions() > exceptions_) {
      try {
        comm_.group_end();
      } catch (const std::exception& e) {
        log(LogLevel::warning, e.what());
      }
      return;
    }
    comm_.group_end();
  }

 private:
  C& comm_;
  int exceptions_;
};

}  // namespace weightsync
