# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
"""The exceptions of weightsync: one class per C++ error type (include/weightsync/error.hpp), all
under :class:`Error`. The message is the C++ one ("[weightsync.config] world_size: ...")."""

import builtins

__all__ = [
    "Error", "ConfigError", "ProtocolError", "TimeoutError", "PeerError", "RemoteError",
    "StateError", "SystemError", "CudaError", "NcclError",
]


class Error(Exception):
    """Root of every error weightsync raises (C++ ``weightsync::error``)."""


class ConfigError(Error, ValueError):
    """Bad configuration or input. ``field``: the field at fault ("" when none)."""

    field = ""


class ProtocolError(Error):
    """A peer broke the protocol. ``peer``: its rank, -1 when unknown."""

    peer = -1


class TimeoutError(Error, builtins.TimeoutError):
    """A deadline passed. ``phase`` ("rendezvous", "broadcast", ...), ``peer`` (-1: unknown) and
    ``deadline``: the engine's timeout in seconds (None where not known)."""

    phase = ""
    peer = -1
    deadline = None


class PeerError(Error, ConnectionError):
    """A peer went away. ``rank`` (also ``peer``): its rank, -1 when unknown."""

    peer = -1
    rank = -1


class RemoteError(Error):
    """A peer reported that it failed. ``peer``: its rank."""

    peer = -1


class StateError(Error, RuntimeError):
    """A call in the wrong state (update before init, a second start, use after an abort)."""


class SystemError(Error, OSError):  # noqa: A001 (weightsync.SystemError, not the builtin)
    """An operating-system call failed. ``errno``: its error number."""


class CudaError(Error):
    """A CUDA call failed. ``status``: the cudaError_t value, ``api``: the call."""

    status = 0
    api = ""


class NcclError(Error):
    """An NCCL call failed. ``status``: the ncclResult_t value, ``api``: the call."""

    status = 0
    api = ""
