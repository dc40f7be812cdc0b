# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
"""The library's errors as Python exceptions: one class per C++ error type, all under
weightsync.Error, with their attributes (a config error's field, a peer's rank, a timeout's
phase and deadline), raised by the engines where the C++ engines throw them."""

import builtins
import threading

import pytest

import weightsync as ws
from wstest import TIMEOUT, free_port, in_background, in_process_pair, init_info, model_tensors


def test_the_hierarchy():
    for cls in (ws.ConfigError, ws.ProtocolError, ws.TimeoutError, ws.PeerError, ws.RemoteError,
                ws.StateError, ws.SystemError, ws.CudaError, ws.NcclError):
        assert issubclass(cls, ws.Error)
    assert issubclass(ws.Error, Exception)
    assert issubclass(ws.ConfigError, ValueError)
    assert issubclass(ws.TimeoutError, builtins.TimeoutError)
    assert issubclass(ws.PeerError, ConnectionError)


def test_config_errors_name_the_field():
    w = ws.WorkerEngine(timeout=TIMEOUT, liveness_interval=0)
    with pytest.raises(ws.ConfigError) as e:
        w.init_transfer_engine(dict(init_info(free_port()), world_size=0))
    assert e.value.field == "world_size"
    assert str(e.value).startswith("[weightsync.config] world_size")
    with pytest.raises(ws.ConfigError) as e:
        w.init_transfer_engine(dict(init_info(free_port()), colour="blue"))
    assert e.value.field == "init_info" or "colour" in str(e.value)
    with pytest.raises(ws.ConfigError) as e:
        w.init_transfer_engine(dict(init_info(free_port()), packed_num_buffers=99))
    assert e.value.field == "packed_num_buffers"
    with pytest.raises(ws.ConfigError) as e:
        ws.WorkerEngine(data_parallel_index=3, data_parallel_size=2)
    assert e.value.field == "data_parallel_index"
    with pytest.raises(ws.ConfigError) as e:
        ws.TrainerEngine(protocol="carrier-pigeon")
    assert e.value.field == "protocol"
    with pytest.raises(ws.ConfigError) as e:
        ws.WorkerEngine(timeout=0)
    assert e.value.field == "timeout"
    with pytest.raises(ws.ConfigError) as e:
        ws.Source([("x", object())])
    assert e.value.field == "x"
    with pytest.raises(ws.ConfigError) as e:
        ws.WorkerEngine().pause("sideways")
    assert e.value.field == "mode"


def test_state_errors():
    w = ws.WorkerEngine(timeout=TIMEOUT, liveness_interval=0)
    with pytest.raises(ws.StateError):
        w.start_weight_update()
    with pytest.raises(ws.StateError):
        w.finish_weight_update("v")
    t = ws.TrainerEngine(timeout=TIMEOUT)
    with pytest.raises(ws.StateError):
        t.send_weights(model_tensors(seed=1))


def test_a_timeout_carries_its_phase_and_deadline():
    # a worker whose trainer never comes: the rendezvous' deadline passes
    w = ws.WorkerEngine(timeout=1.0, liveness_interval=0)
    with pytest.raises(ws.TimeoutError) as e:
        w.init_transfer_engine(init_info(free_port()))
    assert e.value.deadline == 1.0
    assert e.value.phase
    assert str(e.value).startswith("[weightsync.timeout]")


def test_protocol_remote_and_peer_errors_name_the_rank():
    t, w = in_process_pair()
    try:
        tensors = model_tensors(seed=2)
        info = t.update_info(tensors)
        bad = dict(info, shapes=[list(s) for s in info["shapes"]])
        bad["shapes"][0][0] += 1
        # the handshake refuses a worker that expects other tensors, on both sides
        job = in_background(t.send_weights, tensors)
        w.start_weight_update()
        with pytest.raises(ws.ProtocolError) as e:
            w.update_weights(bad, lambda _: None)
        assert e.value.peer == 1
        with pytest.raises(ws.ProtocolError):
            job.result()
        # a load that raises: the worker gets its own exception back ...
        job = in_background(t.send_weights, tensors)
        w.start_weight_update()

        def boom(_):
            raise KeyError("boom")
        with pytest.raises(KeyError):
            w.update_weights(info, boom)
        job.result()
        # ... and the next sync is refused on every rank, naming it
        job = in_background(t.send_weights, tensors)
        w.start_weight_update()
        with pytest.raises(ws.RemoteError) as e:
            w.update_weights(info, lambda _: None)
        assert e.value.peer == 1 and "boom" in str(e.value)
        with pytest.raises(ws.RemoteError):
            job.result()
        # a worker that leaves: the trainer's next sync names it
        w.shutdown()
        with pytest.raises((ws.PeerError, ws.TimeoutError)) as e:
            t.send_weights(tensors)
        if isinstance(e.value, ws.PeerError):
            assert e.value.rank == 1 == e.value.peer
    finally:
        t.shutdown()
        w.shutdown()


def test_errors_cross_threads_cleanly():
    # a worker engine used from another thread raises there, as any Python call does
    out = []

    def run():
        try:
            ws.WorkerEngine().start_weight_update()
        except ws.StateError as e:
            out.append(e)
    th = threading.Thread(target=run)
    th.start()
    th.join(TIMEOUT)
    assert len(out) == 1
