# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
"""Ctrl-C: a real SIGINT to a process blocked in a sync's wait ends it at once with
KeyboardInterrupt (the library's timeout as its context, long before the engine's 30 s deadline),
and the engine is left as after any other abort: the session is over, the next start says the
group failed, and a new init_transfer_engine syncs again."""

import os
import signal
import subprocess
import sys
import time

import weightsync as ws
from wstest import HERE, TIMEOUT, Worker, digest, env, free_port, init_info, model_tensors

# Far below the engines' deadline (TIMEOUT): the interrupt, not the deadline, ended the wait.
BOUND = TIMEOUT / 3


def test_ctrl_c_during_update_weights_aborts_the_sync():
    w = Worker(str(TIMEOUT))
    t = ws.TrainerEngine(timeout=TIMEOUT)
    try:
        info = init_info(free_port())
        w.send(op="init", info=info)
        t.trainer_init(info)
        assert w.recv()["ok"]
        tensors = model_tensors(seed=3)
        src = ws.Source(tensors)
        r = w.call(op="wait_for_ctrl_c", info=t.update_info(src))
        assert r["waiting"]
        time.sleep(0.5)  # well inside update_weights' wait for the trainer's handshake
        w.p.send_signal(signal.SIGINT)
        r = w.recv()
        assert r["ok"] and r["interrupted"], r
        assert r["after_s"] < BOUND, r
        assert r["context"] == "TimeoutError", r  # the wait gave up as at its deadline
        assert r["updating"] is False  # the session is over
        # as after any abort: the group failed; the next start says so
        r = w.call(op="start")
        assert not r["ok"] and r["type"] == "StateError", r
        assert "init_transfer_engine" in r["msg"]
        # and a new init (a new group) syncs again
        t.shutdown()
        t = ws.TrainerEngine(timeout=TIMEOUT)
        info = init_info(free_port())
        w.send(op="init", info=info)
        t.trainer_init(info)
        assert w.recv()["ok"]
        w.send(op="update", info=t.update_info(src), version="after-ctrl-c")
        t.send_weights(src)
        r = w.recv()
        assert r["ok"], r
        assert r["hashes"] == {n: digest(x) for n, x in tensors}
    finally:
        t.shutdown()
        w.close()


def test_ctrl_c_during_trainer_init():
    p = subprocess.Popen([sys.executable, os.path.join(HERE, "peer.py"), "trainer_alone",
                          str(free_port())], stdout=subprocess.PIPE, env=env(), text=True)
    try:
        assert '"waiting": true' in p.stdout.readline()
        time.sleep(0.5)
        p.send_signal(signal.SIGINT)
        line = p.stdout.readline()
        assert '"interrupted": true' in line, line
        import json  # noqa: PLC0415
        r = json.loads(line)
        assert r["after_s"] < BOUND, r
        assert p.wait(TIMEOUT) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
