# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
"""A PyTorch trainer: trains the demo MLP and, after each epoch, pushes its weights into one or
more inference servers through vLLM's HTTP routes and weightsync's TrainerEngine, then checks
that every server answers exactly (bit for bit, logits included) as its own copy of the model
does (the Python twin of examples/trainer.cpp; the servers may be examples/inference_server or
examples/python/worker.py).

  python3 examples/python/trainer.py --server http://127.0.0.1:8000[,http://...] [--syncs 3]
                                     [--backend host] [--timeout-s 30] [--transfer-port 0]

The weights go out as HuggingFace-style pieces that are row views of the trained (fused)
parameters: registered once (weightsync.Source), no copy, re-sent each sync after the optimizer
updated them in place."""

import argparse
import json
import os
import random
import socket
import sys
import threading
import urllib.error
import urllib.request

import numpy as np
import torch

import weightsync as ws

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import demo_mlp  # noqa: E402


class Client:
    """vLLM's routes over HTTP (urllib)."""

    def __init__(self, url, timeout):
        self.url, self.timeout = url.rstrip("/"), timeout

    def call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                return json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as e:
            raise RuntimeError("%s %s%s: %s %s" % (method, self.url, path, e.code,
                                                   e.read().decode(errors="replace"))) from None

    def post(self, path, body=None):
        return self.call("POST", path, {} if body is None else body)


def free_port():
    for _ in range(200):
        port = random.randrange(20000, 32000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    raise RuntimeError("no free port")


def on_all(servers, fn):
    """fn(server) on every server at once; the first failure is raised."""
    errors, threads = [], []
    for s in servers:
        def run(s=s):
            try:
                fn(s)
            except Exception as e:  # noqa: BLE001
                errors.append(e)
        threads.append(threading.Thread(target=run))
        threads[-1].start()
    return threads, errors


def join(threads, errors):
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def train_epoch(params, xs, ys, lr=0.15, batch=32, seed=0):
    """One epoch of SGD, the parameters updated in place (so the registered Source sees them)."""
    p = [params[n].requires_grad_() for n, _ in demo_mlp.FUSED]
    order = np.random.default_rng(seed).permutation(len(xs))
    loss = 0.0
    for i in range(0, len(xs), batch):
        idx = order[i:i + batch]
        x, y = torch.from_numpy(xs[idx]), torch.from_numpy(ys[idx])
        h = torch.relu(x @ p[0].t() + p[1])
        h = torch.relu(h @ p[2].t() + p[3])
        out = torch.nn.functional.cross_entropy(h @ p[4].t() + p[5], y)
        for t in p:
            t.grad = None
        out.backward()
        with torch.no_grad():
            for t in p:
                t.sub_(lr * t.grad)
        loss = float(out)
    for t in p:
        t.requires_grad_(False)
    return loss


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server", default="http://127.0.0.1:8000")
    ap.add_argument("--syncs", type=int, default=3)
    ap.add_argument("--backend", default="host")
    ap.add_argument("--timeout-s", type=float, default=30.0)
    ap.add_argument("--transfer-port", type=int, default=0)
    a = ap.parse_args()
    servers = [Client(u, a.timeout_s + 5) for u in a.server.split(",")]
    for s in servers:  # every server answers before anything starts
        s.call("GET", "/get_world_size")

    params = demo_mlp.init_params(torch, seed=7)
    xs, ys = demo_mlp.spirals(200, seed=1)
    probe = np.round(demo_mlp.spirals(20, seed=2)[0] * 64) / 64  # exact in float32
    source = ws.Source(demo_mlp.piece_views(params))  # registered once: views, no copy

    info = {"master_address": "127.0.0.1", "master_port": a.transfer_port or free_port(),
            "world_size": 1 + len(servers), "rank_offset": 1, "packed": True,
            "packed_buffer_size_bytes": 4096, "packed_num_buffers": 2}
    trainer = ws.TrainerEngine(a.backend, timeout=a.timeout_s)
    inits = on_all(list(enumerate(servers)), lambda s: s[1].post(
        "/init_weight_transfer_engine", {"init_info": dict(info, rank_offset=1 + s[0])}))
    trainer.trainer_init(info)
    join(*inits)
    print("[py-trainer] %d server(s) joined over the %s backend" % (len(servers), a.backend),
          flush=True)

    for sync in range(1, a.syncs + 1):
        loss = train_epoch(params, xs, ys, seed=sync)
        version = "py-step-%d" % sync
        join(*on_all(servers, lambda s: (s.post("/pause", {"mode": "keep"}),
                                         s.post("/start_weight_update"))))
        update = trainer.update_info(source)
        pending = on_all(servers, lambda s: s.post("/update_weights", {"update_info": update}))
        stats = trainer.send_weights(source)
        join(*pending)
        join(*on_all(servers, lambda s: (s.post("/finish_weight_update",
                                                {"weight_version": version}),
                                         s.post("/resume"))))
        own = demo_mlp.forward({k: v.detach().numpy() for k, v in params.items()}, probe)
        for s in servers:
            r = s.post("/v1/predict", {"inputs": probe.tolist(), "logits": True})
            got = np.asarray(r["logits"], dtype=np.float32)
            same = r["weight_version"] == version and np.array_equal(got, own)
            print("[py-trainer] sync %d (%d tensors, %d bytes, %d chunks): loss %.3f, %s serves "
                  "'%s', %s" % (sync, stats["tensors"], stats["bytes"], stats["chunks"], loss,
                                s.url, r["weight_version"],
                                "logits bit-identical to the trainer's" if same
                                else "LOGITS DIFFER"), flush=True)
            if not same:
                return 1
    trainer.shutdown()
    print("[py-trainer] done after %d syncs" % a.syncs, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
