# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
"""A vLLM weight-transfer backend named ``weightsync``: an unmodified ``vllm serve`` receives
through this library (its checksums, deadlines, delta and FP8 paths) once the package is
installed, with ``--weight-transfer-config '{"backend": "weightsync"}'``.

vLLM finds it through the ``vllm.general_plugins`` entry point (pyproject.toml): every vLLM
process calls :func:`register`, which adds :class:`WeightsyncWeightTransferEngine` to
``WeightTransferEngineFactory``. vLLM's weight-transfer config takes only ``backend``, so the
library's options ride the init info, under the key ``"weightsync"``::

    POST /init_weight_transfer_engine
    {"init_info": {"master_address": "10.0.0.1", "master_port": 29600, "world_size": 3,
                   "rank_offset": 1, "packed": true,
                   "weightsync": {"backend": "nccl", "checksum": true, "timeout": 120}}}

:func:`init_info` builds that dict. The engine follows vLLM's ``WeightTransferEngine`` as it
stands in vllm-project/vllm ``vllm/distributed/weight_transfer/base.py`` at
02f250b03f38822ccdb63f27a3005d10ca81f385 (``__init__(config, vllm_config, device, model)``,
``start_weight_update`` / ``update_weights`` / ``receive_weights(update_info)`` /
``finish_weight_update``, ``shutdown``, ``trainer_send_weights``), registered as
``factory.py`` at 047c993cc49c32e9b94f5bf826a9214e163eb982 does
(``register_engine(name, engine_cls)``), loaded as ``vllm/plugins/__init__.py`` at
01425553bdbed63400efa72ff14a8f4ffe20bada loads plugins. The earlier base class
(aa1cd966f0c8e8ee5520457758b08000d6415cd6: ``__init__(config, parallel_config)``,
``receive_weights(update_info, load_weights)``) is served too.

vLLM is imported only inside :func:`register` and when the engine class is first asked for. If
that import fails, vLLM's loader would swallow it and report "Invalid weight transfer backend"
much later; instead the error is logged here with the real ImportError, and the backend is
registered as one whose construction raises that error."""

import dataclasses
import inspect
import logging

__all__ = ["BACKEND", "UPSTREAM", "init_info", "register", "engine_class"]

#: The name under which vLLM finds this backend.
BACKEND = "weightsync"
#: The vLLM sources this adapter follows.
UPSTREAM = {
    "base.py": "02f250b03f38822ccdb63f27a3005d10ca81f385",
    "base.py (before the model handoff)": "aa1cd966f0c8e8ee5520457758b08000d6415cd6",
    "factory.py": "047c993cc49c32e9b94f5bf826a9214e163eb982",
    "plugins/__init__.py": "01425553bdbed63400efa72ff14a8f4ffe20bada",
}
#: The key of the init info that carries the library's options.
OPTIONS_KEY = "weightsync"

_log = logging.getLogger("weightsync.vllm_plugin")
_cache = {}


def init_info(base, **options):
    """The init info for ``POST /init_weight_transfer_engine``: ``base`` (the library's init info
    dict: ``master_address``/``master_port`` or ``nccl_unique_id_b64``, ``world_size``,
    ``rank_offset``, packing), with ``options`` (:class:`weightsync.WorkerEngine`'s keyword
    arguments: ``backend``, ``timeout``, ``checksum``, ``protocol``, ``acknowledge``, ``token``,
    ...) under ``"weightsync"``. The trainer's TrainerEngine must use the same protocol,
    acknowledge, checksum and token."""
    info = dict(base)
    if OPTIONS_KEY in info:
        raise ValueError("init_info: %r is set twice (in base and as options)" % OPTIONS_KEY)
    _check_options(options)
    info[OPTIONS_KEY] = dict(options)
    return info


def _worker_parameters():
    from .engines import WorkerEngine  # noqa: PLC0415
    return [p for p in inspect.signature(WorkerEngine.__init__).parameters if p != "self"]


# The parallel layout comes from vLLM's ParallelConfig, never from the init info.
_PARALLEL = ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size",
             "data_parallel_index", "local_rank")
_PLUGIN_OPTIONS = ("layerwise_reload",)


def _check_options(options):
    if not isinstance(options, dict):
        raise ValueError("init_info.%s must be a dict of weightsync.WorkerEngine options, got %s"
                         % (OPTIONS_KEY, type(options).__name__))
    known = [p for p in _worker_parameters() if p not in _PARALLEL and p != "progress"]
    for k in options:
        if k in _PARALLEL:
            raise ValueError("init_info.%s.%s: set by vLLM's parallel config, not by the trainer"
                             % (OPTIONS_KEY, k))
        if k not in known and k not in _PLUGIN_OPTIONS:
            raise ValueError("init_info.%s.%s: unknown option (known: %s)"
                             % (OPTIONS_KEY, k, ", ".join(known + list(_PLUGIN_OPTIONS))))


