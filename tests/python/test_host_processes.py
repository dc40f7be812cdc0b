# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
"""A Python trainer (this process) and a Python worker (another process) over the host backend:
every byte checked, through load (views of the library's memory), destinations (the worker's own
tensors, written in place) and both; packed and unpacked (the update's packing override); a
registered Source re-sent after an in-place update; TransferStats and progress; a refused update
leaves the pair usable."""

import pytest

import weightsync as ws
from wstest import TIMEOUT, Worker, digest, free_port, init_info, model_tensors

PROGRESS = []


@pytest.fixture(scope="module")
def pair():
    w = Worker(str(TIMEOUT))
    t = ws.TrainerEngine(timeout=TIMEOUT, progress=PROGRESS.append)
    info = init_info(free_port())
    w.send(op="init", info=info)
    t.trainer_init(info)
    r = w.recv()
    assert r["ok"], r
    assert (r["rank"], r["world_size"]) == (1, 2)
    yield t, w
    t.shutdown()
    w.close()


def sync(t, w, tensors, version, mode="load", packed=None):
    src = tensors if isinstance(tensors, ws.Source) else ws.Source(tensors)
    info = t.update_info(src)
    if packed is not None:
        info["packed"] = packed
    w.send(op="update", info=info, version=version, mode=mode)
    stats = t.send_weights(src, info)
    r = w.recv()
    assert r["ok"], r
    return stats, r


@pytest.mark.parametrize("packed", [True, False], ids=["packed", "unpacked"])
@pytest.mark.parametrize("mode", ["load", "dest", "both"])
def test_every_byte_arrives(pair, mode, packed):
    t, w = pair
    del PROGRESS[:]
    tensors = model_tensors(seed=len(mode) + packed)
    version = "%s-%s" % (mode, packed)
    stats, r = sync(t, w, tensors, version, mode, packed)
    assert r["hashes"] == {n: digest(x) for n, x in tensors}
    assert r["version"] == version
    total = sum(x.numel() * x.element_size() for _, x in tensors)
    assert stats["bytes"] == total and r["stats"]["bytes"] == total
    assert stats["tensors"] == len(tensors)
    if mode == "dest":
        assert r["views"] == 1  # the empty tensor only (no memory to write into)
    if mode == "load":
        assert r["views"] == len(tensors)
    assert PROGRESS and PROGRESS[-1]["done"]
    assert PROGRESS[-1]["bytes_done"] == PROGRESS[-1]["bytes_total"] == total


def test_registered_source_resent_after_in_place_change(pair):
    t, w = pair
    tensors = model_tensors(seed=5)
    src = ws.Source(tensors)  # walked once
    _, r = sync(t, w, src, "a")
    assert r["hashes"] == {n: digest(x) for n, x in tensors}
    for _, x in tensors:  # an optimizer step: in place
        if x.is_floating_point():
            x.mul_(-3).add_(1)
        else:
            x.add_(1)
    _, r = sync(t, w, src, "b")
    assert r["hashes"] == {n: digest(x) for n, x in tensors}
    assert r["version"] == "b"


def test_refused_update_then_the_next_one_lands(pair):
    t, w = pair
    tensors = model_tensors(seed=9)
    src = ws.Source(tensors)
    info = t.update_info(src)
    # the worker's update names a shape the trainer does not send: the handshake refuses it on
    # both sides, before any byte moves, and the group stays usable
    bad = dict(info, shapes=[list(s) for s in info["shapes"]])
    bad["shapes"][0][0] += 1
    w.send(op="update", info=bad, version="never")
    with pytest.raises(ws.Error):
        t.send_weights(src)
    r = w.recv()
    assert not r["ok"] and "Error" in r["type"], r
    _, r = sync(t, w, src, "after")
    assert r["hashes"] == {n: digest(x) for n, x in tensors}
    assert r["version"] == "after"
