#!/usr/bin/env python3
"""Reference benchmark: vLLM-style packed weight transfer over torch.distributed.

Re-implements (independently, no vLLM code) the Python "packed broadcast"
weight-sync algorithm used by vLLM so that the C++ library can be compared
with it on the same machine.  Two processes, one per GPU:

  rank 0 = trainer / producer  (cuda:0)
  rank 1 = inference consumer  (cuda:1)

Run without --worker: the script launches both ranks itself (subprocesses with
MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE/LOCAL_RANK) and exits non-zero if a
rank failed or any destination tensor was received wrong.
"""
import os

# Must be set before NCCL is initialised (NVLink SHARP/multicast off).
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")

import argparse
import itertools
import json
import math
import socket
import statistics
import subprocess
import sys
import time
from collections import namedtuple
from datetime import datetime, timezone

import torch
import torch.distributed as dist

Meta = namedtuple("Meta", "name shape dtype nbytes")
BF16 = torch.bfloat16
POISON = 0xCD          # byte written into consumer destinations before each iteration
RAW_PATTERN = 0x5A     # byte the producer sends in the raw-nccl baseline
EXPECTED_COUNTS = {"dense8b": 399, "moe30b": 18867, "small1b": 310, "lora8b": 504}


# --------------------------------------------------------------------------- layouts
def _m(name, *shape):
    return Meta(name, tuple(shape), BF16, math.prod(shape) * BF16.itemsize)


def _attn(p, h, q_out, kv):
    a = p + "self_attn."
    return [_m(a + "q_proj.weight", q_out, h), _m(a + "k_proj.weight", kv, h),
            _m(a + "v_proj.weight", kv, h), _m(a + "o_proj.weight", h, q_out),
            _m(a + "q_norm.weight", 128), _m(a + "k_norm.weight", 128)]


def _norms(p, h):
    return [_m(p + "input_layernorm.weight", h), _m(p + "post_attention_layernorm.weight", h)]


def _dense(layers, h, q_out, kv, ffn, vocab, lm_head):
    out = [_m("model.embed_tokens.weight", vocab, h)]
    for i in range(layers):
        p = f"model.layers.{i}."
        out += _attn(p, h, q_out, kv)
        out += [_m(p + "mlp.gate_proj.weight", ffn, h), _m(p + "mlp.up_proj.weight", ffn, h),
                _m(p + "mlp.down_proj.weight", h, ffn)]
        out += _norms(p, h)
    out.append(_m("model.norm.weight", h))
    if lm_head:
        out.append(_m("lm_head.weight", vocab, h))
    return out


def _moe30b():
    h, vocab, experts, inter = 2048, 151936, 128, 768
    out = [_m("model.embed_tokens.weight", vocab, h)]
    for i in range(48):
        p = f"model.layers.{i}."
        out += _attn(p, h, 4096, 512)
        out.append(_m(p + "mlp.gate.weight", experts, h))  # router
        for e in range(experts):
            q = f"{p}mlp.experts.{e}."
            out += [_m(q + "gate_proj.weight", inter, h), _m(q + "up_proj.weight", inter, h),
                    _m(q + "down_proj.weight", h, inter)]
        out += _norms(p, h)
    out += [_m("model.norm.weight", h), _m("lm_head.weight", vocab, h)]
    return out


def _lora8b(rank=16):
    projs = [("self_attn.q_proj", 4096, 4096), ("self_attn.k_proj", 4096, 1024),
             ("self_attn.v_proj", 4096, 1024), ("self_attn.o_proj", 4096, 4096),
             ("mlp.gate_proj", 4096, 12288), ("mlp.up_proj", 4096, 12288),
             ("mlp.down_proj", 12288, 4096)]
    out = []
    for i in range(36):
        for proj, d_in, d_out in projs:
            p = f"base_model.model.model.layers.{i}.{proj}."
            out += [_m(p + "lora_A.weight", rank, d_in), _m(p + "lora_B.weight", d_out, rank)]
    return out


