#!/usr/bin/env python3
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
"""Turns weightsync-bench (and vllm_style_bench.py) JSON lines into PNG charts with gnuplot.

  python3 benchmarks/plot.py FILE.jsonl [FILE.jsonl ...] --out DIR [--memory contiguous|scattered]

Charts:
  bw_vs_buffer_<layout>.png  algorithm bandwidth against buffer size B, one line per (impl, K),
                             and raw ncclBroadcast as a horizontal line (same runs)
  latency_curve.png          synthetic layouts (scripts/latency-curve.sh): time against bytes per
                             sync, log-log, one line per (backend, tensor count) for this library
                             and its baseline (raw ncclBroadcast, or one device copy for ipc)
  time_vs_raw.png            per layout: raw ncclBroadcast and each implementation's best time (ms),
                             the IPC backends (--backend ipc/p2p) included, with ipc's baseline: one
                             device-local copy of the same bytes
Rows are grouped by the GPU they were measured on (each row's "device", else its device lines):
one set of charts per device, never two devices in one chart. With rows of several devices each
device's charts go to a subfolder of --out named after it (h200/, h100_80gb_hbm3/); with one,
straight into --out.

Units: GB/s and "bytes" axes are decimal (1 GB = 1e9 B), as nccl-tests reports them; the
log-scale byte axis has its ticks at powers of ten and labels them in decimal units (1 kB, 1 MB,
1 GB). The buffer-size axis is in MiB (2^20 B) with ticks at powers of two.

Needs gnuplot (Debian/Ubuntu: apt-get install gnuplot-nox; it says so and exits 2 without it).
Only the Python standard library is used.
"""
import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys


def load(paths, memory):
    rows = []
    for p in paths:
        with open(p) as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                r = json.loads(line)
                if memory and r.get("memory", "contiguous") != memory and r.get("tool") == "weightsync-bench":
                    continue
                rows.append(r)
    return rows


def machine(rows):
    """The GPUs the rows were measured on, e.g. '2x H200' (from each row's device lines)."""
    seen = set()
    for r in rows:
        gpus, names = set(), set()
        for d in r.get("devices") or []:
            m = re.search(r"\[([0-9a-fA-F:.]+)\]\s+(?:NVIDIA\s+)?(.*)$", str(d))
            if m:
                gpus.add(m.group(1))
                names.add(m.group(2).strip())
        if names:
            seen.add(f"{len(gpus)}x {'/'.join(sorted(names))}")
    return ", ".join(sorted(seen)) or "unknown GPUs"


def device_of(r):
    """The GPU a row was measured on ('NVIDIA H200'), from its "device" or its device lines."""
    if r.get("device"):
        return str(r["device"]).strip()
    for d in r.get("devices") or []:
        m = re.search(r"\[[0-9a-fA-F:.]+\]\s+(.*)$", str(d))
        if m:
            return m.group(1).strip()
    return "unknown"


def slug(device):
    """'NVIDIA H100 80GB HBM3' -> 'h100_80gb_hbm3'."""
    d = re.sub(r"^NVIDIA\s+", "", device)
    return re.sub(r"[^a-z0-9]+", "_", d.lower()).strip("_") or "unknown"


def gnuplot(script):
    subprocess.run(["gnuplot"], input=script.encode(), check=True)


def bw_vs_buffer(rows, out):
    by_layout = collections.defaultdict(list)
    for r in rows:
        # one launch mode per chart: the default (non-blocking) NCCL launches
        if (r.get("tool") == "weightsync-bench" and r.get("backend", "nccl") == "nccl"
                and not r.get("nccl_blocking", False)):
            by_layout[r["layout"]].append(r)
    made = []
    for layout, rs in by_layout.items():
        raw = [r["alg_bw"] for r in rs if r["impl"] == "raw-nccl"]
        series = collections.defaultdict(dict)
        for r in rs:
            if r["impl"] == "raw-nccl" or not r.get("buffer_size_bytes"):
                continue
            key = f'{r["impl"]} K={r["num_buffers"]}'
            b = r["buffer_size_bytes"]
            series[key][b] = max(series[key].get(b, 0), r["alg_bw"])
        series = {k: v for k, v in series.items() if len(v) >= 2}
        if not series:
            continue
        dat = os.path.join(out, f"bw_vs_buffer_{layout}.dat")
        with open(dat, "w") as f:
            for i, (k, pts) in enumerate(sorted(series.items())):
                f.write(f'"{k}"\n')
                for b in sorted(pts):
                    f.write(f"{b / 2**20:g} {pts[b]:.2f}\n")
                f.write("\n\n")
        png = os.path.join(out, f"bw_vs_buffer_{layout}.png")
        plots = [f'"{dat}" index {i} using 1:2 with linespoints title columnheader(1)'
                 for i in range(len(series))]
        if raw:
            plots.append(f"{max(raw):.2f} with lines dashtype 2 lw 2 title 'raw ncclBroadcast'")
        gnuplot(f"""set terminal pngcairo size 900,540
set output '{png}'
set title 'weightsync {layout}: bandwidth vs buffer size B ({machine(rows)})'
set xlabel 'buffer size B (MiB)'
set ylabel 'algbw (GB/s)'
set logscale x 2
set key bottom right
set grid
plot {', '.join(plots)}
""")
        made.append(png)
    return made


