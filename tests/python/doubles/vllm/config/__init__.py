# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
"""Test double of vllm.config: VllmConfig (parallel_config, model_config), ParallelConfig,
WeightTransferConfig."""
from dataclasses import dataclass, field
from typing import Any

from vllm.config.parallel import ParallelConfig
from vllm.config.weight_transfer import WeightTransferConfig


@dataclass
class VllmConfig:
    parallel_config: ParallelConfig = field(default_factory=ParallelConfig)
    model_config: Any = None
    weight_transfer_config: Any = None


__all__ = ["ParallelConfig", "VllmConfig", "WeightTransferConfig"]
