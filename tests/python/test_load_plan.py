# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
"""The model-aware LoadPlan from Python (host backend): HuggingFace-style pieces placed into
fused parameters (in place where they can land directly), a bfloat16 tensor cast into a float32
parameter, a half of a tensor kept (a TP shard); every element checked; a mapping that names no
parameter is refused before any byte moves."""

import os
import sys

import pytest

import weightsync as ws
from wstest import in_background, in_process_pair, torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "examples", "python"))
import demo_mlp  # noqa: E402


def test_pieces_fused_cast_and_sharded():
    t, w = in_process_pair()
    try:
        sent = demo_mlp.init_params(torch, seed=5)
        for v in sent.values():
            v.add_(torch.randn(v.shape))  # (biases too: nothing zero)
        extra = torch.randn(8, 4).to(torch.bfloat16)
        wide = torch.randn(6, 10)
        weights = demo_mlp.piece_views(sent) + [("extra", extra), ("wide", wide)]
        src = ws.Source(weights)
        mine = {n: torch.zeros(s) for n, s in demo_mlp.FUSED}
        mine["extra"] = torch.zeros(8, 4)            # float32: a cast on load
        mine["wide_shard"] = torch.zeros(6, 5)        # the second half of wide's columns
        where = {hf: (fused, first) for hf, fused, first, _ in demo_mlp.pieces()}

        def mapping(name, dtype, shape):
            if name in where:
                return {"param": where[name][0], "dst_row": where[name][1]}
            if name == "extra":
                return {"param": "extra"}
            if name == "wide":
                return {"param": "wide_shard", "slice_dim": 1, "slice_begin": 5, "slice_len": 5}
            return None

        info = t.update_info(src)
        plan = w.load_plan(info, mine, mapping, require_full_coverage=True)
        assert plan.in_place_count >= 1 and plan.gather_count >= 2
        job = in_background(t.send_weights, src)
        w.start_weight_update()
        stats = w.update_weights(info, plan=plan)
        w.finish_weight_update("planned")
        job.result()
        assert stats["tensors"] == len(weights)
        for n, _ in demo_mlp.FUSED:
            assert torch.equal(mine[n], sent[n]), n
        assert torch.equal(mine["extra"], extra.to(torch.float32))
        assert torch.equal(mine["wide_shard"], wide[:, 5:])
        # a mapping that names an unknown parameter: refused when the plan is made
        with pytest.raises(ws.ConfigError):
            w.load_plan(info, mine, lambda n, d, s: {"param": "nope"})
    finally:
        t.shutdown()
        w.shutdown()
