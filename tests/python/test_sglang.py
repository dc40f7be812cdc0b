# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
"""SGLang (weightsync.sglang): a Python trainer driving a double of a released SGLang server's
routes (doubles/sglang_server.py: torch.distributed over gloo, as SGLang receives), every byte
checked; and the receiver factory for SGLang's external receiver hook, driven by a double of the
hook's driver (doubles/sglang_updater.py, doubles/sglang/) with a trainer sending over the host
backend."""

import os
import subprocess
import sys
import threading

import pytest

import wstest
from wstest import TIMEOUT, digest, free_port, model_tensors, torch

ws = pytest.importorskip("weightsync")
from weightsync import sglang  # noqa: E402

DOUBLES = os.path.join(wstest.HERE, "doubles")


@pytest.fixture()
def server():
    port = free_port()
    p = subprocess.Popen([sys.executable, os.path.join(DOUBLES, "sglang_server.py"), str(port)],
                         stdout=subprocess.PIPE, env=wstest.env(), text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        yield "http://127.0.0.1:%d" % port
    finally:
        p.kill()
        p.wait(10)


def state(trainer):
    import json
    import urllib.request
    with urllib.request.urlopen(trainer.url + "/double/state", timeout=TIMEOUT) as r:
        return json.loads(r.read())


def gloo_tensors(seed):
    """model_tensors without bfloat16: torch 1.13's gloo has no bfloat16 (SGLang's NCCL has)."""
    return [(n, t) for n, t in model_tensors(seed) if t.dtype != torch.bfloat16]


def test_trainer_drives_released_sglang_routes(server):
    t = sglang.SglangTrainer(server, master_address="127.0.0.1", master_port=free_port(),
                             world_size=2, backend="gloo", timeout=TIMEOUT)
    t.init_weights_update_group()
    for rnd, version in enumerate(["v1", "v2"]):
        tensors = gloo_tensors(11 + rnd)
        out = t.update_weights_from_distributed(tensors, weight_version=version)
        assert out["success"] is True
        s = state(t)
        assert s["digests"] == {n: digest(x) for n, x in tensors}
        assert s["weight_version"] == version
    body = [b for b in s["bodies"] if b["route"] == "/update_weights_from_distributed"][-1]["body"]
    assert body["names"] == [n for n, _ in tensors]
    assert body["dtypes"] == ["float32", "float16", "int64", "uint8", "float64", "float32",
                              "float32"]
    assert body["shapes"][4] == [] and body["shapes"][5] == [0, 4]
    assert body["group_name"] == "weight_update_group" and body["flush_cache"] is True
    init = [b for b in s["bodies"] if b["route"] == "/init_weights_update_group"][0]["body"]
    assert init["rank_offset"] == 1 and init["world_size"] == 2 and init["backend"] == "gloo"
    t.destroy_weights_update_group()
    assert t.group is None


def test_bad_requests_named(server):
    t = sglang.SglangTrainer(server, master_address="127.0.0.1", master_port=free_port(),
                             world_size=2, backend="gloo", timeout=TIMEOUT)
    with pytest.raises(RuntimeError, match="call init_weights_update_group first"):
        t.update_weights_from_distributed(model_tensors(1))
    bad = sglang.SglangTrainer(server, master_address="127.0.0.1", master_port=0,
                               world_size=2, backend="gloo", timeout=TIMEOUT)
    with pytest.raises(ws.ConfigError) as e:
        bad.init_weights_update_group()
    assert e.value.field == "master_port"
    t.init_weights_update_group()
    with pytest.raises(ws.ConfigError) as e:
        t.update_request([("x", torch.zeros(2))], weight_version=7)
    assert e.value.field == "weight_version"
    # a second group of the same name: refused (by torch here, by the server there), at once
    again = sglang.SglangTrainer(server, master_address="127.0.0.1", master_port=free_port(),
                                 world_size=2, backend="gloo", timeout=TIMEOUT)
    with pytest.raises((RuntimeError, sglang.SglangError), match="already"):
        again.init_weights_update_group()
    assert again.group is None
    # the server refuses a group it never joined: the answer's message is the error
    with pytest.raises(sglang.SglangError, match="does not exist"):
        t.post("/destroy_weights_update_group", {"group_name": "nope"})
    t.destroy_weights_update_group()


def test_unreachable_server_named():
    t = sglang.SglangTrainer("http://127.0.0.1:%d" % free_port(), master_address="127.0.0.1",
                             master_port=free_port(), world_size=2, backend="gloo", timeout=5)
    with pytest.raises(sglang.SglangError, match="cannot reach http://127.0.0.1"):
        t.post("/init_weights_update_group", {})


# --- the receiver hook ----------------------------------------------------------------------

class Model(torch.nn.Module):
    """An SGLang model's load_weights(weights): copies by name."""

    def __init__(self, tensors):
        super().__init__()
        self.params = {n: torch.zeros_like(t) for n, t in tensors}

    def load_weights(self, weights):
        for name, t in weights:
            self.params[name].copy_(t)


@pytest.fixture()
def hook(monkeypatch):
    monkeypatch.syspath_prepend(DOUBLES)
    for m in [m for m in sys.modules if m == "sglang" or m.startswith("sglang.")
              or m == "sglang_updater"]:
        monkeypatch.delitem(sys.modules, m)
    import sglang_updater
    return sglang_updater


def both(fa, fb):
    err = []

    def run():
        try:
            fa()
        except BaseException as e:  # noqa: BLE001
            err.append(e)
    th = threading.Thread(target=run)
    th.start()
    try:
        out = fb()
    finally:
        th.join(TIMEOUT * 2)
    assert not th.is_alive()
    if err:
        raise err[0]
    return out


def test_receiver_factory_through_the_hook(hook):
    tensors = model_tensors(21)
    model = Model(tensors)
    updater = hook.WeightUpdater(model=model, device="cpu", tp_rank=0, tp_size=1,
                                 weight_update_receivers=[sglang.RECEIVER])
    info = wstest.init_info(free_port())
    body = sglang.receiver_init_request(info, timeout=TIMEOUT, checksum=True,
                                        liveness_interval=0)
    assert body["receiver"] == "weightsync.sglang.receiver"
    trainer = ws.TrainerEngine(timeout=TIMEOUT, checksum=True)
    res = {}
    both(lambda: res.update(init=updater.init_weights_update_group(**body)),
         lambda: trainer.trainer_init(info))
    assert res["init"] == (True, "Succeeded to initialize external weight-update receiver.")
    receiver = updater._external_receivers["weight_update_group"]
    for rnd in range(2):
        tensors = model_tensors(30 + rnd)
        req = sglang.receiver_update_request(trainer.update_info(tensors),
                                             weight_version="step-%d" % rnd)
        fields = {k: req[k] for k in ("names", "dtypes", "shapes", "group_name",
                                      "receiver_payload")}
        both(lambda: updater.receive_weights_from_distributed(**fields),
             lambda: trainer.send_weights(tensors))
        for n, t in tensors:
            assert digest(model.params[n]) == digest(t), n
        assert receiver.weight_version() == "step-%d" % rnd
        assert receiver.last_stats["tensors"] == len(tensors)
    # the driver refuses tensors named on a receiver round
    with pytest.raises(ValueError, match="must be empty"):
        updater.receive_weights_from_distributed(names=["x"], dtypes=["float32"], shapes=[[1]],
                                                 group_name="weight_update_group",
                                                 receiver_payload={})
    with pytest.raises(ValueError, match="receiver_payload must be"):
        receiver.receive(None)
    assert updater.destroy_weights_update_group("weight_update_group")[0] is True
    with pytest.raises(RuntimeError, match="receive after destroy"):
        receiver.receive({"update_info": {}})
    trainer.shutdown()


def test_receiver_refusals(hook):
    model = Model(model_tensors(1))
    info = wstest.init_info(free_port())
    off = hook.WeightUpdater(model=model, device="cpu", tp_rank=0, tp_size=1,
                             weight_update_receivers=[])
    ok, msg = off.init_weights_update_group(**sglang.receiver_init_request(info))
    assert not ok and "not listed in --weight-update-receivers" in msg
    on = hook.WeightUpdater(model=model, device="cpu", tp_rank=0, tp_size=1,
                            weight_update_receivers=[sglang.RECEIVER])
    body = sglang.receiver_init_request(info)
    body["receiver_init_payload"]["options"] = {"chekcsum": True}
    ok, msg = on.init_weights_update_group(**body)
    assert not ok and "options.chekcsum: unknown option" in msg
    body = sglang.receiver_init_request(info)
    body["world_size"] = 3
    ok, msg = on.init_weights_update_group(**body)
    assert not ok and "init_info.world_size is 2 but the request's world_size is 3" in msg
    with pytest.raises(ValueError, match="set from SGLang's context"):
        sglang.receiver_init_request(info, local_rank=1)
