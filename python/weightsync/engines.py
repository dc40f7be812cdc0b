# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
"""The engines for PyTorch processes: :class:`TrainerEngine` (``trainer_init``, ``send_weights``)
and :class:`WorkerEngine` (``init_transfer_engine``, ``start_weight_update``,
``update_weights``, ``finish_weight_update``, pause / resume, versions), over the C++ engines of
``weightsync._core``. They take vLLM's dicts as vLLM's routes do, tensors without a copy
(anything with ``__dlpack__``), and release the GIL for every blocking call; Ctrl-C aborts a sync
as any failure does and raises KeyboardInterrupt."""

import inspect

from . import _core

__all__ = ["DeltaSource", "Source", "TrainerEngine", "WorkerEngine", "as_framework_tensor"]

_FP8 = ("float8_e4m3fn", "float8_e5m2")


def _torch():
    try:
        import torch  # noqa: PLC0415
        return torch
    except ImportError:
        return None


def _add(tset, name, tensor):
    """Adds one tensor to a TensorSet: torch tensors detached (no copy), FP8 as raw bytes where
    the framework's DLPack has no FP8."""
    if not isinstance(name, str):
        raise _core_config_error("names", "a tensor's name must be a str, got %s" % type(name).__name__)
    if hasattr(tensor, "detach") and hasattr(tensor, "requires_grad"):
        tensor = tensor.detach()
    dtype = str(getattr(tensor, "dtype", "")).replace("torch.", "")
    if dtype in _FP8 and hasattr(tensor, "view"):
        try:
            tset.add(name, tensor)
            return
        except Exception:  # noqa: BLE001 (this framework's DLPack has no FP8: raw bytes)
            torch = _torch()
            tset.add(name, tensor.view(torch.uint8), dtype)
            return
    tset.add(name, tensor)


def _core_config_error(field, what):
    from .errors import ConfigError  # noqa: PLC0415
    e = ConfigError("[weightsync.config] %s: %s" % (field, what))
    e.field = field
    return e


def _named(tensors):
    if isinstance(tensors, dict) or hasattr(tensors, "items"):
        return list(tensors.items())
    return list(tensors)


class Source:
    """Named tensors registered once and sent each round without walking Python objects (the
    tensors' memory is read when sent: update them in place between rounds). ``tensors``: an
    iterable of ``(name, tensor)`` (``model.named_parameters()``, ``state_dict().items()``) or a
    dict; a tensor is anything with ``__dlpack__`` (torch, NumPy on the host backend, CuPy)."""

    def __init__(self, tensors):
        self._set = _core.TensorSet()
        self._cuda = False
        for item in _named(tensors):
            if not isinstance(item, (tuple, list)) or len(item) != 2:
                raise _core_config_error("tensors", "expected (name, tensor) pairs, got %r" % (item,))
            name, t = item
            _add(self._set, name, t)
            self._cuda = self._cuda or bool(getattr(t, "is_cuda", False))

    @property
    def names(self):
        return self._set.names

    @property
    def metas(self):
        """``[{'name', 'dtype', 'shape'}]`` in order."""
        return self._set.metas

    @property
    def nbytes(self):
        return self._set.nbytes

    def __len__(self):
        return len(self._set)

    def _ready(self):
        """The framework's pending work on these tensors done (CUDA: the current stream)."""
        if self._cuda:
            torch = _torch()
            if torch is not None:
                torch.cuda.current_stream().synchronize()
        return self._set


def _source(weights):
    return weights if isinstance(weights, Source) else Source(weights)


def _engine_options(backend, device, timeout, token, protocol, acknowledge, checksum,
                    direct_threshold_bytes, nccl_blocking):
    return dict(backend=backend, device=device, timeout=timeout, token=token, protocol=protocol,
                acknowledge=acknowledge, checksum=checksum,
                direct_threshold_bytes=direct_threshold_bytes, nccl_blocking=nccl_blocking)


