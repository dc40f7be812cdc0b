# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
"""The examples, end to end over HTTP and the host backend, every answer checked bit for bit:
the Python trainer (examples/python/trainer.py) into the Python worker (examples/python/worker.py)
and into the C++ example server (examples/inference_server), and the C++ example trainer
(examples/trainer) into the Python worker."""

import os
import subprocess
import sys

import pytest

from wstest import TIMEOUT, env, free_port

SOURCE = os.environ.get("WEIGHTSYNC_SOURCE_DIR",
                        os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
EXAMPLES = os.path.join(SOURCE, "examples", "python")
CPP_SERVER = os.environ.get("WEIGHTSYNC_INFERENCE_SERVER")
CPP_TRAINER = os.environ.get("WEIGHTSYNC_EXAMPLE_TRAINER")


class Served:
    """A server process, up once it printed its "serving" line."""

    def __init__(self, cmd):
        self.p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  env=env(), text=True)
        self.lines = []
        while True:
            line = self.p.stdout.readline()
            if not line:
                raise RuntimeError("the server exited: %s" % "".join(self.lines))
            self.lines.append(line)
            if "serving" in line:
                return

    def stop(self):
        import urllib.request  # noqa: PLC0415
        try:
            urllib.request.urlopen(urllib.request.Request(self.url + "/shutdown", data=b"{}",
                                                          method="POST"), timeout=5).read()
        except OSError:
            pass
        try:
            out, _ = self.p.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            self.p.kill()
            out, _ = self.p.communicate()
        self.lines.append(out)
        return "".join(self.lines)


def python_worker():
    port = free_port()
    s = Served([sys.executable, os.path.join(EXAMPLES, "worker.py"), "--port", str(port),
                "--timeout-s", str(TIMEOUT)])
    s.url = "http://127.0.0.1:%d" % port
    return s


def cpp_server():
    port = free_port()
    s = Served([CPP_SERVER, "--port", str(port), "--threads", "4"])
    s.url = "http://127.0.0.1:%d" % port
    return s


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env(),
                       text=True, timeout=TIMEOUT * 2)
    return r.returncode, r.stdout


def python_trainer(*urls, syncs=2):
    return run([sys.executable, os.path.join(EXAMPLES, "trainer.py"), "--server", ",".join(urls),
                "--syncs", str(syncs), "--timeout-s", str(TIMEOUT)])


def test_python_trainer_into_two_python_workers():
    workers = [python_worker(), python_worker()]
    try:
        rc, out = python_trainer(*[w.url for w in workers])
    finally:
        logs = [w.stop() for w in workers]
    assert rc == 0, out + "".join(logs)
    assert out.count("logits bit-identical to the trainer's") == 4, out
    for log in logs:
        assert "now serving weights 'py-step-2'" in log, log


@pytest.mark.skipif(not CPP_SERVER, reason="examples/inference_server not built (cpp-httplib)")
def test_python_trainer_into_the_cpp_server():
    s = cpp_server()
    try:
        rc, out = python_trainer(s.url)
    finally:
        log = s.stop()
    assert rc == 0, out + log
    assert out.count("logits bit-identical to the trainer's") == 2, out
    assert "now serving weights 'py-step-2'" in log, log


@pytest.mark.skipif(not CPP_TRAINER, reason="examples/trainer not built (cpp-httplib)")
def test_cpp_trainer_into_the_python_worker():
    w = python_worker()
    try:
        rc, out = run([CPP_TRAINER, "--server", w.url, "--syncs", "2", "--timeout-s",
                       str(int(TIMEOUT))])
    finally:
        log = w.stop()
    assert rc == 0, out + log
    assert out.count("answers match the trainer's") == 2, out
    assert "now serving weights 'step-2'" in log, log
