# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
"""Test double of vllm/config/parallel.py: the fields a weight-transfer engine reads."""
from dataclasses import dataclass


@dataclass
class ParallelConfig:
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    data_parallel_size: int = 1
    data_parallel_rank: int = 0
    rank: int = 0

    @property
    def world_size(self):
        return self.tensor_parallel_size * self.pipeline_parallel_size
