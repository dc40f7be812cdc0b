#!/usr/bin/env python3
"""Conformance peer that behaves like an unmodified vLLM NCCL weight-transfer endpoint.

consume: acts as the vLLM worker (rank = rank_offset) and receives broadcasts from root 0
         (the C++ trainer), checking every tensor bit-exactly against the test pattern.
produce: acts as the vLLM trainer-side producer (rank 0, root 0) and broadcasts the pattern.

Exit codes: 0 ok, 1 wrong tensors, 2 error/usage, 3 watchdog timeout.
Written from the weightsync interop spec; no vLLM code is used (vLLM need not be installed).
"""
import argparse
import base64
import faulthandler
import json
import math
import os
import sys
import threading
import traceback

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # must be set before any NCCL init

MASK64 = (1 << 64) - 1
NCCL_ID_BYTES = 128

# One thread per 64-bit word: word(seed, w) = splitmix64 finalizer of (seed*C + w).
# The host passes base = seed*C mod 2^64, so the kernel only adds w.
_KERNEL_SRC = r"""
extern "C" __global__ void fill_pattern(unsigned char* dst, unsigned long long nbytes,
                                        unsigned long long base) {
  unsigned long long nwords = (nbytes + 7ULL) >> 3;
  unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long w = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
       w < nwords; w += stride) {
    unsigned long long x = base + w;
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    x = x ^ (x >> 31);
    unsigned long long off = w << 3;
    unsigned char* p = dst + off;
    if (off + 8ULL <= nbytes && (((unsigned long long)p) & 7ULL) == 0ULL) {
      *(unsigned long long*)p = x;  // little-endian: byte b of the word lands at off + b
    } else {
      for (int b = 0; b < 8 && off + b < nbytes; ++b) p[b] = (unsigned char)(x >> (8 * b));
    }
  }
}
"""


def pattern_seed(rnd, index):
    return (rnd * 1000003 + index * 7919 + 17) & MASK64


