# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
"""weightsync for PyTorch processes: moves model weights from a trainer to inference workers
(vLLM's weight-transfer API) over the C++ library's engines, zero-copy (DLPack), with the GIL
released during every transfer. See docs/python.md."""

from . import _core
from .engines import DeltaSource, Snapshot, Source, TrainerEngine, WorkerEngine, as_framework_tensor
from .errors import (CudaError, ConfigError, Error, NcclError, PeerError, ProtocolError,
                     RemoteError, StateError, SystemError, TimeoutError)

has_cuda = _core.has_cuda
has_nccl = _core.has_nccl
backends = _core.backends
if hasattr(_core, "vllm_init_info"):
    vllm_init_info = _core.vllm_init_info

__all__ = [
    "TrainerEngine", "WorkerEngine", "Source", "DeltaSource", "Snapshot", "as_framework_tensor", "backends",
    "has_cuda", "has_nccl", "Error", "ConfigError", "ProtocolError", "TimeoutError", "PeerError",
    "RemoteError", "StateError", "SystemError", "CudaError", "NcclError",
]
