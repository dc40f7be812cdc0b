# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
"""Test double of sgl-project/sglang python/sglang/srt/weight_sync/external_receiver.py at
fd623da6fc46f9d1176f9e6c09fabe6cfd980a5a: the receiver context (frozen, keyword-only), and
build_weight_update_receiver: the allowlist checked before the import, the factory called with
the context, an object without receive/destroy refused (destroyed first)."""
from dataclasses import dataclass
from typing import Any, Dict, Optional

from sglang.srt.utils import dynamic_import


@dataclass(frozen=True, kw_only=True)
class WeightUpdateReceiverContext:
    model: Any
    device: Any
    tp_rank: int
    tp_size: int
    group_name: str
    master_address: str
    master_port: int
    world_size: int
    rank_offset: int
    init_payload: Optional[Dict[str, Any]] = None


def build_weight_update_receiver(path, allowed, context):
    if path not in (allowed or ()):
        raise ValueError(f"receiver {path!r} is not listed in --weight-update-receivers")
    receiver = dynamic_import(path)(context)
    if not callable(getattr(receiver, "receive", None)) or not callable(
            getattr(receiver, "destroy", None)):
        error = TypeError(f"receiver factory {path!r} must return an object with "
                          "receive(payload) and destroy()")
        destroy = getattr(receiver, "destroy", None)
        if callable(destroy):
            try:
                destroy()
            except Exception as destroy_error:
                raise error from destroy_error
        raise error
    return receiver
