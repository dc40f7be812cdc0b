# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
"""SGLang, both ways in:

- :class:`SglangTrainer` drives an unmodified, released SGLang server through its own routes:
  ``POST /init_weights_update_group`` (its ranks join a torch.distributed group at
  ``master_address:master_port``, rank ``rank_offset + tp_rank``; this process is rank 0) and
  ``POST /update_weights_from_distributed`` (``names``, ``dtypes``, ``shapes``, ``group_name``,
  ``flush_cache``, ``weight_version``, ...), broadcasting each tensor from rank 0 in the order
  of ``names``, one ``torch.distributed.broadcast`` per tensor, as SGLang's model runner receives
  them. The request bodies are checked by the library (weightsync._wire) before they leave.
  Follows sgl-project/sglang ``python/sglang/srt/managers/io_struct.py`` (the list-valued
  requests of PR #4912) and the model runner's ``init_weights_update_group`` /
  ``update_weights_from_distributed`` (``init_custom_process_group``; weight_updater.py).

- :func:`receiver` is a factory for SGLang's external weight-update receivers (the
  ``--weight-update-receivers`` allowlist; sgl-project/sglang
  ``python/sglang/srt/weight_sync/external_receiver.py`` at
  fd623da6fc46f9d1176f9e6c09fabe6cfd980a5a, on a branch, not in a release): start the server with
  ``--weight-update-receivers weightsync.sglang.receiver``; each TP worker's receiver joins the
  trainer's weightsync group (a :class:`weightsync.TrainerEngine`) and receives each round
  through the library, checksums, deadlines, delta and FP8 included. :func:`receiver_init_request`
  and :func:`receiver_update_request` write the trainer's two request bodies."""

import datetime
import inspect
import json
import threading
import time
import urllib.error
import urllib.request

__all__ = ["RECEIVER", "SglangTrainer", "receiver", "WeightsyncReceiver",
           "receiver_init_request", "receiver_update_request", "new_group"]

#: The receiver's import path, for ``--weight-update-receivers`` and the init request.
RECEIVER = "weightsync.sglang.receiver"
#: SGLang's default group name.
GROUP_NAME = "weight_update_group"


def _torch():
    import torch  # noqa: PLC0415
    return torch


def _dtype_name(t):
    return str(t.dtype).replace("torch.", "")


def new_group(backend, master_address, master_port, world_size, rank, group_name, timeout):
    """A torch.distributed group of its own, not the default one, joined at
    ``tcp://master_address:master_port`` as SGLang's ``init_custom_process_group`` joins it: the
    TCP rendezvous store (rank 0 hosts it), prefixed with the group name, and the backend's
    process group over it. Works across torch versions (1.13's and 2.x's helper)."""
    torch = _torch()
    from torch.distributed import distributed_c10d as c10d  # noqa: PLC0415
    timeout = datetime.timedelta(seconds=float(timeout))
    if rank == 0:
        # the store's host, as the tcp:// rendezvous makes it, but without waiting for the other
        # ranks in the constructor: that wait holds the GIL (torch 1.13), and the thread that
        # asks the server to join needs it
        store = torch.distributed.TCPStore(master_address, int(master_port), world_size, True,
                                           timeout, wait_for_workers=False, multi_tenant=True)
    else:
        url = "tcp://%s:%d" % (master_address, int(master_port))
        store, rank, world_size = next(c10d.rendezvous(url, rank, world_size, timeout=timeout))
    store.set_timeout(timeout)
    store = c10d.PrefixStore(group_name, store)
    params = inspect.signature(c10d._new_process_group_helper).parameters
    kw = {"group_name": group_name, "timeout": timeout}
    kw["backend_options" if "backend_options" in params else "pg_options"] = None
    pg = c10d._new_process_group_helper(world_size, rank, [], c10d.Backend(backend), store, **kw)
    if isinstance(pg, tuple):
        pg = pg[0]
    ranks = {i: i for i in range(world_size)}
    world = getattr(c10d, "_world", None)
    if world is not None and hasattr(world, "pg_group_ranks"):
        world.pg_group_ranks[pg] = ranks
    else:
        c10d._pg_group_ranks[pg] = ranks
    return pg


