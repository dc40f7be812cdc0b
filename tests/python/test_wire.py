# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
"""weightsync._wire: the C++ writers and readers of vLLM's and SGLang's versioned JSON from
Python. The golden files (tests/golden/) are read and written back unchanged, and what a
version refuses is a ConfigError that names the key."""

import json
import os

import pytest

ws = pytest.importorskip("weightsync")
from weightsync import _wire  # noqa: E402

ROOT = os.environ.get("WEIGHTSYNC_SOURCE_DIR",
                      os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def golden(*path):
    with open(os.path.join(ROOT, "tests", "golden", *path)) as f:
        return json.load(f)


@pytest.mark.parametrize("version,init,update", [
    ("vllm-0.27", "init_info.json", "update_info.json"),
    ("vllm-0.28", "init_info_tcp.json", "update_info.json"),
])
def test_vllm_golden_round_trip(version, init, update):
    i = golden(version, init)
    u = golden(version, update)
    lib_init = _wire.read_init_info(i, version)
    lib_update = _wire.read_update_info(json.dumps(u), version)  # text as a route carries it
    if version == "vllm-0.27":  # the packing rides each update: the init's takes it there
        lib_init.update({k: lib_update[k] for k in
                         ("packed", "packed_buffer_size_bytes", "packed_num_buffers")})
    assert _wire.write_init_info(lib_init, version) == i
    assert _wire.write_update_info(lib_update, version, lib_init) == u


def test_uid_init_and_default_version():
    i = golden("vllm-0.28", "init_info_uid.json")
    assert _wire.default_version == "vllm-0.28"
    assert _wire.write_init_info(_wire.read_init_info(i)) == i
    with pytest.raises(ws.ConfigError) as e:
        _wire.write_init_info(_wire.read_init_info(i), "vllm-0.27")
    assert e.value.field == "nccl_unique_id_b64"


def test_sglang_golden():
    g = golden("sglang", "init_weights_update_group.json")
    assert _wire.sglang_init_group_request(g) == g
    u = golden("sglang", "update_weights_from_distributed.json")
    assert _wire.sglang_update_request(u) == u


def test_refusals_name_the_key():
    u = {"names": ["a"], "dtype_names": ["float32"], "shapes": [[2]], "packed": True}
    with pytest.raises(ws.ConfigError, match="vLLM >= 0.28") as e:
        _wire.read_update_info(u, "vllm-0.28")
    assert e.value.field == "packed"
    with pytest.raises(ws.ConfigError) as e:
        _wire.sglang_update_request({"names": [], "dtypes": [], "shapes": [], "flush_cahce": 1})
    assert e.value.field == "flush_cahce"
    with pytest.raises(ws.ConfigError) as e:
        _wire.read_init_info({}, "vllm-0.29")
    assert e.value.field == "version"
    with pytest.raises(ws.ConfigError) as e:
        _wire.read_init_info("{not json", "vllm-0.28")
    assert e.value.field == "init_info"
