// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The exception hierarchy. Every error this library throws derives from weightsync::error and its
//! message starts with a stable prefix, e.g. "[weightsync.config] packed_num_buffers: ...".
//! cuda_error and nccl_error live in <weightsync/cuda/check.hpp> and <weightsync/nccl/check.hpp>.

#include <exception>
#include <stdexcept>
#include <string>
#include <utility>

namespace weightsync {

//! Root of every exception thrown by weightsync.
class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

//! Bad configuration or input: names the field at fault ("world_size: must be >= 1, got 0").
class config_error : public error {
 public:
  config_error(std::string field, const std::string& what)
      : error("[weightsync.config] " + (field.empty() ? what : field + ": " + what)),
        field_(std::move(field)) {}
  //! The offending field ("" when the error is not about one field).
  const std::string& field() const noexcept { return field_; }

 private:
  std::string field_;
};

//! A peer broke the protocol: wrong magic/version, mismatched handshake, out-of-order frame.
class protocol_error : public error {
 public:
  protocol_error(int peer, const std::string& what)
      : error("[weightsync.protocol] " + what), peer_(peer) {}
  //! Rank of the peer at fault, -1 when unknown (e.g. a stranger on the rendezvous port).
  int peer() const noexcept { return peer_; }

 private:
  int peer_;
};

//! A deadline passed. Names the phase ("rendezvous", "broadcast", ...) and the peer if known.
class timeout_error : public error {
 public:
  timeout_error(std::string phase, int peer, const std::string& what)
      : error("[weightsync.timeout] " + phase + ": " + what), phase_(std::move(phase)), peer_(peer) {}
  const std::string& phase() const noexcept { return phase_; }
  int peer() const noexcept { return peer_; }

 private:
  std::string phase_;
  int peer_;
};

//! A peer went away: connection refused, reset or closed, or the peer aborted the communicator.
class peer_error : public error {
 public:
  peer_error(int peer, const std::string& what) : error("[weightsync.peer] " + what), peer_(peer) {}
  int peer() const noexcept { return peer_; }

 private:
  int peer_;
};

//! A peer reported that it failed (status frame or round acknowledgement); carries its message.
class remote_error : public error {
 public:
  remote_error(int peer, const std::string& what)
      : error("[weightsync.remote] " + what), peer_(peer) {}
  int peer() const noexcept { return peer_; }

 private:
  int peer_;
};

//! An API was called in the wrong state (update before init, double start, use after abort).
class state_error : public error {
 public:
  explicit state_error(const std::string& what) : error("[weightsync.state] " + what) {}
};

//! An operating-system call failed (socket, poll, spawn); carries errno.
class system_error : public error {
 public:
  system_error(const std::string& what, int err)
      : error("[weightsync.system] " + what), errno_(err) {}
  int code() const noexcept { return errno_; }

 private:
  int errno_;
};

namespace detail {
//! What an exception says (for status messages to peers, and failures held as exception_ptr).
inline std::string what_of(const std::exception_ptr& p) {
  try {
    std::rethrow_exception(p);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}
}  // namespace detail

}  // namespace weightsync
