#!/usr/bin/env python3
"""Python side of the c10d TCPStore interop tests: torch's own TCPStore client and server.

Needs only torch (CPU is enough: Debian's python3-torch 1.13 or any torch 2.x); no GPU, no vLLM.
Checked here with torch 1.13 only; the queue / list_keys branches run only on a torch that has them.
Each mode prints one line starting with "OK" and exits 0, or prints the failure and exits 1.

  client         --port P        torch client against the C++ server: every command, and the keys
                                 the C++ side set ("cpp/k" = "from-cpp")
  server         --port P        torch hosts (is_master=True, world_size=2); waits for the C++
                                 client's "cpp/done", checks its keys, answers "py/done"
  vllm-worker    --port P        vLLM's StatelessProcessGroup (rank 1 of 2) joins the C++ rank 0,
                                 unpickles broadcast_from/0/0 as a pynccl_wrapper.ncclUniqueId
                                 (a stand-in module with vLLM's definition), prints its hex
  vllm-trainer   --port P --id-hex H
                                 vLLM's rank 0: hosts the store, waits for the C++ rank 1 to join,
                                 publishes pickle.dumps(ncclUniqueId(H)) as broadcast_obj does
  torch-pg       --port P --rank R --id-hex H [--group NAME]
                                 init_process_group's store chain (rendezvous("tcp://..."),
                                 PrefixStore("default_pg" or NAME), PrefixStore(f"{group}/"),
                                 PrefixStore("cuda/")); rank 0 sets key "0" to the raw id as
                                 ProcessGroupNCCL does, rank 1 reads it and prints its hex
"""
import argparse
import ctypes
import datetime
import os
import pickle
import sys
import tempfile
import time

import torch.distributed as dist

TIMEOUT = datetime.timedelta(seconds=20)


def check(cond, what):
    if not cond:
        print(f"FAIL: {what}", flush=True)
        sys.exit(1)


def make_store(port, is_master, world_size=None, wait=False):
    # Positional form: works on torch 1.13 and 2.x alike.
    return dist.TCPStore("127.0.0.1", port, world_size, is_master, TIMEOUT, wait_for_workers=wait)


def mode_client(a):
    s = make_store(a.port, False)
    check(s.get("cpp/k") == b"from-cpp", "get of the C++ key")
    s.set("py/k", b"from-py")
    check(s.get("py/k") == b"from-py", "get after set")
    check(s.add("py/n", 3) == 3 and s.add("py/n", 4) == 7, "add")
    if hasattr(s, "check"):  # not exposed by torch 1.13
        check(s.check(["py/k", "cpp/k"]) and not s.check(["py/absent"]), "check")
    s.wait(["cpp/k"], datetime.timedelta(seconds=5))
    t0 = time.time()
    try:
        s.wait(["py/absent"], datetime.timedelta(milliseconds=300))
        check(False, "wait on an absent key did not time out")
    except Exception:
        check(time.time() - t0 < 5, "wait timeout took too long")
    check(s.compare_set("py/cs", "", "v1") == b"v1", "compare_set on a missing key")
    check(s.compare_set("py/cs", "v1", "v2") == b"v2", "compare_set match")
    check(s.compare_set("py/cs", "zz", "v3") == b"v2", "compare_set mismatch")
    check(s.delete_key("py/cs") and not s.delete_key("py/cs"), "delete_key")
    n = s.num_keys()
    check(n >= 3, f"num_keys {n}")
    if hasattr(s, "append"):  # torch >= 2.1
        s.append("py/ap", b"ab")
        s.append("py/ap", b"cd")
        check(s.get("py/ap") == b"abcd", "append")
    if hasattr(s, "multi_set"):  # torch >= 2.1
        s.multi_set(["py/m1", "py/m2"], [b"1", b"2"])
        check(s.multi_get(["py/m1", "py/m2"]) == [b"1", b"2"], "multi_get")
    if hasattr(s, "queue_push"):  # newer torch 2.x (QUEUE_* bytes 14..16); not in 1.13
        try:
            s.queue_push("py/q", b"a")
            s.queue_push("py/q", b"b")
            check(s.queue_len("py/q") == 2, "queue_len")
            check(s.queue_pop("py/q") == b"a", "queue_pop (blocking)")
            check(s.queue_pop("py/q", False) == b"b", "queue_pop (non-blocking)")
        except NotImplementedError:  # a client built without libuv refuses queues itself
            pass
    if hasattr(s, "list_keys"):  # newer torch 2.x (LIST, byte 17); not in 1.13
        keys = s.list_keys()
        check("py/k" in keys and "cpp/k" in keys, f"list_keys {keys}")
    s.set("py/done", b"1")
    print(f"OK client torch {torch_version()} num_keys={n}", flush=True)


