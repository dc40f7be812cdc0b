# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
"""Test double of vllm/envs.py: VLLM_PLUGINS (a comma-separated allowlist, or None)."""
import os


def __getattr__(name):
    if name == "VLLM_PLUGINS":
        v = os.environ.get("VLLM_PLUGINS")
        return None if v is None else v.split(",")
    raise AttributeError(name)