def ref_bytes(seed, n):
    """Pure-Python reference of the pattern (used only for a small kernel self-check)."""
    out = bytearray()
    for w in range((n + 7) // 8):
        x = (seed * 0xD1B54A32D192ED03 + w) & MASK64
        x = (x + 0x9E3779B97F4A7C15) & MASK64
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
        out += (x ^ (x >> 31)).to_bytes(8, "little")
    return bytes(out[:n])


def start_watchdog(timeout_s):
    def fire():
        sys.stderr.write(f"vllm_peer: TIMEOUT after {timeout_s}s (peer mismatch or hang?)\n")
        sys.stderr.flush()
        os._exit(3)
    t = threading.Timer(timeout_s, fire)
    t.daemon = True
    t.start()
    # Backstop that needs no GIL (in case a C call blocks while holding it): dump stacks, exit.
    faulthandler.dump_traceback_later(timeout_s + 15, exit=True)
    return t


def load_config(args):
    with open(args.init_info) as f:
        init = json.load(f)
    with open(args.update_info) as f:
        upd = json.load(f)
    cfg = dict(init)
    for key in ("packed", "packed_buffer_size_bytes", "packed_num_buffers"):
        if upd.get(key) is not None:
            cfg[key] = upd[key]  # update fields override init fields
    names, dtypes, shapes = upd["names"], upd["dtype_names"], upd["shapes"]
    if not (len(names) == len(dtypes) == len(shapes)):
        raise ValueError("names/dtype_names/shapes lengths differ")
    if init.get("nccl_unique_id_b64") is None:  # TCP mode: master_address + master_port
        if init.get("master_address") is None or init.get("master_port") is None:
            raise ValueError("init info has neither nccl_unique_id_b64 nor master_address/port")
        return cfg, None, names, dtypes, shapes
    uid = base64.b64decode(init["nccl_unique_id_b64"], validate=True)
    if len(uid) != NCCL_ID_BYTES:
        raise ValueError(f"ncclUniqueId must be {NCCL_ID_BYTES} bytes, got {len(uid)}")
    return cfg, uid, names, dtypes, shapes


def vllm_nccl_unique_id_class():
    """vLLM's pynccl_wrapper.ncclUniqueId, importable under vLLM's module path (pickle names it)."""
    import ctypes
    import types
    try:
        from vllm.distributed.device_communicators.pynccl_wrapper import ncclUniqueId
        return ncclUniqueId
    except ImportError:
        pass
    names = ["vllm", "vllm.distributed", "vllm.distributed.device_communicators",
             "vllm.distributed.device_communicators.pynccl_wrapper"]
    for n in names:
        sys.modules.setdefault(n, types.ModuleType(n))
    mod = sys.modules[names[-1]]

    class ncclUniqueId(ctypes.Structure):
        _fields_ = [("internal", ctypes.c_byte * 128)]
    ncclUniqueId.__module__ = names[-1]
    ncclUniqueId.__qualname__ = "ncclUniqueId"  # pickle writes module + qualname
    mod.ncclUniqueId = ncclUniqueId
    return ncclUniqueId


def tcp_rendezvous(cfg, rank, world, new_uid):
    """vLLM's TCP mode: StatelessProcessGroup.create + PyNcclCommunicator's broadcast_obj of the
    pickled ncclUniqueId ("broadcast_from/0/0"). Rank 0 hosts the store. Returns the 128 id bytes."""
    import ctypes
    import datetime
    import pickle
    import socket
    from torch.distributed import TCPStore
    ncclUniqueId = vllm_nccl_unique_id_class()
    host, port = cfg["master_address"], int(cfg["master_port"])
    listen_socket = None
    kwargs = dict(host_name=host, port=port, world_size=world, is_master=rank == 0,
                  timeout=datetime.timedelta(seconds=300))
    if rank == 0:  # as vLLM: bind master_address itself, hand the fd to the store
        listen_socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listen_socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listen_socket.bind((host, port))
        listen_socket.listen()
        kwargs["master_listen_fd"] = listen_socket.fileno()
    try:
        store = TCPStore(use_libuv=False, **kwargs)  # what vLLM passes
    except (TypeError, RuntimeError, ValueError):
        store = TCPStore(**kwargs)  # a torch whose store is libuv-only
    if rank == 0:
        uid = ncclUniqueId()
        raw = new_uid()
        ctypes.memmove(ctypes.addressof(uid), raw, NCCL_ID_BYTES)
        store.set("broadcast_from/0/0", pickle.dumps(uid))
    else:
        uid = pickle.loads(store.get("broadcast_from/0/0"))
        if not isinstance(uid, ncclUniqueId):
            raise ValueError(f"broadcast_from/0/0 unpickled to {type(uid)}, not ncclUniqueId")
    tcp_rendezvous.keep = [store, listen_socket]  # the store must outlive NCCL init
    return bytes(bytearray((b + 256) % 256 for b in uid.internal))


def release_tcp_rendezvous():
    """Stops the store, which owns the listening socket's fd (master_listen_fd): the store polls it
    and closes it when it is destroyed. Left to interpreter teardown, the Python socket object
    could close the fd first, and torch's store daemon then aborts the process on the closed fd
    ("Unexpected poll revent on the master's listening socket: 32", POLLNVAL). So the socket object
    lets go of the fd without closing it (detach), and the store goes first. vLLM keeps that socket
    alive inside its group for the store's whole life."""
    keep = getattr(tcp_rendezvous, "keep", None)
    if not keep:
        return
    tcp_rendezvous.keep = None
    store, listen_socket = keep
    keep.clear()
    if listen_socket is not None:
        listen_socket.detach()  # the store owns the fd now; never close it twice
    del store  # the last reference: the store's daemon thread stops and closes the fd


def make_comm(nccl, world, uid, rank):
    """CuPy >= 14 takes the id as bytes; older CuPy takes a tuple of 128 C chars."""
    try:
        return nccl.NcclCommunicator(world, uid, rank)  # CuPy 14: `bytes commId`
    except TypeError:
        pass  # typed-argument mismatch, raised before ncclCommInitRank was called
    try:  # CuPy < 14: tuple of signed chars (x86 char is signed)
        return nccl.NcclCommunicator(world, tuple(b - 256 if b > 127 else b for b in uid), rank)
    except OverflowError:  # platforms where char is unsigned
        return nccl.NcclCommunicator(world, tuple(uid), rank)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--init-info", required=True)
    ap.add_argument("--update-info", required=True)
    ap.add_argument("--mode", required=True, choices=("consume", "produce"))
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--round", type=int, default=0)
    ap.add_argument("--timeout-s", type=float, default=120.0)
    args = ap.parse_args()
    watchdog = start_watchdog(args.timeout_s)

    cfg, uid, names, dtype_names, shapes = load_config(args)
    world = int(cfg["world_size"])
    rank = 0 if args.mode == "produce" else int(cfg["rank_offset"])
    if not 0 <= rank < world:
        raise ValueError(f"rank {rank} outside world_size {world}")
    packed = bool(cfg.get("packed", False))
    limit = int(cfg.get("packed_buffer_size_bytes") or 0)
    nbuf = max(1, int(cfg.get("packed_num_buffers") or 1))
    if packed and limit <= 0:
        raise ValueError("packed transfer needs packed_buffer_size_bytes > 0")

    import numpy as np
    import torch
    import cupy
    from cupy.cuda import nccl

    metas = []  # (name, dtype, shape, nbytes)
    for name, dn, shape in zip(names, dtype_names, shapes):
        dt = getattr(torch, dn, None)
        if not isinstance(dt, torch.dtype):
            raise ValueError(f"unknown torch dtype name {dn!r} for {name}")
        shape = [int(s) for s in shape]
        metas.append((name, dt, shape, math.prod(shape) * dt.itemsize))

    torch.cuda.set_device(args.device)
    cupy.cuda.Device(args.device).use()
    dev = torch.device("cuda", args.device)
    kernel = cupy.RawKernel(_KERNEL_SRC, "fill_pattern")

    def fill(t_u8, seed):
        """Write the pattern into a contiguous uint8 tensor, on the current torch stream."""
        n = t_u8.numel()
        if n == 0:
            return
        blocks = min((n + 8 * 256 - 1) // (8 * 256), 1 << 20)
        with cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
            kernel((blocks,), (256,), (np.uint64(t_u8.data_ptr()), np.uint64(n),
                                       np.uint64((seed * 0xD1B54A32D192ED03) & MASK64)))

    # Self-check of the generator against the Python reference (odd length exercises the tail).
    probe, probe_seed = torch.empty(45, dtype=torch.uint8, device=dev), 0x123456789ABCDEF0
    for start in (0, 1):  # aligned 64-bit stores, then a misaligned start (byte path)
        fill(probe[start:], probe_seed)
        if bytes(probe[start:].cpu().tolist()) != ref_bytes(probe_seed, 45 - start):
            raise RuntimeError("GPU pattern kernel disagrees with the Python reference")

    # --- NCCL init: every rank enters ncclCommInitRank together, then vLLM's warm-up. ---
    if uid is None:
        uid = tcp_rendezvous(cfg, rank, world,
                             lambda: bytes(bytearray((b + 256) % 256 for b in nccl.get_unique_id())))
    comm = make_comm(nccl, world, uid, rank)
    warm_in = torch.zeros(1, dtype=torch.float32, device=dev)
    warm_out = torch.zeros(1, dtype=torch.float32, device=dev)
    stream = torch.cuda.current_stream()
    comm.allReduce(warm_in.data_ptr(), warm_out.data_ptr(), 1, nccl.NCCL_FLOAT32, nccl.NCCL_SUM,
                   stream.cuda_stream)
    stream.synchronize()

    def bcast(t, nbytes):
        """In-place byte broadcast from root 0 on the current torch stream."""
        p = t.data_ptr()
        comm.broadcast(p, p, nbytes, nccl.NCCL_UINT8, 0, torch.cuda.current_stream().cuda_stream)

    # Chunking (packed): close a chunk once its total is STRICTLY greater than the limit.
    chunks, cur, total = [], [], 0
    for i, m in enumerate(metas):
        cur.append(i)
        total += m[3]
        if total > limit:
            chunks.append(cur)
            cur, total = [], 0
    if cur:
        chunks.append(cur)

    n_tensors, n_bytes = len(metas), sum(m[3] for m in metas)
    n_bcasts, wrong = 0, []

    def check(i, byte_view):
        """Bit-exact comparison of a received 1-D uint8 view with the expected pattern."""
        exp = torch.empty(metas[i][3], dtype=torch.uint8, device=dev)
        fill(exp, pattern_seed(args.round, i))
        if not torch.equal(byte_view, exp):
            wrong.append(metas[i][0])

    def gen(i):
        """Pattern tensor i as a fresh buffer viewed with its declared dtype and shape."""
        _, dt, shape, size = metas[i]
        raw = torch.empty(size, dtype=torch.uint8, device=dev)
        fill(raw, pattern_seed(args.round, i))
        return raw.view(dt).view(shape)

    streams = [torch.cuda.Stream(device=dev) for _ in range(nbuf)]
    in_flight = [None] * nbuf  # keeps a slot's buffer alive until its stream is synchronized

    if args.mode == "consume" and packed:
        for ci, chunk in enumerate(chunks):
            slot = ci % nbuf
            streams[slot].synchronize()  # round robin: wait before reusing a stream/buffer
            in_flight[slot] = None
            with torch.cuda.stream(streams[slot]):
                total = sum(metas[i][3] for i in chunk)
                buf = torch.empty(total, dtype=torch.uint8, device=dev)
                if total > 0:  # an all-empty chunk is never sent
                    bcast(buf, total)
                    n_bcasts += 1
                off = 0
                for i in chunk:
                    name, dt, shape, size = metas[i]
                    view = buf[off:off + size]
                    try:
                        view.view(dt).view(shape)  # what vLLM hands to load_weights
                    except RuntimeError as e:
                        print(f"vllm_peer: {name}: cannot view as {dt}{shape} at offset {off}: {e}",
                              file=sys.stderr)
                        wrong.append(name)
                    else:
                        check(i, view)
                    off += size
                in_flight[slot] = buf
    elif args.mode == "consume":
        for i, (name, dt, shape, size) in enumerate(metas):
            t = torch.empty(shape, dtype=dt, device=dev)
            if size > 0:
                bcast(t, size)
                n_bcasts += 1
            check(i, t.reshape(-1).view(torch.uint8))
    elif packed:  # produce, packed
        for ci, chunk in enumerate(chunks):
            slot = ci % nbuf
            streams[slot].synchronize()
            in_flight[slot] = None
            with torch.cuda.stream(streams[slot]):
                parts = [gen(i).contiguous().reshape(-1).view(torch.uint8) for i in chunk]
                buf = torch.cat(parts)  # a fresh packed buffer per chunk
                if buf.numel() > 0:
                    bcast(buf, buf.numel())
                    n_bcasts += 1
                in_flight[slot] = buf
    else:  # produce, unpacked
        for i in range(n_tensors):
            t = gen(i)
            if metas[i][3] > 0:
                bcast(t, metas[i][3])
                n_bcasts += 1
    for s in streams:
        s.synchronize()
    torch.cuda.synchronize()
    in_flight.clear()

    layout = "packed" if packed else "unpacked"
    nchunks = len(chunks) if packed else n_bcasts
    if args.mode == "consume":
        for name in wrong[:8]:
            print(f"vllm_peer: WRONG tensor {name}", file=sys.stderr)
        print(f"vllm_peer consume: {n_tensors} tensors, {n_bytes} bytes, {nchunks} chunks "
              f"({layout}), {len(wrong)} wrong", flush=True)
    else:
        print(f"vllm_peer produce: {n_tensors} tensors, {n_bytes} bytes, {nchunks} chunks "
              f"({layout}), {n_bcasts} broadcasts", flush=True)
    comm.destroy()  # local teardown, still under the watchdog
    release_tcp_rendezvous()
    watchdog.cancel()
    faulthandler.cancel_dump_traceback_later()
    return 0 if not wrong else 1


if __name__ == "__main__":
    try:
        rc = main()
    except SystemExit:
        raise
    except BaseException:
        traceback.print_exc()
        sys.stderr.write("vllm_peer: FAILED with an exception\n")
        sys.stderr.flush()
        os._exit(2)  # skip teardown of a possibly wedged communicator
    sys.stdout.flush()
    sys.exit(rc)
