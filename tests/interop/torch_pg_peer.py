#!/usr/bin/env python3
"""A torch.distributed NCCL rank for the GPU interop test with the C++ TorchGroupCommunicator.

  torch_pg_peer.py --port P --rank R --src S --nbytes N [--device D] [--group NAME]

Joins (rank > 0) or hosts (rank 0) `init_process_group(backend="nccl",
init_method="tcp://127.0.0.1:P", world_size=2)`, or with --group an SGLang-style named group
(`rendezvous` + `PrefixStore(NAME, store)` + `_new_process_group_helper(..., group_name=NAME)`, as
SGLang's init_custom_process_group does), then broadcasts N uint8 bytes from rank S: byte i is
(i * 7 + 3) % 251. The receiving side checks every byte. Exit 0 ok, 1 wrong bytes, 2 error,
3 watchdog timeout.
"""
import argparse
import datetime
import os
import sys
import threading
import traceback

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--src", type=int, default=0)
    ap.add_argument("--nbytes", type=int, default=1 << 20)
    ap.add_argument("--device", type=int, default=1)
    ap.add_argument("--group", default="")
    ap.add_argument("--timeout-s", type=float, default=120)
    a = ap.parse_args()
    t = threading.Timer(a.timeout_s, lambda: (sys.stderr.write("torch_pg_peer: TIMEOUT\n"), os._exit(3)))
    t.daemon = True
    t.start()

    import torch
    import torch.distributed as dist
    torch.cuda.set_device(a.device)
    timeout = datetime.timedelta(seconds=a.timeout_s)
    init_method = f"tcp://127.0.0.1:{a.port}"
    if not a.group:
        dist.init_process_group("nccl", init_method=init_method, rank=a.rank, world_size=2,
                                timeout=timeout)
        pg = None
    else:
        from torch.distributed.distributed_c10d import (PrefixStore, _new_process_group_helper,
                                                        rendezvous)
        store, rank, world = next(rendezvous(init_method, a.rank, 2, timeout=timeout))
        store.set_timeout(timeout)
        store = PrefixStore(a.group, store)
        pg, _ = _new_process_group_helper(2, a.rank, [], "nccl", store, group_name=a.group,
                                          timeout=timeout)
    dev = torch.device("cuda", a.device)
    expected = (torch.arange(a.nbytes, dtype=torch.int64, device=dev) * 7 + 3).remainder(251).to(torch.uint8)
    buf = expected.clone() if a.rank == a.src else torch.zeros(a.nbytes, dtype=torch.uint8, device=dev)
    if pg is None:
        dist.broadcast(buf, src=a.src)
    else:
        pg.broadcast(buf, a.src).wait()
    torch.cuda.synchronize()
    wrong = int((buf != expected).sum().item())
    print(f"torch_pg_peer rank {a.rank}: {a.nbytes} bytes from rank {a.src}, {wrong} wrong "
          f"(torch {torch.__version__}, nccl {torch.cuda.nccl.version()})", flush=True)
    if pg is None:
        dist.destroy_process_group()
    t.cancel()
    return 0 if wrong == 0 else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SystemExit:
        raise
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(2)
