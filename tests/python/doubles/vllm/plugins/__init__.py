# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
"""Test double of vllm/plugins/__init__.py (01425553bdbed63400efa72ff14a8f4ffe20bada): plugins
are the entry points of the group vllm.general_plugins; a plugin whose load() raises is logged
and skipped (the error is swallowed), and each loaded function is then called, unguarded."""
import logging
from importlib.metadata import entry_points

import vllm.envs as envs

logger = logging.getLogger(__name__)

DEFAULT_PLUGINS_GROUP = "vllm.general_plugins"

plugins_loaded = False


def load_plugins_by_group(group):
    allowed_plugins = envs.VLLM_PLUGINS
    discovered_plugins = entry_points(group=group)
    if len(discovered_plugins) == 0:
        logger.debug("No plugins for group %s found.", group)
        return {}
    plugins = {}
    for plugin in discovered_plugins:
        if allowed_plugins is None or plugin.name in allowed_plugins:
            try:
                func = plugin.load()
                plugins[plugin.name] = func
            except Exception:
                logger.exception("Failed to load plugin %s", plugin.name)
    return plugins


def load_general_plugins():
    global plugins_loaded
    if plugins_loaded:
        return
    plugins_loaded = True
    plugins = load_plugins_by_group(group=DEFAULT_PLUGINS_GROUP)
    for func in plugins.values():
        func()
