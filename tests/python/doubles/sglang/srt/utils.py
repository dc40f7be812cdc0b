# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
"""Test double of sglang.srt.utils: dynamic_import("package.module.attr")."""
import importlib


def dynamic_import(func_path):
    parts = func_path.split(".")
    if len(parts) < 2:
        raise ValueError("func_path should contain both module name and func name "
                         "(such as 'module.func')")
    module = importlib.import_module(".".join(parts[:-1]))
    return getattr(module, parts[-1])