def build_layout(spec):
    """Return the ordered list of Meta for a layout name."""
    if spec == "dense8b":
        metas = _dense(36, 4096, 4096, 1024, 12288, 151936, lm_head=True)
    elif spec == "small1b":
        metas = _dense(28, 1024, 2048, 1024, 3072, 151936, lm_head=False)
    elif spec == "moe30b":
        metas = _moe30b()
    elif spec == "lora8b":
        metas = _lora8b()
    elif spec.startswith("synthetic:"):
        count, nbytes = (int(x) for x in spec[len("synthetic:"):].lower().split("x"))
        if count <= 0 or nbytes <= 0 or nbytes % 2:
            raise ValueError(f"{spec}: need count > 0 and an even byte size > 0")
        metas = [_m(f"synthetic.{i}.weight", nbytes // 2) for i in range(count)]
    else:
        raise ValueError(f"unknown layout {spec!r}")
    if spec in EXPECTED_COUNTS and len(metas) != EXPECTED_COUNTS[spec]:
        raise AssertionError(f"{spec}: built {len(metas)} tensors, expected {EXPECTED_COUNTS[spec]}")
    return metas


def plan_chunks(sizes, buffer_size):
    """Chunk boundaries: close a chunk as soon as its running total > buffer_size."""
    chunks, cur, total = [], [], 0
    for i, n in enumerate(sizes):
        cur.append(i)
        total += n
        if total > buffer_size:
            chunks.append(cur)
            cur, total = [], 0
    if cur:
        chunks.append(cur)
    return chunks


# --------------------------------------------------------------------------- data
def gen_bytes(gen, seed, nbytes, device):
    """Deterministic random bytes for one tensor (same on both GPUs of one model)."""
    gen.manual_seed(seed)
    return torch.randint(0, 256, (nbytes,), dtype=torch.uint8, device=device, generator=gen)


def as_bytes(t):
    return t.view(-1).view(torch.uint8)


def typed_view(piece, dtype, shape):
    """uint8 slice -> typed tensor; clone only if the view is impossible (alignment)."""
    try:
        return piece.view(dtype).view(shape)
    except RuntimeError:
        return piece.clone().view(dtype).view(shape)


# --------------------------------------------------------------------------- algorithms
def producer_packed(tensors, streams, buffer_size):
    """Trainer side: pack tensors into fresh uint8 buffers and broadcast each."""
    it = iter(tensors)
    idx, done = 0, False
    while not done:
        stream = streams[idx]
        stream.synchronize()  # buffer slot free again
        with torch.cuda.stream(stream):
            parts, total = [], 0
            for t in it:
                parts.append(t.contiguous().view(torch.uint8).view(-1))
                total += parts[-1].numel()
                if total > buffer_size:
                    break
            else:
                done = True  # iterator exhausted: this is the last (partial) chunk
            if parts:
                packed = torch.cat(parts)
                dist.broadcast(packed, src=0)
        idx = (idx + 1) % len(streams)
    for s in streams:
        s.synchronize()


def consumer_packed(plan, metas, dests, streams, device):
    """Inference side: receive each chunk, split into views, load into destinations."""
    for ci, chunk in enumerate(plan):
        stream = streams[ci % len(streams)]
        stream.synchronize()
        with torch.cuda.stream(stream):
            sizes = [metas[i].nbytes for i in chunk]
            buf = torch.empty(sum(sizes), dtype=torch.uint8, device=device)
            dist.broadcast(buf, src=0)
            for i, piece in zip(chunk, buf.split(sizes)):
                m = metas[i]
                dests[i].copy_(typed_view(piece, m.dtype, m.shape))  # "load_weights"
    for s in streams:
        s.synchronize()


def producer_unpacked(tensors):
    for t in tensors:
        dist.broadcast(t, src=0)


def consumer_unpacked(metas, dests, device):
    for m, d in zip(metas, dests):
        tmp = torch.empty(m.shape, dtype=m.dtype, device=device)
        dist.broadcast(tmp, src=0)
        d.copy_(tmp)


# --------------------------------------------------------------------------- timing
def time_op(op, pre, warmup, iters, device):
    """nccl-tests-style timing; returns (event_us, wall_us) lists, max over ranks."""
    token = torch.zeros(1, device=device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = torch.zeros(iters, 2, dtype=torch.float64)
    for it in range(warmup + iters):
        if pre is not None:
            pre()
        dist.all_reduce(token)  # tiny collective as a barrier
        torch.cuda.synchronize(device)
        start.record()
        t0 = time.perf_counter()
        op()
        torch.cuda.synchronize(device)
        t1 = time.perf_counter()
        end.record()
        end.synchronize()
        if it >= warmup:
            times[it - warmup, 0] = start.elapsed_time(end) * 1e3
            times[it - warmup, 1] = (t1 - t0) * 1e6
    times = times.to(device)
    dist.all_reduce(times, op=dist.ReduceOp.MAX)
    times = times.cpu()
    return times[:, 0].tolist(), times[:, 1].tolist()


def measure(rank, device, op, pre, args):
    """Time op and record the peak-memory growth of both ranks."""
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    ev, wall = time_op(op, pre, args.warmup, args.iters, device)
    mem = torch.zeros(2, dtype=torch.int64, device=device)
    mem[rank] = torch.cuda.max_memory_allocated(device) - base
    dist.all_reduce(mem)
    return ev, wall, mem.tolist()


def all_sum(value, device):
    t = torch.tensor([value], dtype=torch.int64, device=device)
    dist.all_reduce(t)
    return int(t.item())


def run_raw(rank, device, total, args):
    """Baseline: one broadcast of a single contiguous uint8 buffer of `total` bytes."""
    buf = torch.empty(total, dtype=torch.uint8, device=device)
    if rank == 0:
        buf.fill_(RAW_PATTERN)
    pre = None if rank == 0 else (lambda: buf.fill_(POISON))
    ev, wall, mem = measure(rank, device, lambda: dist.broadcast(buf, src=0), pre, args)
    bad = 0
    if rank == 1:
        bad = int(any(not bool((p == RAW_PATTERN).all()) for p in buf.split(1 << 30)))
    nwrong = all_sum(bad, device)
    del buf
    torch.cuda.empty_cache()
    return dict(impl="raw-nccl", chunks=1, buffer=total, nbuf=1, ev=ev, wall=wall, mem=mem,
                nwrong=nwrong)


def run_config(rank, device, metas, state, impl, buffer_size, num_buffers, args):
    streams = [torch.cuda.Stream(device=device) for _ in range(max(num_buffers, 1))]
    if impl == "python-vllm-packed":
        plan = plan_chunks([m.nbytes for m in metas], buffer_size)
    else:
        plan = [[i] for i in range(len(metas))]  # unpacked: one "chunk" per tensor
    if impl == "python-vllm-packed":
        op = (lambda: producer_packed(state, streams, buffer_size)) if rank == 0 else \
             (lambda: consumer_packed(plan, metas, state, streams, device))
    else:
        op = (lambda: producer_unpacked(state)) if rank == 0 else \
             (lambda: consumer_unpacked(metas, state, device))

    def poison():
        for d in state:
            as_bytes(d).fill_(POISON)

    ev, wall, mem = measure(rank, device, op, None if rank == 0 else poison, args)
    bad = 0
    if rank == 1:  # bit-exact check against regenerated producer data
        gen = torch.Generator(device=device)
        for i, (m, d) in enumerate(zip(metas, state)):
            if not torch.equal(as_bytes(d), gen_bytes(gen, args.seed + i, m.nbytes, device)):
                bad += 1
    nwrong = all_sum(bad, device)
    torch.cuda.empty_cache()
    return dict(impl=impl, chunks=len(plan), buffer=buffer_size, nbuf=num_buffers, ev=ev,
                wall=wall, mem=mem, nwrong=nwrong)


def make_state(rank, metas, device, seed):
    """Producer: tensors filled with deterministic random data. Consumer: empty dests."""
    if rank == 0:
        gen = torch.Generator(device=device)
        return [gen_bytes(gen, seed + i, m.nbytes, device).view(m.dtype).view(m.shape)
                for i, m in enumerate(metas)]
    return [torch.empty(m.shape, dtype=m.dtype, device=device) for m in metas]


def check_rng(rank, device, seed):
    """The consumer's verification assumes both GPUs generate identical random bytes."""
    gen = torch.Generator(device=device)
    mine = gen_bytes(gen, seed - 1, 1 << 20, device)
    theirs = mine.clone()
    dist.broadcast(theirs, src=0)
    if all_sum(int(not torch.equal(mine, theirs)), device):
        raise RuntimeError("CUDA RNG differs between the GPUs; bit-exact check impossible")


# --------------------------------------------------------------------------- reporting
def stats(times):
    s = sorted(times)
    mean = statistics.fmean(s)
    sd = statistics.stdev(s) if len(s) > 1 else 0.0
    return {"min_us": s[0], "p50_us": statistics.median(s),
            "p99_us": s[max(0, math.ceil(0.99 * len(s)) - 1)], "stdev_us": sd,
            "cv_pct": 100.0 * sd / mean if mean > 0 else 0.0, "times_us": list(times)}


HEADER = (f"#{'size(B)':>14} {'tensors':>8} {'chunks':>7} {'buffer(B)':>12} {'nbuf':>5} "
          f"{'impl':>22} {'time(us)':>12} {'algbw(GB/s)':>12} {'busbw(GB/s)':>12} "
          f"{'#wrong':>7} {'vs_raw(%)':>10}")


def report(res, layout, metas, raw_us, env, args):
    """Print one table row (and append one JSON line) for a measurement. Rank 0 only."""
    size, st = sum(m.nbytes for m in metas), stats(res["ev"])
    t = st["p50_us"]
    algbw = size / t / 1e3 if t > 0 else 0.0  # bytes/us -> GB/s (1e9)
    ratio = raw_us / t if t > 0 else 0.0
    print(f" {size:>14} {len(metas):>8} {res['chunks']:>7} {res['buffer']:>12} {res['nbuf']:>5} "
          f"{res['impl']:>22} {t:>12.1f} {algbw:>12.2f} {algbw:>12.2f} {res['nwrong']:>7} "
          f"{ratio * 100:>10.1f}", flush=True)
    if args.json:
        rec = {"tool": "python-vllm-ref", "date": datetime.now(timezone.utc).isoformat(),
               **env, "layout": layout, "size": size, "count": len(metas), "type": "bfloat16",
               "root": 0, "chunks": res["chunks"], "buffer_size_bytes": res["buffer"],
               "num_buffers": res["nbuf"], "impl": res["impl"], "time": t,
               "wall_us": statistics.median(res["wall"]), "alg_bw": algbw, "bus_bw": algbw,
               "nwrong": res["nwrong"], "ratio_vs_raw": ratio, "stats": st,
               "mem_growth_bytes": {"producer": res["mem"][0], "consumer": res["mem"][1]},
               "warmup_iters": args.warmup, "iters": args.iters}
        with open(args.json, "a") as f:
            f.write(json.dumps(rec) + "\n")


# --------------------------------------------------------------------------- worker / launcher
def worker(args):
    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", rank=rank, world_size=int(os.environ["WORLD_SIZE"]),
                            device_id=device)
    env = {"device": torch.cuda.get_device_name(device), "torch": torch.__version__,
           "nccl_version": str(torch.cuda.nccl.version()), "cuda_runtime": torch.version.cuda}
    if rank == 0:
        print(f"# vllm_style_bench: {env}  NCCL_NVLS_ENABLE={os.environ['NCCL_NVLS_ENABLE']}")
        print(f"# warmup {args.warmup}, iters {args.iters}; time = median CUDA-event time, "
              f"max over 2 ranks; busbw = algbw (1->1 broadcast)", flush=True)
    check_rng(rank, device, args.seed)
    impls = ["python-vllm-unpacked"] if args.unpacked else ["python-vllm-packed"]
    configs = [(0, 0)] if args.unpacked else list(itertools.product(args.buffer_size,
                                                                    args.num_buffers))
    total_wrong = 0
    for layout in args.layout:
        metas = build_layout(layout)
        total = sum(m.nbytes for m in metas)
        if rank == 0:
            print(f"# layout {layout}: {len(metas)} tensors, {total} bytes "
                  f"({total / 2**30:.3f} GiB)\n{HEADER}", flush=True)
            print(f"[bench] {layout}: raw-nccl baseline", file=sys.stderr, flush=True)
        raw = run_raw(rank, device, total, args)  # before the model state is allocated
        raw_us = statistics.median(raw["ev"])
        total_wrong += raw["nwrong"]
        if rank == 0:
            report(raw, layout, metas, raw_us, env, args)
        state = make_state(rank, metas, device, args.seed)
        for impl, (bsize, nbuf) in itertools.product(impls, configs):
            if rank == 0:
                print(f"[bench] {layout}: {impl} buffer={bsize} nbuf={nbuf}",
                      file=sys.stderr, flush=True)
            res = run_config(rank, device, metas, state, impl, bsize, nbuf, args)
            total_wrong += res["nwrong"]
            if rank == 0:
                report(res, layout, metas, raw_us, env, args)
        del state
        torch.cuda.empty_cache()
    all_sum(0, device)  # final rendezvous before teardown
    dist.destroy_process_group()
    if total_wrong and rank == 0:
        print(f"# FAILED: {total_wrong} wrong tensors/buffers", file=sys.stderr, flush=True)
    return 1 if total_wrong else 0


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(argv):
    """Start rank 0 and rank 1 as subprocesses; return non-zero if either fails."""
    port, procs = free_port(), []
    for r in range(2):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r),
                   WORLD_SIZE="2", LOCAL_RANK=str(r))
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker",
                                       *argv], env=env))
    deadline = None
    try:
        while any(p.poll() is None for p in procs):
            if deadline is None and any(p.returncode not in (None, 0) for p in procs):
                deadline = time.monotonic() + 60  # peer failed; the other may hang in NCCL
            if deadline is not None and time.monotonic() > deadline:
                for p in procs:
                    if p.poll() is None:
                        p.kill()
            time.sleep(0.2)
    except KeyboardInterrupt:
        for p in procs:
            if p.poll() is None:
                p.kill()
        raise
    return 0 if all(p.returncode == 0 for p in procs) else 1


