# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
"""Delta syncs from Python (host backend): the first round goes whole, the next sends only the
changed elements as blobs (fewer wire bytes than the tensors), applied in place in the worker's
own tensors; every byte checked; a worker that does not hold the base version refuses the round
on every rank before any byte moves."""

import pytest

import weightsync as ws
from wstest import digest, in_background, in_process_pair, torch


def round_(t, w, delta, version, mine):
    info = delta.prepare(version, t)
    job = in_background(t.send_weights, delta)
    w.start_weight_update()
    w.update_weights(info, lambda _: None, destinations=mine)
    w.finish_weight_update(version)
    job.result()
    delta.commit()
    return info


def test_a_delta_round_sends_only_what_changed():
    t, w = in_process_pair()
    try:
        g = torch.Generator().manual_seed(4)
        tensors = [("a", torch.randn(256, 256, generator=g)),
                   ("b", torch.randn(4096, generator=g).to(torch.bfloat16)),
                   ("c", torch.randn(100, generator=g))]
        delta = ws.DeltaSource(tensors)
        mine = {n: torch.zeros_like(x) for n, x in tensors}
        info = round_(t, w, delta, "v1", mine)
        assert delta.stats()["whole_round"]
        assert {n: digest(x) for n, x in mine.items()} == {n: digest(x) for n, x in tensors}
        # an optimizer step that touches 1 % of a's elements and none of c's
        a = tensors[0][1].view(-1)
        idx = torch.randperm(a.numel(), generator=g)[: a.numel() // 100]
        a[idx] += 1.0
        tensors[1][1][:5] += 1
        info = round_(t, w, delta, "v2", mine)
        assert info["delta"]["base_version"] == "v1"
        s = delta.stats()
        assert not s["whole_round"] and s["blobs"] >= 1 and s["unchanged"] >= 1
        assert s["wire_bytes"] < s["tensor_bytes"] / 4
        assert {n: digest(x) for n, x in mine.items()} == {n: digest(x) for n, x in tensors}
        assert w.weight_version() == "v2"
        # a worker that no longer holds the base (its weights were renamed "other"): the round
        # is refused on both sides before any byte moves
        w.start_weight_update()
        w.finish_weight_update("other")
        tensors[2][1][0] += 1
        info = delta.prepare("v3", t)
        assert info["delta"]["base_version"] == "v2"
        before = {n: digest(x) for n, x in mine.items()}
        job = in_background(t.send_weights, delta)
        w.start_weight_update()
        with pytest.raises(ws.Error) as e:
            w.update_weights(info, lambda _: None, destinations=mine)
        assert "v2" in str(e.value)
        with pytest.raises(ws.Error):
            job.result()
        assert {n: digest(x) for n, x in mine.items()} == before
    finally:
        t.shutdown()
        w.shutdown()
