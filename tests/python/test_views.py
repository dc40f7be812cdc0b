# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
"""Tensors without copies, proven by data_ptr(): the trainer's Source points at the caller's own
tensors (torch and NumPy); the worker's load gets Views of the library's memory that torch and
NumPy wrap at the same address (valid only during the call); destinations are the caller's
tensors, written in place."""

import numpy as np
import pytest

import weightsync as ws
from wstest import digest, in_background, in_process_pair, model_tensors, torch


@pytest.fixture(scope="module")
def pair():
    t, w = in_process_pair()
    yield t, w
    t.shutdown()
    w.shutdown()


def test_source_reads_the_callers_memory():
    tensors = model_tensors(seed=1)
    arr = np.arange(10, dtype=np.int32)
    src = ws.Source(tensors + [("np", arr)])
    for i, (_, x) in enumerate(tensors):
        if x.numel():
            assert src._set.data_ptr(i) == x.data_ptr()
    assert src._set.data_ptr(len(tensors)) == arr.ctypes.data
    assert src.metas[-1] == {"name": "np", "dtype": "int32", "shape": [10]}
    p = torch.nn.Parameter(torch.ones(3))  # requires grad: detached, not copied
    assert ws.Source([("p", p)])._set.data_ptr(0) == p.data_ptr()


def test_load_views_are_the_librarys_memory(pair):
    t, w = pair
    w._views = "raw"
    tensors = model_tensors(seed=2)
    src = ws.Source(tensors)
    seen, kept = {}, []

    def load(views):
        for name, v in views:
            assert v.valid
            tt = torch.from_dlpack(v) if v.dtype != "bool" else None
            assert tt.data_ptr() == v.data_ptr or v.nbytes == 0
            assert list(tt.shape) == v.shape and str(tt.dtype) == "torch." + v.dtype
            if v.dtype != "bfloat16" and v.nbytes:
                assert np.from_dlpack(v).ctypes.data == v.data_ptr
            seen[name] = digest(tt)
            kept.append(v)

    job = in_background(t.send_weights, src)
    w.start_weight_update()
    w.update_weights(t.update_info(src), load)
    w.finish_weight_update("v1")
    job.result()
    assert seen == {n: digest(x) for n, x in tensors}
    assert kept and not any(v.valid for v in kept)  # closed after the call
    with pytest.raises(ws.StateError):
        torch.from_dlpack(kept[0])
    w._views = "torch"


def test_destinations_are_written_in_place(pair):
    t, w = pair
    tensors = model_tensors(seed=3)
    src = ws.Source(tensors)
    mine = {n: torch.zeros_like(x) for n, x in tensors if x.numel()}
    ptrs = {n: x.data_ptr() for n, x in mine.items()}
    loaded = []
    job = in_background(t.send_weights, src)
    w.start_weight_update()
    stats = w.update_weights(t.update_info(src), lambda ws_: loaded.extend(n for n, _ in ws_),
                             destinations=mine)
    w.finish_weight_update("v2")
    job.result()
    assert loaded == ["empty"]
    assert {n: x.data_ptr() for n, x in mine.items()} == ptrs
    assert {n: digest(x) for n, x in mine.items()} == {n: digest(x) for n, x in tensors if x.numel()}
    assert stats["bytes"] == sum(x.numel() * x.element_size() for _, x in tensors)
    assert w.weight_version() == "v2"


def test_numpy_views_and_a_numpy_source(pair):
    t, w = pair
    w._views = "numpy"
    arrays = [("a", np.random.default_rng(0).standard_normal((7, 5)).astype(np.float32)),
              ("b", np.arange(11, dtype=np.int16))]
    got = {}
    job = in_background(t.send_weights, arrays)
    w.start_weight_update()
    w.update_weights(t.update_info(arrays),
                     lambda views: got.update({n: a.copy() for n, a in views}))
    w.finish_weight_update()
    job.result()
    w._views = "torch"
    for n, a in arrays:
        assert got[n].dtype == a.dtype and np.array_equal(got[n], a)


def test_a_destination_of_the_wrong_shape_is_refused(pair):
    t, w = pair
    tensors = model_tensors(seed=4)
    src = ws.Source(tensors)
    wrong = {"embed.weight": torch.zeros(36, 16)}
    job = in_background(t.send_weights, src)
    w.start_weight_update()
    with pytest.raises(ws.ConfigError) as e:
        w.update_weights(t.update_info(src), lambda _: None, destinations=wrong)
    assert e.value.field == "embed.weight"
    # the trainer's call ends too: done (its part went out) or failed (the worker aborted the
    # group when its destination failed mid-transfer)
    try:
        job.result()
    except ws.Error:
        pass
