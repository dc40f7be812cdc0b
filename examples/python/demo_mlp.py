# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
"""The demo's model in Python (the twin of examples/demo_model.hpp): a 2-64-64-3 MLP held as six
fused float32 tensors (mlp.0.*, mlp.2.*, mlp.4.*), sent as HuggingFace-style unfused pieces
(q/k/v-like rows of layer 0, gate/up-like halves of layer 1, lm_head), and its forward pass in
float32 in the C++ demo's exact order of operations, so that both sides' answers are
bit-identical."""

import math

import numpy as np

K_IN, K_HIDDEN, K_CLASSES = 2, 64, 3

FUSED = [("mlp.0.weight", (K_HIDDEN, K_IN)), ("mlp.0.bias", (K_HIDDEN,)),
         ("mlp.2.weight", (K_HIDDEN, K_HIDDEN)), ("mlp.2.bias", (K_HIDDEN,)),
         ("mlp.4.weight", (K_CLASSES, K_HIDDEN)), ("mlp.4.bias", (K_CLASSES,))]


def pieces():
    """[(hf name, fused name, first row, rows)] in the order the C++ demo's trainer sends."""
    out = []
    for name, first, rows in (("q_proj", 0, 32), ("k_proj", 32, 16), ("v_proj", 48, 16)):
        out.append(("layers.0.%s.weight" % name, "mlp.0.weight", first, rows))
        out.append(("layers.0.%s.bias" % name, "mlp.0.bias", first, rows))
    for k, name in enumerate(("gate_proj", "up_proj")):
        out.append(("layers.1.%s.weight" % name, "mlp.2.weight", k * 32, 32))
        out.append(("layers.1.%s.bias" % name, "mlp.2.bias", k * 32, 32))
    out.append(("lm_head.weight", "mlp.4.weight", 0, K_CLASSES))
    out.append(("lm_head.bias", "mlp.4.bias", 0, K_CLASSES))
    return out


def piece_views(params):
    """{hf name: the rows of the fused tensor it is}: views, no copies (a trainer's source, a
    worker's destinations)."""
    return [(hf, params[fused][first:first + rows]) for hf, fused, first, rows in pieces()]


def init_params(torch, seed):
    g = torch.Generator().manual_seed(seed)
    params = {}
    for name, shape in FUSED:
        if name.endswith("weight"):
            params[name] = torch.randn(*shape, generator=g) * math.sqrt(2.0 / shape[1])
        else:
            params[name] = torch.zeros(*shape)
    return params


def forward(p, xy):
    """Logits (n, 3) in float32, operation by operation as demo::forward does (each product and
    sum rounded to float32, the dot products summed from k = 0 up)."""
    f = np.float32
    w1, b1, w2, b2, w3, b3 = (np.asarray(p[n], dtype=f) for n, _ in FUSED)
    x = np.asarray(xy, dtype=f)[:, 0:1]
    y = np.asarray(xy, dtype=f)[:, 1:2]
    h1 = np.maximum(w1[:, 0][None, :] * x + w1[:, 1][None, :] * y + b1[None, :], f(0))
    z = np.repeat(b2[None, :], len(xy), axis=0)
    for k in range(K_HIDDEN):
        z = z + w2[:, k][None, :] * h1[:, k:k + 1]
    h2 = np.maximum(z, f(0))
    out = np.repeat(b3[None, :], len(xy), axis=0)
    for k in range(K_HIDDEN):
        out = out + w3[:, k][None, :] * h2[:, k:k + 1]
    return out


def spirals(per_class, seed):
    """Three interleaved spirals: points (n, 2) and labels (n,)."""
    rng = np.random.default_rng(seed)
    xs, ys = [], []
    for c in range(K_CLASSES):
        r = np.linspace(0.05, 1.0, per_class)
        t = c * 2 * math.pi / 3 + 4 * r + rng.normal(0, 0.15, per_class)
        xs.append(np.stack([r * np.sin(t), r * np.cos(t)], axis=1))
        ys.append(np.full(per_class, c))
    return np.concatenate(xs).astype(np.float32), np.concatenate(ys)
