# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
"""GPU: a Python trainer (this process) and a Python worker (another process) on one GPU over
ipc, p2p and nccl (TCP and unique-id rendezvous; the ranks share the GPU over NCCL's socket
transport), with bf16 and FP8 tensors, every byte checked; CUDA views whose data_ptr is the
library's memory; destinations in the worker's own CUDA tensors; shadow mode from Python.
Skipped without a GPU (scripts/python-gpu-check.sh runs them on the GPU machine)."""

import threading

import pytest

import weightsync as ws
from wstest import TIMEOUT, Worker, digest, free_port, in_background, init_info, torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not (ws.has_cuda and torch.cuda.is_available()),
                       reason="needs a CUDA GPU and weightsync built with CUDA"),
]

SHARED = {"NCCL_SOCKET_IFNAME": "lo", "NCCL_IB_DISABLE": "1"}


def cuda_tensors(seed):
    g = torch.Generator().manual_seed(seed)
    out = [("embed", torch.randn(1000, 64, generator=g)),
           ("q_proj", torch.randn(64, 64, generator=g).to(torch.bfloat16)),
           ("norm", torch.randn(64, generator=g).to(torch.float16)),
           ("ids", torch.arange(17, dtype=torch.int64)),
           ("big", torch.randn(1 << 20, generator=g))]
    if hasattr(torch, "float8_e4m3fn"):
        out.append(("fp8", torch.randn(32, 32, generator=g).to(torch.float8_e4m3fn)))
        out.append(("fp8b", torch.randn(33, generator=g).to(torch.float8_e5m2)))
    return [(n, t.cuda()) for n, t in out]


def gpu_pair(backend, info):
    # p2p is for two GPUs of one node: the worker on the second one
    device = "1" if backend == "p2p" else "0"
    w = Worker(str(TIMEOUT), backend, device,
               extra_env=dict(SHARED, NCCL_HOSTID="ws-py-worker"))
    import os  # noqa: PLC0415
    os.environ.update(SHARED, NCCL_HOSTID="ws-py-trainer")
    torch.cuda.set_device(0)
    t = ws.TrainerEngine(backend, timeout=TIMEOUT, device=0)
    w.send(op="init", info=info)
    t.trainer_init(info)
    r = w.recv()
    assert r["ok"], r
    return t, w


@pytest.mark.parametrize("backend,rendezvous", [("ipc", "tcp"), ("p2p", "tcp"), ("nccl", "tcp"),
                                                ("nccl", "unique_id")])
@pytest.mark.parametrize("mode", ["load", "dest"])
def test_every_byte_over_a_gpu_backend(backend, rendezvous, mode):
    if backend not in ws.backends():
        pytest.skip("%s not in this build" % backend)
    if backend == "p2p" and torch.cuda.device_count() < 2:
        pytest.skip("p2p needs two GPUs (ipc is the one-GPU case)")
    if rendezvous == "unique_id":
        info = ws.vllm_init_info(2, 1, True, 1 << 20, 2)
    else:
        info = init_info(free_port(), buffer=1 << 20)
    t, w = gpu_pair(backend, info)
    try:
        for round_ in range(2):
            tensors = cuda_tensors(round_)
            src = ws.Source(tensors)
            w.send(op="update", info=t.update_info(src), version="v%d" % round_, mode=mode)
            stats = t.send_weights(src)
            r = w.recv()
            assert r["ok"], r
            assert r["hashes"] == {n: digest(x) for n, x in tensors}
            assert stats["bytes"] == sum(x.numel() * x.element_size() for _, x in tensors)
    finally:
        t.shutdown()
        w.close()


def test_cuda_views_and_destinations_in_process():
    """Both ends in this process (the GIL released while they wait for each other): CUDA views
    whose data_ptr is the library's memory, and destinations written in place."""
    torch.cuda.set_device(0)
    info = init_info(free_port(), buffer=1 << 20)
    t = ws.TrainerEngine("ipc", timeout=TIMEOUT, device=0)
    w = ws.WorkerEngine("ipc", timeout=TIMEOUT, device=0, liveness_interval=0, views="raw")
    th = threading.Thread(target=t.trainer_init, args=(info,))
    th.start()
    w.init_transfer_engine(info)
    th.join()
    try:
        tensors = cuda_tensors(7)
        src = ws.Source(tensors)
        for i, (_, x) in enumerate(tensors):
            assert src._set.data_ptr(i) == x.data_ptr()
        seen = {}

        def load(views, stream):
            torch.cuda.ExternalStream(stream).synchronize()
            for name, v in views:
                assert v.is_cuda
                x = ws.as_framework_tensor(v)
                assert x.is_cuda and x.data_ptr() == v.data_ptr
                seen[name] = digest(x)
        job = in_background(t.send_weights, src)
        w.start_weight_update()
        w.update_weights(t.update_info(src), load)
        w.finish_weight_update("v1")
        job.result()
        assert seen == {n: digest(x) for n, x in tensors}
        mine = {n: torch.zeros_like(x) for n, x in tensors}
        ptrs = {n: x.data_ptr() for n, x in mine.items()}
        job = in_background(t.send_weights, src)
        w.start_weight_update()
        w.update_weights(t.update_info(src), lambda *_: None, destinations=mine)
        w.finish_weight_update("v2")
        job.result()
        torch.cuda.synchronize()
        assert {n: x.data_ptr() for n, x in mine.items()} == ptrs
        assert {n: digest(x) for n, x in mine.items()} == {n: digest(x) for n, x in tensors}
    finally:
        t.shutdown()
        w.shutdown()


def test_shadow_mode_on_the_gpu():
    """Shadow mode: the update lands in the second copy while a snapshot of the live version is
    held; the version flips at finish, and the old snapshot still reads the old weights."""
    torch.cuda.set_device(0)
    info = init_info(free_port(), buffer=1 << 20)
    t = ws.TrainerEngine("ipc", timeout=TIMEOUT, device=0, acknowledge="each_transfer")
    w = ws.WorkerEngine("ipc", timeout=TIMEOUT, device=0, liveness_interval=0, shadow=True,
                        acknowledge="each_transfer")
    tensors = cuda_tensors(3)
    live = {n: torch.zeros_like(x) for n, x in tensors}
    w.register_parameters(live)
    th = threading.Thread(target=t.trainer_init, args=(info,))
    th.start()
    w.init_transfer_engine(info)
    th.join()
    try:
        src = ws.Source(tensors)
        before = w.acquire()
        assert before.version == "default"
        job = in_background(t.send_weights, src)
        w.start_weight_update()
        w.update_weights(t.update_info(src), lambda *_: None)
        w.finish_weight_update("shadow-1")
        job.result()
        torch.cuda.synchronize()
        with w.acquire() as after:
            assert after.version == "shadow-1"
            assert {n: digest(x) for n, x in after.parameters.items()} == \
                {n: digest(x) for n, x in tensors}
        zeros = {n: digest(torch.zeros_like(x)) for n, x in tensors}
        assert {n: digest(x) for n, x in before.parameters.items()} == zeros
        before.release()
    finally:
        t.shutdown()
        w.shutdown()
