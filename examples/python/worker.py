# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
"""A PyTorch inference worker: serves the demo MLP's predictions over HTTP and takes new weights
through vLLM's weight-transfer routes, with weightsync's WorkerEngine underneath (the Python twin
of examples/inference_server.cpp; the C++ trainer and examples/python/trainer.py drive it alike).

  python3 examples/python/worker.py [--port 8000] [--backend host] [--timeout-s 30]

Routes: POST /init_weight_transfer_engine {"init_info"}, /start_weight_update,
/update_weights {"update_info"}, /finish_weight_update {"weight_version"}, /pause, /resume,
/shutdown, /v1/predict {"inputs": [[x, y], ...], "logits": bool}; GET /is_paused,
/get_world_size, /weight_info. A sync lands in a staging copy of the fused parameters: each
HuggingFace-style piece the trainer sends is received straight into its rows (destinations, no
copy), and /finish_weight_update makes the staging copy live."""

import argparse
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import torch

import weightsync as ws

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import demo_mlp  # noqa: E402


class Server:
    def __init__(self, backend, timeout):
        self.engine = ws.WorkerEngine(backend, timeout=timeout)
        self.engine.set_hooks(pause=lambda m: self.say("paused (%s)" % m),
                              resume=lambda: self.say("resumed"),
                              failure=lambda why: self.say("update failed: %s" % why))
        self.lock = threading.Lock()
        self.live = demo_mlp.init_params(torch, seed=12345)
        self.staging = None
        self.dests = None
        self.generation = 0

    @staticmethod
    def say(line):
        print("[py-worker] " + line, flush=True)

    def start(self):
        with self.lock:
            self.staging = {k: v.clone() for k, v in self.live.items()}
        # every piece straight into its rows of the staging copy; fused names into the whole
        self.dests = dict(demo_mlp.piece_views(self.staging))
        self.dests.update(self.staging)
        self.engine.start_weight_update()

    def update(self, info):
        def load(weights):  # tensors without a destination: none expected from the demo
            raise ws.ConfigError("[weightsync.config] %s: not a parameter of this model"
                                 % weights[0][0])
        return self.engine.update_weights(info, load, destinations=self.dests)

    def finish(self, version):
        self.engine.finish_weight_update(version)
        with self.lock:
            self.live, self.staging = self.staging, None
            self.generation += 1
        self.say("now serving weights '%s'" % self.engine.weight_version())

    def predict(self, body):
        with self.lock:
            params = {k: v.numpy() for k, v in self.live.items()}
            version, gen = self.engine.weight_version(), self.generation
        logits = demo_mlp.forward(params, body["inputs"])
        out = {"classes": [int(c) for c in logits.argmax(axis=1)], "weight_version": version,
               "generation": gen, "paused": self.engine.is_paused()}
        if body.get("logits"):
            out["logits"] = [[float(v) for v in row] for row in logits]
        return out


def handler(server, stop):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def reply(self, code, obj):
            data = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def body(self):
            n = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(n) if n else b""
            return json.loads(raw) if raw.strip() else {}

        def do_GET(self):
            e = server.engine
            routes = {"/is_paused": lambda: {"is_paused": e.is_paused()},
                      "/get_world_size": lambda: {"world_size": e.world_size()},
                      "/weight_info": lambda: {"weight_version": e.weight_version()}}
            path = urlparse(self.path).path
            if path not in routes:
                return self.reply(404, {"error": "no route " + path})
            self.reply(200, routes[path]())

        def do_POST(self):
            url = urlparse(self.path)
            try:
                body = self.body()
                out = self.route(url.path, body, parse_qs(url.query))
            except ws.ConfigError as x:
                return self.reply(400, {"error": str(x), "field": x.field})
            except ws.StateError as x:
                return self.reply(409, {"error": str(x)})
            except Exception as x:  # noqa: BLE001 (the trainer sees the reason)
                return self.reply(500, {"error": "%s: %s" % (type(x).__name__, x)})
            if out is None:
                return self.reply(404, {"error": "no route " + url.path})
            self.reply(200, out)

        def route(self, path, body, query):
            e = server.engine
            if path == "/init_weight_transfer_engine":
                e.init_transfer_engine(body["init_info"])
                server.say("joined the transfer group as rank %d of %d" % (e.rank(), e.world_size()))
                return {"status": "ok"}
            if path == "/start_weight_update":
                server.start()
                return {"status": "ok"}
            if path == "/update_weights":
                return {"status": "ok", "stats": server.update(body["update_info"])}
            if path == "/finish_weight_update":
                server.finish(body.get("weight_version"))
                return {"status": "ok"}
            if path == "/pause":
                e.pause(body.get("mode") or query.get("mode", ["keep"])[0])
                return {"status": "ok"}
            if path == "/resume":
                e.resume()
                return {"status": "ok"}
            if path == "/v1/predict":
                return server.predict(body)
            if path == "/shutdown":
                stop.set()
                return {"status": "stopping"}
            return None
    return Handler


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--backend", default="host")
    ap.add_argument("--timeout-s", type=float, default=30.0)
    a = ap.parse_args()
    server = Server(a.backend, a.timeout_s)
    stop = threading.Event()
    http = ThreadingHTTPServer((a.host, a.port), handler(server, stop))
    http.daemon_threads = True
    threading.Thread(target=http.serve_forever, daemon=True).start()
    server.say("serving a random MLP on http://%s:%d (backend %s)" % (a.host, http.server_port,
                                                                       a.backend))
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    http.shutdown()
    server.engine.shutdown()
    server.say("stopped")


if __name__ == "__main__":
    main()