class SglangError(RuntimeError):
    """A route answered with an error (``status``, ``message`` from its body)."""

    def __init__(self, route, status, message):
        super().__init__("SGLang %s: %s%s" % (route, "HTTP %s: " % status if status else "",
                                               message))
        self.route, self.status, self.message = route, status, message


class _Call(threading.Thread):
    """Runs fn in a thread; result() re-raises its error."""

    def __init__(self, fn):
        super().__init__(daemon=True)
        self._fn, self._out, self._err = fn, None, None

    def run(self):
        try:
            self._out = self._fn()
        except BaseException as e:  # noqa: BLE001 (handed to the caller)
            self._err = e

    def result(self, timeout):
        self.join(timeout)
        if self.is_alive():
            raise TimeoutError("no answer within %.1f s" % timeout)
        if self._err is not None:
            raise self._err
        return self._out


def _first_error(a, b, timeout):
    """Waits for both calls; the first to fail is the error at once (the other, blocked on a
    peer that will not come, ends at its own deadline in its daemon thread)."""
    deadline = time.monotonic() + timeout
    while a.is_alive() or b.is_alive():
        for c in (a, b):
            if not c.is_alive() and c._err is not None:
                raise c._err
        if time.monotonic() > deadline:
            raise TimeoutError("SGLang: no answer within %.1f s" % timeout)
        (a if a.is_alive() else b).join(0.05)
    for c in (a, b):
        if c._err is not None:
            raise c._err