def _device_index(device):
    """A torch.device (or an int, or None) as the library's device: -1 for the CPU."""
    if device is None:
        return -1
    if isinstance(device, int):
        return device
    if getattr(device, "type", "cpu") == "cpu":
        return -1
    return 0 if device.index is None else int(device.index)


def _parallel(pc):
    """vLLM's ParallelConfig as the library's layout (vLLM's rank rule: dp_rank * TP * PP +
    rank + rank_offset)."""
    if pc is None:
        return {}
    return dict(tensor_parallel_size=int(getattr(pc, "tensor_parallel_size", 1)),
                pipeline_parallel_size=int(getattr(pc, "pipeline_parallel_size", 1)),
                data_parallel_size=int(getattr(pc, "data_parallel_size", 1)),
                data_parallel_index=int(getattr(pc, "data_parallel_rank", 0)),
                local_rank=int(getattr(pc, "rank", 0)))


def _field_names(cls):
    return {f.name for f in dataclasses.fields(cls)}


def _build():
    """The engine classes, over vLLM's base classes (imports vLLM)."""
    from vllm.distributed.weight_transfer.base import (  # noqa: PLC0415
        WeightTransferEngine, WeightTransferInitInfo, WeightTransferUpdateInfo)

    from .engines import WorkerEngine  # noqa: PLC0415

    @dataclasses.dataclass
    class WeightsyncInitInfo(WeightTransferInitInfo):
        """The library's init info dict (``info``) and its options (``options``)."""
        info: dict = dataclasses.field(default_factory=dict)
        options: dict = dataclasses.field(default_factory=dict)

    @dataclasses.dataclass
    class WeightsyncUpdateInfo(WeightTransferUpdateInfo):
        """The library's update info dict (TrainerEngine.update_info), checked by the library
        as it receives."""
        info: dict = dataclasses.field(default_factory=dict)

    class WeightsyncWeightTransferEngine(WeightTransferEngine):
        """vLLM's WeightTransferEngine over weightsync.WorkerEngine."""

        init_info_cls = WeightsyncInitInfo
        update_info_cls = WeightsyncUpdateInfo

        def __init__(self, config, *args, **kwargs):
            super().__init__(config, *args, **kwargs)
            self._engine = None
            self._reloading = False
            self.last_stats = None

        def parse_init_info(self, init_dict):
            if not isinstance(init_dict, dict):
                raise ValueError("Invalid init_info for %s: expected a dict, got %s"
                                 % (type(self).__name__, type(init_dict).__name__))
            info = dict(init_dict)
            options = info.pop(OPTIONS_KEY, None) or {}
            try:
                _check_options(options)
            except ValueError as e:
                raise ValueError("Invalid init_info for %s: %s" % (type(self).__name__, e)) from e
            return WeightsyncInitInfo(info=info, options=dict(options))

        def parse_update_info(self, update_dict):
            if not isinstance(update_dict, dict):
                raise ValueError("Invalid update_info for %s: expected a dict, got %s"
                                 % (type(self).__name__, type(update_dict).__name__))
            for k in ("names", "dtype_names", "shapes"):
                if k not in update_dict:
                    raise ValueError("Invalid update_info for %s: missing %r"
                                     % (type(self).__name__, k))
            kw = {}
            # (the earlier base class's keyword-only field, which its worker reads)
            if "is_checkpoint_format" in _field_names(WeightsyncUpdateInfo):
                kw["is_checkpoint_format"] = bool(update_dict.get("is_checkpoint_format", True))
            return WeightsyncUpdateInfo(info=dict(update_dict), **kw)

        def init_transfer_engine(self, init_info):
            if self._engine is not None:
                raise RuntimeError("weightsync: init_transfer_engine called twice (shutdown first)")
            opts = dict(init_info.options)
            self._layerwise = bool(opts.pop("layerwise_reload", False))
            device = getattr(self, "device", None)
            opts.setdefault("device", _device_index(device))
            opts.setdefault("backend", "host" if opts["device"] < 0 else "nccl")
            opts.update(_parallel(getattr(self, "parallel_config", None)))
            engine = WorkerEngine(**opts)
            try:
                engine.init_transfer_engine(init_info.info)
            except BaseException:
                engine.shutdown()
                raise
            self._engine = engine

        def _require(self):
            if self._engine is None:
                raise RuntimeError("weightsync: weight transfer not initialized; "
                                   "call init_weight_transfer_engine first")
            return self._engine

        def start_weight_update(self):
            self._require().start_weight_update()
            if self._layerwise:
                from vllm.model_executor.model_loader.reload import (  # noqa: PLC0415
                    initialize_layerwise_reload)
                initialize_layerwise_reload(self.model)
                self._reloading = True

        def receive_weights(self, update_info, load_weights=None):
            """Receives one update; each chunk's tensors go to ``load_weights`` (the earlier
            base class passes it) or to the model's ``load_weights(weights=...)``. The tensors
            are the library's memory, valid during the call: vLLM's loaders copy them."""
            engine = self._require()
            if load_weights is None:
                model = getattr(self, "model", None)
                if model is None:
                    raise RuntimeError("weightsync: no model to load into (the engine got none)")

                def load_weights(weights):
                    model.load_weights(weights=weights)
            # the earlier base class has no start/finish: a round outside a session is one
            own = not engine.updating()
            if own:
                engine.start_weight_update()
            self.last_stats = engine.update_weights(update_info.info, load=load_weights)
            if own:
                engine.finish_weight_update()

        def finish_weight_update(self):
            engine = self._require()
            if self._reloading:
                self._reloading = False
                from vllm.model_executor.model_loader.reload import (  # noqa: PLC0415
                    finalize_layerwise_reload)
                finalize_layerwise_reload(self.model, self.model_config)
            engine.finish_weight_update()

        def shutdown(self):
            engine, self._engine = self._engine, None
            if engine is not None:
                engine.shutdown()

        @staticmethod
        def trainer_send_weights(iterator, trainer_args):
            """Sends ``iterator``'s ``(name, tensor)`` pairs: ``trainer_args`` is the
            weightsync.TrainerEngine (or ``{"engine": it, "update_info": ...}``). Returns the
            TransferStats dict."""
            engine, update = trainer_args, None
            if isinstance(trainer_args, dict):
                engine, update = trainer_args.get("engine"), trainer_args.get("update_info")
            if not hasattr(engine, "send_weights"):
                raise TypeError("trainer_args must be a weightsync.TrainerEngine or "
                                "{'engine': TrainerEngine, ...}, got %s" % type(engine).__name__)
            return engine.send_weights(list(iterator), update)

    WeightsyncWeightTransferEngine.__module__ = __name__
    WeightsyncInitInfo.__module__ = __name__
    WeightsyncUpdateInfo.__module__ = __name__
    return WeightsyncWeightTransferEngine, WeightsyncInitInfo, WeightsyncUpdateInfo


