# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
"""Helpers of the Python tests: free ports, tensors of every dtype with known bytes, their
digests, and a worker process driven by JSON lines (peer.py)."""

import hashlib
import json
import os
import random
import socket
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
# The one deadline of every engine and wait in these tests: generous on a loaded 2-core machine.
TIMEOUT = 30.0

torch = pytest.importorskip("torch")


def free_port():
    """A port below Linux's ephemeral range (32768+), free now."""
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(20000, 32000)
        s = socket.socket()
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))
            return port
        except OSError:
            continue
        finally:
            s.close()
    raise RuntimeError("no free port")


def init_info(port, world_size=2, packed=True, buffer=4096, num_buffers=2):
    return {"master_address": "127.0.0.1", "master_port": port, "world_size": world_size,
            "rank_offset": 1, "packed": packed, "packed_buffer_size_bytes": buffer,
            "packed_num_buffers": num_buffers}


def model_tensors(seed, big=False):
    """Named tensors of several dtypes and shapes (a scalar, an empty one, odd sizes)."""
    g = torch.Generator().manual_seed(seed)
    out = [
        ("embed.weight", torch.randn(37, 16, generator=g)),
        ("layers.0.q_proj.weight", torch.randn(16, 16, generator=g).to(torch.bfloat16)),
        ("layers.0.norm.weight", torch.randn(16, generator=g).to(torch.float16)),
        ("layers.0.counter", torch.randint(-2**40, 2**40, (3,), generator=g, dtype=torch.int64)),
        ("layers.0.mask", torch.randint(0, 255, (5, 3), generator=g, dtype=torch.uint8)),
        ("scale", torch.randn((), generator=g, dtype=torch.float64)),
        ("empty", torch.zeros(0, 4)),
        ("lm_head.weight", torch.randn(40, 33, generator=g)),
    ]
    if big:
        out.append(("big", torch.randn(1 << 20, generator=g)))
    return out


def tensor_bytes(t):
    return t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def digest(t):
    return hashlib.sha256(tensor_bytes(t)).hexdigest()


def env():
    e = dict(os.environ)
    e["PYTHONUNBUFFERED"] = "1"
    return e


class Worker:
    """A worker process (peer.py worker): commands in as JSON lines, replies out."""

    def __init__(self, *args, extra_env=None):
        e = env()
        e.update(extra_env or {})
        self.p = subprocess.Popen([sys.executable, os.path.join(HERE, "peer.py"), "worker", *args],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=e, text=True)

    def send(self, **cmd):
        self.p.stdin.write(json.dumps(cmd) + "\n")
        self.p.stdin.flush()

    def recv(self):
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError("the worker exited (rc %s)" % self.p.wait(TIMEOUT))
        return json.loads(line)

    def call(self, **cmd):
        self.send(**cmd)
        return self.recv()

    def close(self):
        if self.p.poll() is None:
            try:
                self.send(op="exit")
                self.p.wait(TIMEOUT)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                self.p.kill()
                self.p.wait()


def in_process_pair(trainer_kw=None, worker_kw=None, **info_kw):
    """A trainer and a worker in this process (the worker on the calling thread): possible only
    because both release the GIL while they wait for each other."""
    import threading  # noqa: PLC0415

    import weightsync as ws  # noqa: PLC0415
    t = ws.TrainerEngine(timeout=TIMEOUT, **(trainer_kw or {}))
    w = ws.WorkerEngine(timeout=TIMEOUT, liveness_interval=0, **(worker_kw or {}))
    info = init_info(free_port(), **info_kw)
    th = threading.Thread(target=t.trainer_init, args=(info,))
    th.start()
    w.init_transfer_engine(info)
    th.join(TIMEOUT)
    return t, w


def in_background(fn, *args):
    """Runs fn(*args) on a thread; .result() joins it and returns or raises what it did."""
    import threading  # noqa: PLC0415

    class Job(threading.Thread):
        def run(self):
            try:
                self.value, self.error = fn(*args), None
            except BaseException as e:  # noqa: BLE001
                self.value, self.error = None, e

        def result(self):
            self.join(TIMEOUT * 2)
            assert not self.is_alive(), "the background call did not return"
            if self.error is not None:
                raise self.error
            return self.value

    j = Job(daemon=True)
    j.start()
    return j