def latency_curve(rows, out):
    series = collections.defaultdict(dict)  # (label) -> bytes -> us
    for r in rows:
        if r.get("tool") != "weightsync-bench" or not r["layout"].startswith("synthetic:"):
            continue
        backend = r.get("backend", "nccl")
        tensors = r["count"]
        if r["impl"] in ("raw-nccl", "raw-copy"):
            if tensors != 1:
                continue  # the baseline moves the same bytes as one buffer: one line per backend
            label = ("raw ncclBroadcast" if r["impl"] == "raw-nccl" else "raw device copy") + f" ({backend} run)"
        elif r["impl"] == "zerocopy":
            label = f"weightsync {backend}, {tensors} tensor" + ("s" if tensors > 1 else "")
        else:
            continue
        cur = series[label].get(r["size"])
        series[label][r["size"]] = r["time"] if cur is None else min(cur, r["time"])
    if not series:
        return []
    dat = os.path.join(out, "latency_curve.dat")
    with open(dat, "w") as f:
        for label, pts in sorted(series.items()):
            f.write(f'"{label}"\n')
            for b in sorted(pts):
                f.write(f"{b} {pts[b]:.3f}\n")
            f.write("\n\n")
    png = os.path.join(out, "latency_curve.png")
    plots = [f'"{dat}" index {i} using 1:2 with linespoints title columnheader(1)' for i in range(len(series))]
    gnuplot(f"""set terminal pngcairo size 1000,620
set output '{png}'
set title 'time per sync against bytes per sync, defaults ({machine(rows)}, lower is better)'
set xlabel 'bytes per sync (decimal: 1 kB = 1000 B)'
set ylabel 'time (us)'
set logscale xy
set format x '%.0s %cB'
set key top left
set grid
plot {', '.join(plots)}
""")
    return [png]


def time_vs_raw(rows, out):
    best = collections.defaultdict(dict)  # layout -> impl -> ms
    for r in rows:
        impl = r["impl"]
        backend = r.get("backend", "nccl")
        if r["layout"].startswith("synthetic:"):
            continue  # latency_curve.png
        if r.get("tool") == "python-vllm-ref":
            if impl == "raw-nccl":
                continue  # the same baseline as weightsync-bench's, measured again
            impl = "python vLLM-style " + impl.replace("python-vllm-", "")
        elif impl == "raw-copy":
            impl = "raw device copy (1 GPU)"
        elif impl == "raw-ipc":
            impl = "raw ipc transfer (1 GPU)"
        elif impl != "raw-nccl":
            mode = impl.split("+")[0]
            if mode.startswith("unpacked") or (backend != "nccl" and mode != "zerocopy"):
                continue  # keep the chart readable: the tables have every mode
            impl = "weightsync " + (backend + " " if backend != "nccl" else "") + mode
        ms = r["time"] / 1000.0
        cur = best[r["layout"]].get(impl)
        best[r["layout"]][impl] = ms if cur is None else min(cur, ms)
    impls = sorted({i for d in best.values() for i in d})
    layouts = sorted(best)
    if not layouts:
        return []
    dat = os.path.join(out, "time_vs_raw.dat")
    with open(dat, "w") as f:
        f.write("layout " + " ".join(f'"{i}"' for i in impls) + "\n")
        for l in layouts:
            f.write(l + " " + " ".join(f"{best[l].get(i, float('nan')):.4f}" for i in impls) + "\n")
    png = os.path.join(out, "time_vs_raw.png")
    cols = ", ".join(f"'' using {j + 2}:xtic(1) title columnheader({j + 2})" for j in range(1, len(impls)))
    gnuplot(f"""set terminal pngcairo size 1250,560
set output '{png}'
set title 'time per full sync, best of each implementation ({machine(rows)}, lower is better)'
set ylabel 'ms (log scale)'
set logscale y
set style data histogram
set style histogram cluster gap 1
set style fill solid 0.8 border -1
set key outside right top
set grid ytics
plot '{dat}' using 2:xtic(1) title columnheader(2){', ' + cols if cols else ''}
""")
    return [png]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+")
    ap.add_argument("--out", default=".")
    ap.add_argument("--memory", default="contiguous", help="contiguous, scattered, or '' for both")
    args = ap.parse_args()
    if not shutil.which("gnuplot"):
        print("plot.py: needs gnuplot, which is not installed or not on PATH "
              "(Debian/Ubuntu: apt-get install gnuplot-nox)", file=sys.stderr)
        sys.exit(2)
    os.makedirs(args.out, exist_ok=True)
    rows = load(args.files, args.memory)
    groups = collections.defaultdict(list)
    for r in rows:
        groups[device_of(r)].append(r)
    made = []
    for device, rs in sorted(groups.items()):
        out = args.out
        if len(groups) > 1:  # one folder per device: never two devices in one chart
            out = os.path.join(args.out, slug(device))
            os.makedirs(out, exist_ok=True)
        made += bw_vs_buffer(rs, out) + time_vs_raw(rs, out) + latency_curve(rs, out)
    for m in made:
        print("wrote", m)


if __name__ == "__main__":
    main()
