# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
"""A Python worker process for the tests: reads JSON-line commands on stdin, answers on stdout.
  peer.py worker   ops: init {info}, update {info, version, mode: load|dest|both},
                   sleep_then_update (for Ctrl-C), exit"""

import hashlib
import json
import sys
import time
import traceback

import torch

import weightsync as ws


def reply(**kw):
    sys.stdout.write(json.dumps(kw) + "\n")
    sys.stdout.flush()


def sha(t):
    t = t.detach().contiguous().reshape(-1).view(torch.uint8)
    return hashlib.sha256(t.cpu().numpy().tobytes()).hexdigest()


def device_of(w):
    return "cpu" if w.backend == "host" else "cuda"


def update(w, cmd):
    info = cmd["info"]
    mode = cmd.get("mode", "load")
    got, views = {}, 0
    dests = None
    if mode in ("dest", "both"):
        # every other tensor (both) or all of them (dest) into our own tensors
        dests = {}
        for i, (n, d, s) in enumerate(zip(info["names"], info["dtype_names"], info["shapes"])):
            if mode == "dest" or i % 2 == 0:
                dests[n] = torch.zeros(s, dtype=getattr(torch, d), device=device_of(w))
        before = {n: t.data_ptr() for n, t in dests.items()}

    slow = cmd.get("slow", 0)

    def load(weights, stream):
        nonlocal views
        if slow:
            time.sleep(slow)
        if stream:  # a CUDA backend: the views are ready on `stream`
            torch.cuda.ExternalStream(stream).synchronize()
        for name, t in weights:
            assert isinstance(t, torch.Tensor)
            assert t.device.type == device_of(w), t.device
            got[name] = sha(t)
            views += 1

    time.sleep(cmd.get("delay", 0))  # (a late worker: the trainer waits in its handshake)
    w.start_weight_update()
    stats = w.update_weights(info, load, dests)
    if device_of(w) == "cuda":
        torch.cuda.synchronize()
    if dests:
        for n, t in dests.items():
            assert t.data_ptr() == before[n], "a destination tensor was replaced"
            # (an empty tensor has no memory: torch's data_ptr is 0, which asks for a view)
            assert n not in got or t.numel() == 0, "a tensor with a destination was also loaded"
            got[n] = sha(t)
    w.finish_weight_update(cmd.get("version"))
    reply(ok=True, hashes=got, views=views, version=w.weight_version(), stats=stats)


def interrupted(w, cmd):
    """update_weights from a trainer that never sends: the test sends SIGINT meanwhile."""
    w.start_weight_update()
    reply(ok=True, waiting=True)
    t0 = time.monotonic()
    try:
        w.update_weights(cmd["info"], lambda weights: None)
    except KeyboardInterrupt as e:
        ctx = e.__context__
        reply(ok=True, interrupted=True, after_s=time.monotonic() - t0,
              context=type(ctx).__name__ if ctx else None, context_msg=str(ctx),
              updating=w.updating())
        return
    reply(ok=False, msg="update_weights returned")


def trainer_alone(port):
    """trainer_init of a group whose worker never comes: the test sends SIGINT meanwhile."""
    t = ws.TrainerEngine(timeout=60.0)
    reply(ok=True, waiting=True)
    t0 = time.monotonic()
    try:
        t.trainer_init({"master_address": "127.0.0.1", "master_port": port, "world_size": 2,
                        "rank_offset": 1})
    except KeyboardInterrupt as e:
        reply(ok=True, interrupted=True, after_s=time.monotonic() - t0,
              context=type(e.__context__).__name__ if e.__context__ else None)
        return
    reply(ok=False, msg="trainer_init returned")


def worker():
    backend = sys.argv[3] if len(sys.argv) > 3 else "host"
    device = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    if backend != "host":
        torch.cuda.set_device(device)
    w = ws.WorkerEngine(backend, timeout=float(sys.argv[2]) if len(sys.argv) > 2 else 30.0,
                        liveness_interval=0, device=device if backend != "host" else -1)
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        try:
            if op == "exit":
                w.shutdown()
                reply(ok=True)
                return
            if op == "init":
                w.init_transfer_engine(cmd["info"])
                reply(ok=True, rank=w.rank(), world_size=w.world_size())
            elif op == "update":
                update(w, cmd)
            elif op == "state":
                reply(ok=True, updating=w.updating(), initialized=w.initialized(),
                      version=w.weight_version())
            elif op == "start":
                w.start_weight_update()
                reply(ok=True)
            elif op == "wait_for_ctrl_c":
                interrupted(w, cmd)
            else:
                reply(ok=False, type="bad op", msg=op)
        except Exception as e:  # noqa: BLE001 (reported to the test)
            reply(ok=False, type=type(e).__name__, msg=str(e),
                  attrs={k: getattr(e, k) for k in ("field", "peer", "phase", "deadline")
                         if hasattr(e, k)},
                  trace=traceback.format_exc())


if __name__ == "__main__":
    if sys.argv[1] == "trainer_alone":
        trainer_alone(int(sys.argv[2]))
    else:
        {"worker": worker}[sys.argv[1]]()
