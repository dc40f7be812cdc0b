# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
"""The vLLM plugin (weightsync.vllm_plugin) against the vLLM test double (doubles/vllm: the
upstream base class, factory, plugin loader and worker verbs): found through the entry point
pyproject.toml declares, a Python trainer sending over the host backend to vLLM's worker verbs,
the model's load_weights getting every byte; the options riding the init info; a failing vLLM
import reported loudly, never as "Invalid weight transfer backend"."""

import logging
import os
import sys
import threading
import tomllib

import pytest

import wstest
from wstest import TIMEOUT, digest, free_port, model_tensors, torch

ROOT = os.environ.get("WEIGHTSYNC_SOURCE_DIR",
                      os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
DOUBLES = os.path.join(wstest.HERE, "doubles")

ws = pytest.importorskip("weightsync")


@pytest.fixture()
def vllm(tmp_path, monkeypatch):
    """The vLLM double on sys.path, with a distribution whose entry points are pyproject.toml's
    (as `pip install .` writes them), and a fresh plugin state."""
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        eps = tomllib.load(f)["project"]["entry-points"]["vllm.general_plugins"]
    dist = tmp_path / "weightsync-0.1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: weightsync\nVersion: 0.1.0\n")
    (dist / "entry_points.txt").write_text(
        "[vllm.general_plugins]\n" + "".join("%s = %s\n" % kv for kv in eps.items()))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(DOUBLES)
    for m in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, m)
    from weightsync import vllm_plugin
    monkeypatch.setattr(vllm_plugin, "_cache", {})
    import vllm.plugins
    return vllm


class Model(torch.nn.Module):
    """A model with vLLM's load_weights(weights): copies each named tensor into its parameter."""

    def __init__(self, tensors):
        super().__init__()
        self.params = {n: torch.zeros_like(t) for n, t in tensors}
        self.loaded = []

    def load_weights(self, weights):
        for name, t in weights:
            self.params[name].copy_(t)
            self.loaded.append(name)
        return set(self.loaded)


def make_worker(tensors, options=None):
    from vllm.config import ParallelConfig, VllmConfig, WeightTransferConfig
    from vllm.v1.worker.gpu_worker import Worker
    model = Model(tensors)
    cfg = VllmConfig(parallel_config=ParallelConfig(), model_config="model-config",
                     weight_transfer_config=WeightTransferConfig(backend="weightsync"))
    return Worker(cfg, torch.device("cpu"), model), model


def both(fa, fb):
    """Runs fa in a thread and fb here; returns fb's result, raises fa's error."""
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
    assert not th.is_alive(), "the other side never returned"
    if err:
        raise err[0]
    return out


def test_entry_point_registers_backend(vllm):
    from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory
    from vllm.plugins import load_general_plugins
    assert "weightsync" not in WeightTransferEngineFactory._registry
    load_general_plugins()
    cls = WeightTransferEngineFactory._registry["weightsync"]()
    from vllm.distributed.weight_transfer.base import WeightTransferEngine
    assert issubclass(cls, WeightTransferEngine)
    assert cls.__name__ == "WeightsyncWeightTransferEngine"
    from weightsync import vllm_plugin
    vllm_plugin.register()  # a second vLLM process's call, in the same one: no error


def test_trainer_to_vllm_worker_bytes(vllm):
    from vllm.plugins import load_general_plugins
    load_general_plugins()
    from weightsync import vllm_plugin
    tensors = model_tensors(7)
    worker, model = make_worker(tensors)
    port = free_port()
    base = wstest.init_info(port)
    info = vllm_plugin.init_info(base, timeout=TIMEOUT, checksum=True, liveness_interval=0,
                                 layerwise_reload=True)
    trainer = ws.TrainerEngine(timeout=TIMEOUT, checksum=True)
    both(lambda: worker.init_weight_transfer_engine(info), lambda: trainer.trainer_init(base))
    engine = worker.weight_transfer_engine
    assert engine._engine.rank() == 1 and engine._engine.world_size() == 2
    for rnd in range(2):
        if rnd:
            tensors = model_tensors(100 + rnd)
        update = trainer.update_info(tensors)

        def recv():
            worker.start_weight_update()
            worker.update_weights(update)
            worker.finish_weight_update()
        stats = both(recv, lambda: trainer.send_weights(tensors))
        assert stats["tensors"] == len(tensors)
        for name, t in tensors:
            assert digest(model.params[name]) == digest(t), name
        assert sorted(set(model.loaded)) == sorted(n for n, _ in tensors)
        assert engine.last_stats["tensors"] == len(tensors)
        model.loaded.clear()
    assert model.reload_calls == ["initialize", ("finalize", "model-config")] * 2
    worker.shutdown()
    trainer.shutdown()