class SglangTrainer:
    """Rank 0 of a released SGLang server's weight-update group. ``url``: the server
    (``http://host:30000``); ``world_size``: 1 + the server's TP ranks; ``backend``: "nccl"
    (CUDA tensors) or "gloo" (CPU tensors); ``timeout``: every wait, in seconds."""

    def __init__(self, url, *, master_address, master_port, world_size, rank_offset=1,
                 group_name=GROUP_NAME, backend="nccl", timeout=60.0, api_key=None):
        self.url = url.rstrip("/")
        self.master_address, self.master_port = master_address, int(master_port)
        self.world_size, self.rank_offset = int(world_size), int(rank_offset)
        self.group_name, self.backend = group_name, backend
        self.timeout, self.api_key = float(timeout), api_key
        self.group = None

    def post(self, route, body):
        """POSTs JSON; returns the decoded answer. Raises SglangError for a failed call (HTTP
        error, or ``success: false``)."""
        req = urllib.request.Request(self.url + route, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        if self.api_key:
            req.add_header("Authorization", "Bearer " + self.api_key)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                text = r.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as e:
            raise SglangError(route, e.code, _message(e.read().decode("utf-8", "replace"))) from e
        except urllib.error.URLError as e:
            raise SglangError(route, None, "cannot reach %s: %s" % (self.url, e.reason)) from e
        out = json.loads(text) if text.strip() else {}
        if isinstance(out, dict) and out.get("success") is False:
            raise SglangError(route, 200, out.get("message", ""))
        return out

    def init_request(self):
        """The ``init_weights_update_group`` body, checked by the library (every field but
        ``backend``, which SGLang hands to torch.distributed as it is)."""
        from . import _wire  # noqa: PLC0415
        body = {"master_address": self.master_address, "master_port": self.master_port,
                "rank_offset": self.rank_offset, "world_size": self.world_size,
                "group_name": self.group_name, "backend": self.backend}
        checked = _wire.sglang_init_group_request(dict(body, backend="nccl"))
        checked["backend"] = self.backend
        return checked

    def init_weights_update_group(self):
        """The server's ranks and this process join the group together (blocks until all did,
        at most ``timeout``). A failed call is the error at once."""
        if self.group is not None:
            raise RuntimeError("init_weights_update_group: the group %r is already joined"
                               % self.group_name)
        body = self.init_request()
        join = _Call(lambda: new_group(self.backend, self.master_address, self.master_port,
                                       self.world_size, 0, self.group_name, self.timeout))
        call = _Call(lambda: self.post("/init_weights_update_group", body))
        join.start()
        call.start()
        _first_error(join, call, self.timeout)
        self.group = join.result(0)

    def update_request(self, tensors, *, weight_version=None, flush_cache=True,
                       abort_all_requests=False, torch_empty_cache=False, load_format=None):
        """The ``update_weights_from_distributed`` body for ``tensors`` (``(name, tensor)``
        pairs), checked by the library."""
        from . import _wire  # noqa: PLC0415
        body = {"names": [n for n, _ in tensors], "dtypes": [_dtype_name(t) for _, t in tensors],
                "shapes": [list(t.shape) for _, t in tensors], "group_name": self.group_name,
                "flush_cache": bool(flush_cache), "abort_all_requests": bool(abort_all_requests),
                "weight_version": weight_version, "load_format": load_format,
                "torch_empty_cache": bool(torch_empty_cache)}
        return _wire.sglang_update_request(body)

    def update_weights_from_distributed(self, tensors, **request):
        """Announces ``tensors`` (an iterable of ``(name, tensor)`` or a dict) and broadcasts
        each from rank 0, in order; returns the server's answer once it has loaded them.
        ``request``: weight_version, flush_cache, abort_all_requests, torch_empty_cache."""
        if self.group is None:
            raise RuntimeError("update_weights_from_distributed: call init_weights_update_group "
                               "first")
        items = list(tensors.items() if hasattr(tensors, "items") else tensors)
        items = [(n, t.detach().contiguous()) for n, t in items]
        body = self.update_request(items, **request)
        torch = _torch()
        group = self.group

        def broadcast():
            for _, t in items:
                torch.distributed.broadcast(t, src=0, group=group)
        send = _Call(broadcast)
        call = _Call(lambda: self.post("/update_weights_from_distributed", body))
        send.start()
        call.start()
        _first_error(send, call, self.timeout)
        return call.result(0)

    def destroy_weights_update_group(self):
        """Asks the server to leave the group, then leaves it."""
        group, self.group = self.group, None
        try:
            self.post("/destroy_weights_update_group", {"group_name": self.group_name})
        finally:
            if group is not None:
                _torch().distributed.destroy_process_group(group)


def _message(text):
    try:
        j = json.loads(text)
    except ValueError:
        return text
    if isinstance(j, dict):
        for k in ("message", "error", "detail"):
            if k in j:
                return j[k] if isinstance(j[k], str) else json.dumps(j[k])
    return text


# --- the external receiver (SGLang's --weight-update-receivers) -----------------------------

def receiver_init_request(init_info, *, group_name=GROUP_NAME, **options):
    """The trainer's ``init_weights_update_group`` body for :func:`receiver`: SGLang's fields
    from ``init_info`` (the library's init info dict the TrainerEngine joins with), the
    receiver's path, and ``receiver_init_payload`` = ``{"init_info": ..., "options": ...}``
    (``options``: weightsync.WorkerEngine's keyword arguments, e.g. backend, checksum,
    timeout). The trainer's TrainerEngine must use the same protocol, checksum and token."""
    _check_receiver_options(options)
    return {"master_address": init_info.get("master_address") or "",
            "master_port": int(init_info.get("master_port") or 0),
            "rank_offset": int(init_info.get("rank_offset", 1)),
            "world_size": int(init_info["world_size"]), "group_name": group_name,
            "receiver": RECEIVER,
            "receiver_init_payload": {"init_info": dict(init_info), "options": dict(options)}}


def receiver_update_request(update_info, *, weight_version=None, group_name=GROUP_NAME,
                            flush_cache=True):
    """The trainer's ``update_weights_from_distributed`` body for a receiver round: empty
    names, dtypes and shapes, the library's update info (TrainerEngine.update_info) in
    ``receiver_payload``."""
    payload = {"update_info": dict(update_info)}
    if weight_version is not None:
        payload["weight_version"] = weight_version
    return {"names": [], "dtypes": [], "shapes": [], "group_name": group_name,
            "flush_cache": bool(flush_cache), "weight_version": weight_version,
            "receiver_payload": payload}


_PARALLEL = ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size",
             "data_parallel_index", "local_rank")


def _check_receiver_options(options):
    from .engines import WorkerEngine  # noqa: PLC0415
    known = [p for p in inspect.signature(WorkerEngine.__init__).parameters
             if p not in ("self", "progress") and p not in _PARALLEL]
    if not isinstance(options, dict):
        raise ValueError("receiver_init_payload.options must be a dict, got %s"
                         % type(options).__name__)
    for k in options:
        if k not in known:
            raise ValueError("receiver_init_payload.options.%s: %s" % (
                k, "set from SGLang's context (tp_rank, tp_size)" if k in _PARALLEL else
                "unknown option (known: %s)" % ", ".join(known)))