def int_list(text):
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    out = []
    for tok in text.split(","):
        tok = tok.strip().lower()
        mult = units.get(tok[-1:], 1)
        out.append(int(tok[:-1] if mult > 1 else tok) * mult)
    return out


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layout", default="dense8b", type=lambda s: s.split(","),
                   help="comma list of dense8b, moe30b, small1b, lora8b, synthetic:<count>x<bytes>")
    p.add_argument("--buffer-size", default=[1 << 30], type=int_list,
                   help="comma list of packing buffer sizes in bytes (K/M/G suffixes ok)")
    p.add_argument("--num-buffers", default=[2], type=int_list,
                   help="comma list of stream/buffer counts")
    p.add_argument("--unpacked", action="store_true",
                   help="one broadcast per tensor instead of packed chunks")
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--json", default=None, help="append one JSON object per measurement")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.iters < 1 or args.warmup < 0 or min(args.num_buffers) < 1 or min(args.buffer_size) < 1:
        p.error("need iters >= 1, warmup >= 0, num-buffers >= 1, buffer-size >= 1")
    for layout in args.layout:
        try:
            build_layout(layout)
        except (ValueError, AssertionError) as e:
            p.error(str(e))
    return args


def main():
    argv = sys.argv[1:]
    args = parse_args(argv)
    if args.worker:
        sys.exit(worker(args))
    sys.exit(launch([a for a in argv if a != "--worker"]))


if __name__ == "__main__":
    main()