def test_earlier_base_receive_weights_with_load_weights(vllm):
    """The earlier base class hands receive_weights a load_weights callable: it gets the
    tensors instead of the model."""
    from weightsync import vllm_plugin
    tensors = model_tensors(3)
    cls = vllm_plugin.engine_class()
    from vllm.config import ParallelConfig, VllmConfig, WeightTransferConfig
    eng = cls(WeightTransferConfig(backend="weightsync"), VllmConfig(ParallelConfig()),
              torch.device("cpu"), None)
    port = free_port()
    base = wstest.init_info(port)
    trainer = ws.TrainerEngine(timeout=TIMEOUT)
    both(lambda: eng.init_transfer_engine(eng.parse_init_info(
        vllm_plugin.init_info(base, timeout=TIMEOUT, liveness_interval=0))),
        lambda: trainer.trainer_init(base))
    got = {}
    typed = eng.parse_update_info(dict(trainer.update_info(tensors), is_checkpoint_format=False))
    assert typed.info["is_checkpoint_format"] is False

    def recv():
        eng.start_weight_update()
        eng.receive_weights(eng.parse_update_info(trainer.update_info(tensors)),
                            lambda ws_: got.update({n: digest(t) for n, t in ws_}))
        eng.finish_weight_update()
    both(recv, lambda: cls.trainer_send_weights(iter(tensors), {"engine": trainer}))
    assert got == {n: digest(t) for n, t in tensors}
    eng.shutdown()
    trainer.shutdown()


def test_earlier_base_class(vllm, monkeypatch):
    """Over the base class of aa1cd96: built from (config, parallel_config), the layout from
    the parallel config, is_checkpoint_format in the typed update info, the worker's loader."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("vllm_base_aa1cd96",
                                                  os.path.join(DOUBLES, "vllm_base_aa1cd96.py"))
    old = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(old)
    monkeypatch.setitem(sys.modules, "vllm.distributed.weight_transfer.base", old)
    from weightsync import vllm_plugin
    cls = vllm_plugin.engine_class()
    assert issubclass(cls, old.WeightTransferEngine)
    from vllm.config import ParallelConfig, WeightTransferConfig
    eng = cls(WeightTransferConfig(backend="weightsync"), ParallelConfig())
    tensors = model_tensors(5)
    base = wstest.init_info(free_port())
    trainer = ws.TrainerEngine(timeout=TIMEOUT)
    both(lambda: eng.init_transfer_engine(eng.parse_init_info(
        vllm_plugin.init_info(base, timeout=TIMEOUT, liveness_interval=0))),
        lambda: trainer.trainer_init(base))
    typed = eng.parse_update_info(dict(trainer.update_info(tensors), is_checkpoint_format=False))
    assert typed.is_checkpoint_format is False
    got = {}
    both(lambda: eng.receive_weights(typed, lambda w: got.update({n: digest(t) for n, t in w})),
         lambda: trainer.send_weights(tensors))
    assert got == {n: digest(t) for n, t in tensors}
    eng.shutdown()
    trainer.shutdown()


def test_options_checked(vllm):
    from vllm.plugins import load_general_plugins
    load_general_plugins()
    worker, _ = make_worker(model_tensors(1))
    base = wstest.init_info(free_port())
    with pytest.raises(ValueError,
                       match=r"Invalid init_info .*weightsync\.chekcsum: unknown option"):
        worker.init_weight_transfer_engine(dict(base, weightsync={"chekcsum": True}))
    with pytest.raises(ValueError, match=r"weightsync\.local_rank: set by vLLM's parallel config"):
        worker.init_weight_transfer_engine(dict(base, weightsync={"local_rank": 1}))
    with pytest.raises(ValueError, match="unknown option"):
        from weightsync import vllm_plugin
        vllm_plugin.init_info(base, nope=1)
    # a bad field of the init info itself: the library names it
    with pytest.raises(ws.ConfigError) as e:
        worker.init_weight_transfer_engine(dict(base, world_size=0))
    assert e.value.field == "world_size"
    with pytest.raises(RuntimeError, match="not initialized"):
        worker.weight_transfer_engine.start_weight_update()
    # vLLM's config takes only the backend: why the options ride the init info
    from vllm.config import WeightTransferConfig
    with pytest.raises(TypeError):
        WeightTransferConfig(backend="weightsync", checksum=True)


def test_vllm_base_import_failure_is_loud(vllm, monkeypatch, caplog):
    """vLLM's weight-transfer base fails to import: register() logs the real ImportError and
    the backend, once asked for, raises it (not "Invalid weight transfer backend")."""
    from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory
    monkeypatch.setitem(sys.modules, "vllm.distributed.weight_transfer.base", None)
    from vllm.plugins import load_general_plugins
    with caplog.at_level(logging.ERROR, logger="weightsync.vllm_plugin"):
        load_general_plugins()
    msgs = [r.getMessage() for r in caplog.records if r.name == "weightsync.vllm_plugin"]
    assert any("cannot be built" in m and "vllm.distributed.weight_transfer.base" in m
               for m in msgs), msgs
    from vllm.config import ParallelConfig, VllmConfig, WeightTransferConfig
    with pytest.raises(RuntimeError, match="could not be built: (ModuleNotFound|Import)Error") as e:
        WeightTransferEngineFactory.create_engine(WeightTransferConfig(backend="weightsync"),
                                                  VllmConfig(ParallelConfig()), None, None)
    assert isinstance(e.value.__cause__, ImportError)
    assert "Invalid weight transfer backend" not in str(e.value)


def test_vllm_factory_import_failure_raises(vllm, monkeypatch, caplog):
    """No weight-transfer factory in this vLLM: register() logs and raises, which vLLM's loader
    lets through (it calls the plugin's function unguarded)."""
    monkeypatch.setitem(sys.modules, "vllm.distributed.weight_transfer.factory", None)
    from vllm.plugins import load_general_plugins
    with caplog.at_level(logging.ERROR, logger="weightsync.vllm_plugin"):
        with pytest.raises(ImportError):
            load_general_plugins()
    assert any("importing vllm.distributed.weight_transfer.factory failed" in r.getMessage()
               for r in caplog.records)
