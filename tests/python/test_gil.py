# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
"""The GIL is released for every blocking call: a Python thread keeps running while this thread
is inside a long send_weights (the worker process comes 1.5 s late, then loads slowly), and the
GIL is only re-taken to call back into Python (progress)."""

import threading
import time

import weightsync as ws
from wstest import TIMEOUT, Worker, digest, free_port, init_info, torch

DELAY = 1.5


def test_a_python_thread_runs_during_a_long_sync():
    w = Worker(str(TIMEOUT))
    calls = []
    t = ws.TrainerEngine(timeout=TIMEOUT, progress=lambda p: calls.append(p["chunk"]))
    try:
        info = init_info(free_port(), buffer=1 << 14)
        w.send(op="init", info=info)
        t.trainer_init(info)
        assert w.recv()["ok"]
        g = torch.Generator().manual_seed(11)
        tensors = [("w%d" % i, torch.randn(4096, generator=g)) for i in range(32)]
        src = ws.Source(tensors)
        ticks = []
        stop = threading.Event()

        def counter():
            while not stop.is_set():
                ticks.append(time.monotonic())
                time.sleep(0.001)

        th = threading.Thread(target=counter, daemon=True)
        th.start()
        w.send(op="update", info=t.update_info(src), version="late", delay=DELAY, slow=0.01)
        t0 = time.monotonic()
        stats = t.send_weights(src)
        t1 = time.monotonic()
        stop.set()
        th.join(TIMEOUT)
        r = w.recv()
        assert r["ok"], r
        assert r["hashes"] == {n: digest(x) for n, x in tensors}
        assert t1 - t0 >= DELAY * 0.8  # the trainer did wait for the late worker
        inside = [x for x in ticks if t0 <= x <= t1]
        gaps = [b - a for a, b in zip([t0] + inside, inside + [t1])]
        # Holding the GIL through the call would stop the counter for the whole wait (a gap of
        # about DELAY); released, it ticks every millisecond or so, however loaded the machine.
        assert len(inside) > 50, len(inside)
        assert max(gaps) < DELAY / 2, max(gaps)
        assert calls and calls[-1] == stats["chunks"]  # progress: the GIL re-taken for it
    finally:
        t.shutdown()
        w.close()