class TrainerEngine:
    """The training side. ``trainer_init(init_info)`` joins the transfer group (vLLM's init info
    dict: ``master_address``/``master_port`` or ``nccl_unique_id_b64``, ``world_size``,
    ``rank_offset``, ``packed``, ``packed_buffer_size_bytes``, ``packed_num_buffers``);
    ``send_weights(weights)`` sends one round; ``update_info(weights)`` is the dict a worker's
    ``update_weights`` needs. ``progress(dict)`` is called as a sync moves on."""

    def __init__(self, backend="host", *, device=-1, timeout=60.0, token="", protocol="weightsync",
                 acknowledge="next_transfer", checksum=False, direct_threshold_bytes=0,
                 nccl_blocking=True, trainer_rank=0, trainer_world=1, progress=None):
        opts = _engine_options(backend, device, timeout, token, protocol, acknowledge, checksum,
                               direct_threshold_bytes, nccl_blocking)
        opts.update(trainer_rank=trainer_rank, trainer_world=trainer_world)
        self._e = _core.TrainerEngine(opts, progress)

    def trainer_init(self, init_info):
        """Joins the group (blocks, without the GIL, until every rank joined)."""
        self._e.trainer_init(dict(init_info))

    def send_weights(self, weights, update_info=None):
        """Sends ``weights`` (a :class:`Source`, or an iterable of ``(name, tensor)``: one pass
        over it, no copy). ``update_info`` (vLLM's dict) may override this round's packing.
        Returns the TransferStats as a dict (bytes, chunks, phase times in seconds)."""
        if isinstance(weights, DeltaSource):
            return weights._d.send(self._e)
        return self._e.send_weights(_source(weights)._ready(), update_info)

    trainer_send_weights = send_weights  # vLLM's name

    def update_info(self, weights):
        """The update info (vLLM's dict: names, dtype_names, shapes, packing) for ``weights``."""
        return self._e.update_info(_source(weights)._set)

    @property
    def is_sender(self):
        return self._e.is_sender

    @property
    def backend(self):
        return self._e.backend

    def healthy(self):
        return self._e.healthy()

    def shutdown(self):
        self._e.shutdown()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.shutdown()


class DeltaSource:
    """Delta syncs (host backend): each round sends only what changed since the version every
    worker holds (C++ DeltaSource, HostDeltaCodec). A round::

        info = delta.prepare("v8", trainer)   # diff; the update info for the workers
        # workers: update_weights(info, destinations=their tensors); finish_weight_update("v8")
        trainer.send_weights(delta)
        delta.commit()                        # every rank has it: "v8" is the next base

    ``weights`` as for :class:`Source` (their memory must not change between prepare and
    commit); options: ``mode`` ("automatic", "always", "never"), ``reference`` ("full",
    "low_byte"), ``max_payload_fraction``, ``bucket_elems``, ``anchor_every``,
    ``link_bytes_per_s``. Workers apply the blobs in place: they need destinations."""

    def __init__(self, weights, **options):
        self._src = _source(weights)
        self._d = _core.DeltaSource(self._src._set, options)

    def prepare(self, version, trainer):
        return self._d.prepare(version, trainer._e)

    def commit(self):
        self._d.commit()

    def invalidate(self):
        """The next round goes whole (a worker lost the base version)."""
        self._d.invalidate()

    def stats(self):
        """What the last prepare found: wire_bytes, tensor_bytes, blobs, whole, unchanged..."""
        return self._d.stats()


def as_framework_tensor(view, kind="torch"):
    """A library tensor (:class:`weightsync._core.View`) as a framework tensor over the same
    memory: ``kind`` "torch" (a torch.Tensor), "numpy" (bfloat16 and FP8 come as uint8 bytes) or
    "raw" (the View itself, for any DLPack consumer)."""
    if kind == "raw":
        return view
    if kind == "numpy":
        import numpy as np  # noqa: PLC0415
        try:
            return np.from_dlpack(view)
        except Exception:  # noqa: BLE001 (a dtype NumPy lacks: the bytes)
            return np.from_dlpack(_Capsule(view.bytes_capsule(), view))
    torch = _torch()
    try:
        return torch.from_dlpack(view)
    except Exception:  # noqa: BLE001 (a dtype this torch's DLPack lacks: bytes re-typed)
        from torch.utils import dlpack as tdl  # noqa: PLC0415
        t = tdl.from_dlpack(view.bytes_capsule())
        return t.view(getattr(torch, view.dtype)).reshape(view.shape)


class _Capsule:
    """A capsule handed to a consumer that asks for __dlpack__."""

    def __init__(self, capsule, view):
        self._c, self._v = capsule, view

    def __dlpack__(self, **_):
        return self._c

    def __dlpack_device__(self):
        return self._v.__dlpack_device__()


def _wants_stream(fn):
    try:
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)]
    except (TypeError, ValueError):
        return False
    return len(params) >= 2 or any(p.kind == p.VAR_POSITIONAL for p in params)


class Snapshot:
    """Shadow mode: the live version for one forward pass (``with worker.acquire() as s:``).
    ``parameters`` maps names to framework tensors over the engine's memory (valid until
    released); ``version``, ``generation``."""

    def __init__(self, snap, kind):
        self._s = snap
        self.parameters = {k: as_framework_tensor(v, kind) for k, v in snap.parameters().items()}
        self.version = snap.version
        self.generation = snap.generation

    def release(self):
        self.parameters = {}
        self._s.release()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