def engine_class():
    """The engine class (built over vLLM's base class on first use). Raises ImportError when
    vLLM's weight-transfer base cannot be imported."""
    if "engine" not in _cache:
        engine, init, update = _build()
        _cache.update(engine=engine, init=init, update=update)
    return _cache["engine"]


def _failed_backend(error):
    """A class vLLM can register and construct only to raise ``error`` (the real reason)."""

    class WeightsyncUnavailable:
        def __init__(self, *args, **kwargs):
            raise RuntimeError("weightsync: the vLLM weight-transfer backend 'weightsync' could "
                               "not be built: %s: %s" % (type(error).__name__, error)) from error

    WeightsyncUnavailable.import_error = error
    return WeightsyncUnavailable


def register():
    """The ``vllm.general_plugins`` entry point: registers the backend ``weightsync`` with vLLM's
    WeightTransferEngineFactory (again in every vLLM process: a second call is a no-op)."""
    try:
        from vllm.distributed.weight_transfer.factory import (  # noqa: PLC0415
            WeightTransferEngineFactory)
    except ImportError as e:
        _log.error("weightsync: cannot register the vLLM weight-transfer backend %r: importing "
                   "vllm.distributed.weight_transfer.factory failed: %s: %s (a vLLM without "
                   "weight-transfer engines?)", BACKEND, type(e).__name__, e)
        raise
    try:
        cls = engine_class()
    except ImportError as e:
        _log.error("weightsync: the vLLM weight-transfer backend %r cannot be built: %s: %s; it "
                   "is registered to raise this error when used", BACKEND, type(e).__name__, e)
        cls = _failed_backend(e)
    try:
        WeightTransferEngineFactory.register_engine(BACKEND, cls)
    except ValueError:
        _log.debug("weightsync: backend %r already registered", BACKEND)


def __getattr__(name):
    # WeightsyncWeightTransferEngine & co. by name, as factory.register_engine's lazy form
    # (module path, class name) looks them up.
    key = {"WeightsyncWeightTransferEngine": "engine", "WeightsyncInitInfo": "init",
           "WeightsyncUpdateInfo": "update"}.get(name)
    if key is None:
        raise AttributeError("module %r has no attribute %r" % (__name__, name))
    engine_class()
    return _cache[key]
