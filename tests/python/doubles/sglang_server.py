# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
"""A double of a released SGLang server's weight-update routes (one TP rank), over plain
torch.distributed as SGLang's model runner does it (sgl-project/sglang
python/sglang/srt/managers/io_struct.py, the model runner's init_weights_update_group and
update_weights_from_distributed):

- POST /init_weights_update_group: joins the group named group_name at
  tcp://master_address:master_port as rank rank_offset + tp_rank through its own
  init_custom_process_group (the rendezvous store prefixed with the group name, then torch's
  process-group helper), answers {"success", "message"} (400 on failure);
- POST /update_weights_from_distributed: one torch.empty per (name, dtype, shape), each
  received by an async broadcast from rank 0 in order, all waited, then loaded; records
  weight_version;
- POST /destroy_weights_update_group;
- GET /double/state (test only): the loaded tensors' SHA-256, the weight version, the bodies.

The request bodies are checked by weightsync._wire (stricter than SGLang, which drops unknown
keys). Usage: sglang_server.py PORT; prints "ready" once listening."""

import datetime
import hashlib
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch
from torch.distributed import distributed_c10d as c10d

from weightsync import _wire

TIMEOUT = datetime.timedelta(seconds=30)
TP_RANK = 0


def init_custom_process_group(backend, init_method, world_size, rank, group_name):
    store, rank, world_size = next(c10d.rendezvous(init_method, rank, world_size,
                                                   timeout=TIMEOUT))
    store.set_timeout(TIMEOUT)
    store = c10d.PrefixStore(group_name, store)
    pg = c10d._new_process_group_helper(world_size, rank, [], c10d.Backend(backend), store,
                                        pg_options=None, group_name=group_name,
                                        timeout=TIMEOUT)
    c10d._pg_group_ranks[pg] = {i: i for i in range(world_size)}
    return pg


class State:
    lock = threading.Lock()
    groups = {}
    weights = {}
    weight_version = None
    bodies = []


def digest(t):
    data = t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
    return hashlib.sha256(data).hexdigest()


def init_group(body):
    req = _wire.sglang_init_group_request(dict(body, backend="nccl"))
    name = req["group_name"]
    if name in State.groups:
        return False, f"Process group with name {name} already exists."
    try:
        State.groups[name] = init_custom_process_group(
            body.get("backend", "nccl"),
            "tcp://%s:%d" % (req["master_address"], req["master_port"]),
            req["world_size"], req["rank_offset"] + TP_RANK, name)
        return True, "Succeeded to initialize custom process group."
    except Exception as e:  # noqa: BLE001 (SGLang answers it)
        return False, f"Failed to initialize custom process group: {e}."


def update(body):
    req = _wire.sglang_update_request(body)
    name = req["group_name"]
    if name not in State.groups:
        return False, (f"Group {name} not in {list(State.groups)}. "
                       "Please call `init_weights_update_group` first.")
    weights, handles = [], []
    for n, d, s in zip(req["names"], req["dtypes"], req["shapes"]):
        w = torch.empty(s, dtype=getattr(torch, d))
        handles.append(torch.distributed.broadcast(w, src=0, group=State.groups[name],
                                                   async_op=True))
        weights.append((n, w))
    for h in handles:
        h.wait()
    for n, w in weights:  # the model's load_weights
        State.weights[n] = w
    if req["weight_version"] is not None:
        State.weight_version = req["weight_version"]
    return True, "Succeeded to update parameter online from distributed."


def destroy(body):
    name = body.get("group_name", "weight_update_group")
    if name not in State.groups:
        return False, "The group to be destroyed does not exist."
    torch.distributed.destroy_process_group(State.groups.pop(name))
    return True, "Succeeded to destroy custom process group."


ROUTES = {"/init_weights_update_group": init_group,
          "/update_weights_from_distributed": update,
          "/destroy_weights_update_group": destroy}


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def answer(self, status, obj):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path != "/double/state":
            return self.answer(404, {"detail": "Not Found"})
        with State.lock:
            self.answer(200, {"digests": {n: digest(w) for n, w in State.weights.items()},
                              "weight_version": State.weight_version, "bodies": State.bodies})

    def do_POST(self):
        route = ROUTES.get(self.path)
        if route is None:
            return self.answer(404, {"detail": "Not Found"})
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        with State.lock:
            State.bodies.append({"route": self.path, "body": body})
            try:
                ok, msg = route(body)
            except Exception as e:  # noqa: BLE001 (a bad request: 400 with the reason)
                ok, msg = False, "%s: %s" % (type(e).__name__, e)
        self.answer(200 if ok else 400, {"success": ok, "message": msg})


def main():
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
    print("ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
