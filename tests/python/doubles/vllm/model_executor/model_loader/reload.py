# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
"""Test double of vllm/model_executor/model_loader/reload: the layerwise reload's two calls,
recorded on the model (model.reload_calls)."""


def initialize_layerwise_reload(model):
    model.__dict__.setdefault("reload_calls", []).append("initialize")


def finalize_layerwise_reload(model, model_config):
    model.__dict__.setdefault("reload_calls", []).append(("finalize", model_config))
