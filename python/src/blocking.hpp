// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! How the binding runs a blocking call: without the GIL, with Ctrl-C able to end it, and with
//! the library's errors raised as the Python classes of weightsync.errors.
//!
//! Ctrl-C: for the call's duration, on Python's main thread, a SIGINT handler is chained in front
//! of Python's: it sets detail::waits_interrupted() (every Deadline of the process then counts as
//! expired: detail/socket.hpp), passes the signal on to Python's handler, and wakes the calling
//! thread (a poll() it waits in returns EINTR). The wait gives up at once, the transfer fails and
//! aborts as after any timeout (the engine is left as after any failed transfer), and the call
//! raises KeyboardInterrupt (whatever Python's SIGINT handler raises) with the library's error as
//! its context. Waits the flag does not reach (a CUDA backend's device work) end at the next
//! chunk: the progress callback every engine of this binding installs checks the flag.

#include <pybind11/pybind11.h>

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "weightsync/detail/socket.hpp"
#include "weightsync/error.hpp"

namespace weightsync::python {

namespace py = pybind11;

namespace detail_sig {
inline struct sigaction g_previous{};
inline pthread_t g_thread{};
inline std::atomic<bool> g_fired{false};
inline unsigned long g_main_ident = 0;  // Python's main thread (set at import)

inline void on_sigint(int sig, siginfo_t* info, void* ctx) {
  if (g_fired.exchange(true)) return;  // (the wake-up below, or a second Ctrl-C)
  weightsync::detail::waits_interrupted().store(true);
  if (g_previous.sa_flags & SA_SIGINFO) {
    if (g_previous.sa_sigaction) g_previous.sa_sigaction(sig, info, ctx);
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    g_previous.sa_handler(sig);
  }
  if (!pthread_equal(pthread_self(), g_thread)) pthread_kill(g_thread, SIGINT);
}
}  // namespace detail_sig

//! Chains the SIGINT handler for one blocking call (see the file comment); nothing off Python's
//! main thread, when SIGINT is ignored or default, or inside another such call.
class InterruptScope {
 public:
  InterruptScope() {
    using namespace detail_sig;
    static int depth = 0;  // (the GIL is held here: no other thread runs this)
    depth_ = &depth;
    if (depth++ > 0 || PyThread_get_thread_ident() != g_main_ident) return;
    struct sigaction cur{};
    if (sigaction(SIGINT, nullptr, &cur) != 0) return;
    if (!(cur.sa_flags & SA_SIGINFO) && (cur.sa_handler == SIG_DFL || cur.sa_handler == SIG_IGN))
      return;
    g_previous = cur;
    g_thread = pthread_self();
    g_fired = false;
    struct sigaction ours{};
    ours.sa_sigaction = &on_sigint;
    ours.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&ours.sa_mask);
    installed_ = sigaction(SIGINT, &ours, nullptr) == 0;
  }
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;
  ~InterruptScope() {
    --*depth_;
    if (!installed_) return;
    sigaction(SIGINT, &detail_sig::g_previous, nullptr);
    weightsync::detail::waits_interrupted().store(false);
    detail_sig::g_fired = false;
  }
  //! Whether a SIGINT came during the call.
  bool interrupted() const { return installed_ && detail_sig::g_fired.load(); }

 private:
  int* depth_ = nullptr;
  bool installed_ = false;
};

//! Thrown by the binding's progress check when Ctrl-C came during a transfer.
inline void throw_if_interrupted() {
  if (weightsync::detail::waits_interrupted().load(std::memory_order_relaxed))
    throw state_error("interrupted (Ctrl-C): the transfer was aborted");
}

//! Raises `e` as its Python class (weightsync.errors), with its attributes: ConfigError.field,
//! ProtocolError / PeerError / RemoteError .peer (PeerError also .rank), TimeoutError .phase,
//! .peer and .deadline (seconds; `deadline_s` < 0: unknown), SystemError .errno. Python errors
//! (a callback's) are raised as they are.
[[noreturn]] void raise_as_python(std::exception_ptr e, double deadline_s);

//! Runs `f` without the GIL, Ctrl-C able to end it (see the file comment), its errors raised as
//! Python's.
template <class F>
auto blocking(double deadline_s, F&& f) -> std::invoke_result_t<F&> {
  using R = std::invoke_result_t<F&>;
  InterruptScope scope;
  std::exception_ptr err;
  std::conditional_t<std::is_void_v<R>, bool, std::optional<R>> out{};
  {
    py::gil_scoped_release nogil;
    try {
      if constexpr (std::is_void_v<R>)
        f();
      else
        out.emplace(f());
    } catch (...) {
      err = std::current_exception();
    }
  }
  if (scope.interrupted() && PyErr_CheckSignals() != 0) {
    // KeyboardInterrupt (or what the user's handler raised), the library's error as its context
    py::error_already_set interrupt;  // (fetched and normalized)
    if (err) {
      try {
        raise_as_python(err, deadline_s);
      } catch (py::error_already_set& lib) {
        if (interrupt.value() && lib.value())
          PyException_SetContext(interrupt.value().ptr(), lib.value().inc_ref().ptr());
      }
    }
    throw interrupt;
  }
  if (err) raise_as_python(err, deadline_s);
  if constexpr (!std::is_void_v<R>) return std::move(*out);
}

}  // namespace weightsync::python
