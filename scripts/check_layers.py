#!/usr/bin/env python3
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
"""Checks the include graph of include/weightsync against the layers (docs/ARCHITECTURE.md).

  python3 scripts/check_layers.py [--cxx COMPILER [--define NAME=VALUE ...] [-I DIR ...]]

1. Direct includes (parsed from the #include lines, conditional ones too): no header includes a
   layer above its own. Low to high (LAYERS): base (top-level headers, detail/, kernels/, and the
   engines' neutral types), execution (the pipeline, cuda/'s primitives, the device policies),
   transports (host/, nccl/, ipc/, c10d/), the engine interfaces (engine/backend.hpp,
   transport.hpp, registry.hpp, ...), features (loading/, safetensors/, fp8/, delta/ and their
   cuda/ launchers) and backends (<transport>/backend.hpp: registration), the engines
   (engine/worker.hpp, trainer.hpp, shadow.hpp), vllm/ (vLLM's JSON and HTTP).
   Umbrella and forwarding headers may include anything. The few known exceptions are listed in
   KNOWN with the reason and the fix; a new edge that breaks a rule fails the check.
2. With --cxx: the generic core (packed_broadcast.hpp, sharded_broadcast.hpp, the pipeline and
   every engine/ header) pulls in nothing of nlohmann_json: each is preprocessed alone (-M, as the
   build would with the given definitions) and its dependency list may name no nlohmann header.
Exit status 1 with one line per violation.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INC = os.path.join(ROOT, "include")
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"](weightsync/[^>"]+)[>"]', re.M)

# Layers, low to high; a header's layer is the first pattern that matches its path.
LAYERS = [
    ("neutral types", 0, re.compile(r"^weightsync/engine/(group_info|init_request|update_request|"
                                    r"adapter)\.hpp$")),
    ("engine", 5, re.compile(r"^weightsync/engine/(worker|trainer|shadow)\.hpp$")),
    ("engine interface", 3, re.compile(r"^weightsync/engine/")),
    ("backend", 4, re.compile(r"^weightsync/(host|nccl|ipc)/backend\.hpp$")),
    ("feature", 4, re.compile(r"^weightsync/(loading|safetensors|fp8|delta)/|"
                              r"^weightsync/cuda/(gather|delta[a-z_]*|fp8[a-z_]*)\.hpp$")),
    ("vllm", 6, re.compile(r"^weightsync/vllm/")),
    ("execution", 1, re.compile(r"^weightsync/(pipeline/|packed_broadcast\.hpp$|"
                                r"sharded_broadcast\.hpp$|transfer_options\.hpp$|"
                                r"workspace\.hpp$|cuda/|host/device_policy\.hpp$)")),
    ("transport", 2, re.compile(r"^weightsync/(host|nccl|ipc|c10d)/")),
    ("base", 0, re.compile(r"^weightsync/([a-z_0-9]+\.hpp|detail/|kernels/)")),
]
# Umbrellas: they gather a subsystem for users, above every layer.
UMBRELLAS = {"weightsync/weightsync.hpp", "weightsync/engine.hpp", "weightsync/backends.hpp",
             "weightsync/vllm.hpp", "weightsync/ipc.hpp", "weightsync/loading.hpp",
             "weightsync/safetensors.hpp"}
# Known edges that break a rule, with why they are there and what removes them.
KNOWN = {}
NO_NLOHMANN = re.compile(r"^weightsync/(engine/[^/]+\.hpp|packed_broadcast\.hpp|"
                         r"sharded_broadcast\.hpp|transfer_options\.hpp|workspace\.hpp|"
                         r"pipeline/.+\.hpp)$")


def headers():
    out = []
    for d, _, files in os.walk(os.path.join(INC, "weightsync")):
        for f in files:
            if f.endswith(".hpp"):
                out.append(os.path.relpath(os.path.join(d, f), INC).replace(os.sep, "/"))
    return sorted(out)


def layer(h):
    for name, rank, pat in LAYERS:
        if pat.search(h):
            return name, rank
    return "base", 0


# Written by the build (cmake/WeightsyncPtx.cmake), not in the tree: base layer, include nothing.
GENERATED = re.compile(r"^weightsync/cuda/detail/[a-z_0-9]+_ptx\.hpp$")


def is_forwarder(text):
    return "@deprecated Moved to" in text or "@deprecated Split" in text


def check_graph(hs):
    bad = []
    used_known = set()
    for h in hs:
        text = open(os.path.join(INC, h), encoding="utf-8").read()
        if h in UMBRELLAS or is_forwarder(text):
            continue
        name, rank = layer(h)
        for inc in INCLUDE.findall(text):
            if GENERATED.search(inc):
                continue
            if not os.path.exists(os.path.join(INC, inc)):
                bad.append(f"{h}: includes {inc}, which does not exist")
                continue
            if inc in UMBRELLAS:
                if name != "vllm":
                    bad.append(f"{h} ({name}): includes the umbrella {inc}")
                continue
            iname, irank = layer(inc)
            itext = open(os.path.join(INC, inc), encoding="utf-8").read()
            if is_forwarder(itext):
                bad.append(f"{h}: includes the deprecated forwarding header {inc}")
            elif irank > rank:
                if (h, inc) in KNOWN:
                    used_known.add((h, inc))
                else:
                    bad.append(f"{h} ({name}): includes {inc} ({iname}), a higher layer")
    for edge, why in KNOWN.items():
        if edge not in used_known:
            bad.append(f"KNOWN exception {edge[0]} -> {edge[1]} no longer exists: remove it "
                       f"from scripts/check_layers.py ({why})")
    return bad


def check_nlohmann(hs, cxx, defines, incs):
    bad = []
    with tempfile.TemporaryDirectory() as tmp:
        for h in hs:
            if not NO_NLOHMANN.search(h):
                continue
            tu = os.path.join(tmp, "tu.cpp")
            with open(tu, "w") as f:
                f.write(f"#include <{h}>\n")
            cmd = [cxx, "-std=c++20", "-M", "-I", INC] + [f"-I{i}" for i in incs] + \
                  [f"-D{d}" for d in defines] + [tu]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                bad.append(f"{h}: does not preprocess alone: {r.stderr.strip()[:300]}")
                continue
            deps = r.stdout.replace("\\\n", " ").split()
            hits = [d for d in deps if "nlohmann" in d]
            if hits:
                bad.append(f"{h}: pulls in nlohmann_json ({os.path.basename(hits[0])}, "
                           f"{len(hits)} headers)")
    return bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cxx")
    ap.add_argument("--define", action="append", default=[])
    ap.add_argument("-I", dest="incs", action="append", default=[])
    a = ap.parse_args()
    hs = headers()
    bad = check_graph(hs)
    if a.cxx:
        bad += check_nlohmann(hs, a.cxx, a.define, a.incs)
    for b in bad:
        print("check_layers:", b)
    n = sum(1 for h in hs if NO_NLOHMANN.search(h))
    print(f"check_layers: {len(hs)} headers, {len(KNOWN)} known exceptions"
          + (f", {n} core headers preprocessed" if a.cxx else "")
          + (": OK" if not bad else f": {len(bad)} violations"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
