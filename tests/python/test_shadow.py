# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
"""Shadow mode from Python (host backend): the worker's parameters are registered once; a sync
lands in the second copy while snapshots of the live version are read; finish publishes it in
one step; a snapshot taken before still reads the old weights; a sync that fails leaves the live
version untouched."""

import pytest

import weightsync as ws
from wstest import TIMEOUT, digest, free_port, in_background, init_info, model_tensors, torch


def test_shadow_sync_publishes_in_one_step():
    t = ws.TrainerEngine(timeout=TIMEOUT, acknowledge="each_transfer")
    w = ws.WorkerEngine(timeout=TIMEOUT, liveness_interval=0, shadow=True,
                        acknowledge="each_transfer")
    tensors = [(n, x) for n, x in model_tensors(seed=8) if x.numel()]
    live = {n: torch.zeros_like(x) for n, x in tensors}
    w.register_parameters(live)
    assert w._e.shadow_extra_bytes() >= sum(x.numel() * x.element_size() for _, x in tensors)
    info = init_info(free_port())
    job = in_background(t.trainer_init, info)
    w.init_transfer_engine(info)
    job.result()
    try:
        src = ws.Source(tensors)
        old = w.acquire()
        assert old.version == "default" and old.generation == 0
        # the snapshot's tensors are the registered memory itself
        assert all(old.parameters[n].data_ptr() == live[n].data_ptr() for n in live)
        job = in_background(t.send_weights, src)
        w.start_weight_update()
        w.update_weights(t.update_info(src), lambda _: None)
        with w.acquire() as during:  # before finish: still the live version
            assert during.version == "default"
            assert all(digest(during.parameters[n]) == digest(live[n]) for n in live)
        w.finish_weight_update("s1")
        job.result()
        with w.acquire() as new:
            assert new.version == "s1" and new.generation == 1
            assert {n: digest(x) for n, x in new.parameters.items()} == \
                {n: digest(x) for n, x in tensors}
        zeros = {n: digest(torch.zeros_like(x)) for n, x in tensors}
        assert {n: digest(x) for n, x in old.parameters.items()} == zeros  # the old version
        old.release()
        # a sync that fails (the worker expects another shape): the live version stays "s1"
        bad = t.update_info(src)
        bad["shapes"] = [list(s) for s in bad["shapes"]]
        bad["shapes"][0][0] += 1
        job = in_background(t.send_weights, src)
        w.start_weight_update()
        with pytest.raises(ws.Error):
            w.update_weights(bad, lambda _: None)
        with pytest.raises(ws.Error):
            job.result()
        with w.acquire() as still:
            assert still.version == "s1"
            assert {n: digest(x) for n, x in still.parameters.items()} == \
                {n: digest(x) for n, x in tensors}
    finally:
        t.shutdown()
        w.shutdown()
