# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
"""Test double of vllm/config/weight_transfer.py: the config takes only `backend` (any other key
is refused, as vLLM's config class refuses it)."""
from dataclasses import dataclass


@dataclass
class WeightTransferConfig:
    backend: str = "nccl"