def mode_server(a):
    s = make_store(a.port, True, 2, wait=False)
    s.set("py/k", b"from-py")
    s.wait(["cpp/done"], datetime.timedelta(seconds=20))
    check(s.get("cpp/k") == b"from-cpp", "C++ set")
    check(s.get("cpp/n") == b"42", "C++ add")
    s.set("py/done", b"1")
    time.sleep(0.5)  # keep serving while the C++ client reads py/done
    print(f"OK server torch {torch_version()}", flush=True)


def vllm_module():
    """A stand-in for vllm.distributed.device_communicators.pynccl_wrapper (vLLM's definition)."""
    root = tempfile.mkdtemp(prefix="ws_vllm_")
    pkg = os.path.join(root, "vllm", "distributed", "device_communicators")
    os.makedirs(pkg)
    for d in ("vllm", "vllm/distributed", "vllm/distributed/device_communicators"):
        open(os.path.join(root, d, "__init__.py"), "w").close()
    with open(os.path.join(pkg, "pynccl_wrapper.py"), "w") as f:
        f.write("import ctypes\n\nclass ncclUniqueId(ctypes.Structure):\n"
                "    _fields_ = [('internal', ctypes.c_byte * 128)]\n")
    sys.path.insert(0, root)
    from vllm.distributed.device_communicators.pynccl_wrapper import ncclUniqueId
    return ncclUniqueId


def mode_vllm_worker(a):
    ncclUniqueId = vllm_module()
    s = make_store(a.port, False, 2, wait=True)  # StatelessProcessGroup.create, rank 1
    uid = pickle.loads(s.get("broadcast_from/0/0"))
    check(isinstance(uid, ncclUniqueId), f"unpickled a {type(uid)}")
    print("OK " + bytes(uid.internal).hex(), flush=True)


def mode_vllm_trainer(a):
    ncclUniqueId = vllm_module()
    s = make_store(a.port, True, 2, wait=True)  # returns once the C++ rank has joined
    uid = ncclUniqueId()
    raw = bytes.fromhex(a.id_hex)
    ctypes.memmove(ctypes.addressof(uid), raw, 128)
    s.set("broadcast_from/0/0", pickle.dumps(uid))
    s.wait(["cpp/done"], datetime.timedelta(seconds=20))
    print(f"OK vllm-trainer pickle={len(pickle.dumps(uid))} bytes", flush=True)


def mode_torch_pg(a):
    it = dist.rendezvous(f"tcp://127.0.0.1:{a.port}", a.rank, 2, timeout=TIMEOUT)
    store, rank, world = next(it)
    outer = a.group if a.group else "default_pg"
    group = a.group if a.group else "0"
    s = dist.PrefixStore("cuda/", dist.PrefixStore(f"{group}/", dist.PrefixStore(outer, store)))
    if a.rank == 0:
        s.set("0", bytes.fromhex(a.id_hex))
        store.wait(["cpp/done"], datetime.timedelta(seconds=20))
        print("OK torch-pg rank 0", flush=True)
    else:
        print("OK " + s.get("0").hex(), flush=True)


def torch_version():
    import torch
    return torch.__version__


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--id-hex", default="")
    ap.add_argument("--group", default="")
    a = ap.parse_args()
    {"client": mode_client, "server": mode_server, "vllm-worker": mode_vllm_worker,
     "vllm-trainer": mode_vllm_trainer, "torch-pg": mode_torch_pg}[a.mode](a)


if __name__ == "__main__":
    main()