class WorkerEngine:
    """The inference side, vLLM's worker API: ``init_transfer_engine(init_info)``,
    ``start_weight_update()``, ``update_weights(update_info, load, destinations)``,
    ``finish_weight_update(version)``, ``pause(mode)`` / ``resume()``, ``weight_version()``.
    ``views`` picks what ``load`` gets: "torch" tensors, "numpy" arrays or "raw" Views, each over
    the library's memory (no copy; valid only during the call)."""

    def __init__(self, backend="host", *, device=-1, timeout=60.0, token="", protocol="weightsync",
                 acknowledge="next_transfer", checksum=False, direct_threshold_bytes=0,
                 nccl_blocking=True, tensor_parallel_size=1, pipeline_parallel_size=1,
                 data_parallel_size=1, data_parallel_index=0, local_rank=0,
                 liveness_interval=0.5, trainer_ranks=0, shadow=False,
                 shadow_copy_live_at_start=True, progress=None, views="torch"):
        opts = _engine_options(backend, device, timeout, token, protocol, acknowledge, checksum,
                               direct_threshold_bytes, nccl_blocking)
        opts.update(tensor_parallel_size=tensor_parallel_size,
                    pipeline_parallel_size=pipeline_parallel_size,
                    data_parallel_size=data_parallel_size,
                    data_parallel_index=data_parallel_index, local_rank=local_rank,
                    liveness_interval=liveness_interval, trainer_ranks=trainer_ranks,
                    shadow=shadow, shadow_copy_live_at_start=shadow_copy_live_at_start)
        if views not in ("torch", "numpy", "raw"):
            raise _core_config_error("views", "must be torch, numpy or raw, got %r" % (views,))
        self._views = views
        self._e = _core.WorkerEngine(opts, progress)
        self._dest_cache = None  # (the mapping last given, its TensorSet)

    def set_hooks(self, pause=None, resume=None, failure=None):
        """``pause(mode)``, ``resume()``, and ``failure(why)`` (the group failed between
        updates; called from the engine's watchdog thread)."""
        self._e.set_hooks(pause, resume, failure)

    def init_transfer_engine(self, init_info):
        self._e.init_transfer_engine(dict(init_info))

    def start_weight_update(self):
        self._e.start_weight_update()

    def load_plan(self, update_info, parameters, mapping, ignore_unmapped=False,
                  require_full_coverage=False):
        """A model-aware load plan (C++ plan_loading; host backend): ``parameters`` the served
        tensors (``{name: tensor}``), ``mapping(name, dtype, shape)`` a dict placing a received
        tensor (``param``, ``dst_row``, ``expert``, ``slice_dim``, ``slice_begin``,
        ``slice_len``, ``permute_heads``, ``skip``) or None. Checked before any byte moves; pass
        it to ``update_weights(info, plan=...)``: in-place tensors land in their parameters,
        the others are gathered (fused, sharded, permuted, cast) into them."""
        return _core.LoadPlan(dict(update_info), _source(parameters)._set, mapping,
                              ignore_unmapped, require_full_coverage)

    def update_weights(self, update_info, load=None, destinations=None, plan=None):
        """Receives one update (blocks without the GIL). ``load(weights[, stream])`` gets each
        chunk's tensors as a list of ``(name, tensor)`` over the library's memory (``stream``:
        the CUDA stream they are ready on, as an int; 0 on the host backend). ``destinations``:
        ``{name: tensor}`` (your own parameters: those tensors are written in place and not
        passed to ``load``), or a :class:`Source` of them. Returns the TransferStats dict."""
        if plan is not None:
            return self._e.update_weights(dict(update_info), None, None, plan)
        dest = self._destinations(destinations)
        fn = None
        if load is not None:
            kind, stream = self._views, _wants_stream(load)

            def fn(views, s):
                weights = [(v.name, as_framework_tensor(v, kind)) for v in views]
                return load(weights, s) if stream else load(weights)
        return self._e.update_weights(dict(update_info), fn, dest, None)

    receive_weights = update_weights  # vLLM's other name

    def _destinations(self, destinations):
        if destinations is None:
            return None
        if isinstance(destinations, Source):
            return destinations._set
        cached = self._dest_cache
        if cached is not None and cached[0] is destinations:
            return cached[1]
        tset = Source(destinations)._set
        self._dest_cache = (destinations, tset)
        return tset

    def finish_weight_update(self, weight_version=None):
        self._e.finish_weight_update(weight_version)

    def register_parameters(self, parameters, second=None):
        """Shadow mode: the served parameters (``{name: tensor}``), and optionally their second
        copies; the library allocates the missing ones."""
        self._e.register_parameters(_source(parameters)._set,
                                    None if second is None else _source(second)._set)

    def acquire(self):
        """Shadow mode: a :class:`Snapshot` of the live version (never waits on a sync)."""
        return Snapshot(self._e.acquire(), self._views)

    def pause(self, mode="keep"):
        self._e.pause(mode)

    def resume(self):
        self._e.resume()

    def is_paused(self):
        return self._e.is_paused()

    def weight_version(self):
        return self._e.weight_version()

    def delta_base(self):
        return self._e.delta_base()

    def initialized(self):
        return self._e.initialized()

    def updating(self):
        return self._e.updating()

    def world_size(self):
        return self._e.world_size()

    def rank(self):
        return self._e.rank()

    @property
    def backend(self):
        return self._e.backend

    def shutdown(self):
        self._e.shutdown()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.shutdown()