def _ctx(context, name):
    if not hasattr(context, name):
        raise TypeError("weightsync.sglang.receiver: the context has no %r (expected SGLang's "
                        "WeightUpdateReceiverContext)" % name)
    return getattr(context, name)


def _device_index(device):
    if device is None:
        return -1
    if isinstance(device, str):
        device = _torch().device(device)
    if getattr(device, "type", "cpu") == "cpu":
        return -1
    return 0 if device.index is None else int(device.index)


class WeightsyncReceiver:
    """One TP worker's receiver: a weightsync.WorkerEngine (rank ``rank_offset + tp_rank``)
    that loads each round into the model (``model.load_weights``). Built by :func:`receiver`
    when the trainer's ``init_weights_update_group`` names it; joins the trainer's group then."""

    def __init__(self, context):
        from .engines import WorkerEngine  # noqa: PLC0415
        payload = _ctx(context, "init_payload") or {}
        if not isinstance(payload, dict):
            raise ValueError("receiver_init_payload must be a dict, got %s"
                             % type(payload).__name__)
        unknown = set(payload) - {"init_info", "options"}
        if unknown:
            raise ValueError("receiver_init_payload.%s: unknown key (known: init_info, options)"
                             % sorted(unknown)[0])
        options = dict(payload.get("options") or {})
        _check_receiver_options(options)
        info = dict(payload.get("init_info") or {})
        if "nccl_unique_id_b64" not in info:
            info.setdefault("master_address", _ctx(context, "master_address"))
            info.setdefault("master_port", _ctx(context, "master_port"))
        info.setdefault("world_size", _ctx(context, "world_size"))
        info.setdefault("rank_offset", _ctx(context, "rank_offset"))
        for k in ("world_size", "rank_offset"):
            if info[k] != getattr(context, k):
                raise ValueError("receiver_init_payload.init_info.%s is %r but the request's %s "
                                 "is %r" % (k, info[k], k, getattr(context, k)))
        options.setdefault("device", _device_index(_ctx(context, "device")))
        options.setdefault("backend", "host" if options["device"] < 0 else "nccl")
        options.update(tensor_parallel_size=int(_ctx(context, "tp_size")),
                       local_rank=int(_ctx(context, "tp_rank")))
        self.model = _ctx(context, "model")
        self.group_name = _ctx(context, "group_name")
        self.last_stats = None
        self._engine = WorkerEngine(**options)
        try:
            self._engine.init_transfer_engine(info)
        except BaseException:
            self._engine.shutdown()
            raise

    def receive(self, payload):
        """One round: ``payload`` = ``{"update_info": ..., "weight_version": ...}`` (from
        :func:`receiver_update_request`); each chunk goes to ``model.load_weights``."""
        if self._engine is None:
            raise RuntimeError("weightsync.sglang: receive after destroy (group %r)"
                               % self.group_name)
        if not isinstance(payload, dict) or not isinstance(payload.get("update_info"), dict):
            raise ValueError("receiver_payload must be {\"update_info\": {...}, "
                             "\"weight_version\": ...}, got %r" % (payload,))
        unknown = set(payload) - {"update_info", "weight_version"}
        if unknown:
            raise ValueError("receiver_payload.%s: unknown key (known: update_info, "
                             "weight_version)" % sorted(unknown)[0])
        model = self.model

        def load(weights):
            model.load_weights(weights)
        e = self._engine
        e.start_weight_update()
        self.last_stats = e.update_weights(payload["update_info"], load=load)
        e.finish_weight_update(payload.get("weight_version"))

    def weight_version(self):
        return None if self._engine is None else self._engine.weight_version()

    def destroy(self):
        engine, self._engine = self._engine, None
        if engine is not None:
            engine.shutdown()


def receiver(context):
    """SGLang's receiver factory (``--weight-update-receivers weightsync.sglang.receiver``):
    a :class:`WeightsyncReceiver` for this TP worker's ``WeightUpdateReceiverContext``."""
    return WeightsyncReceiver(context)
