# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
"""Test double of vllm/distributed/weight_transfer/base.py at
02f250b03f38822ccdb63f27a3005d10ca81f385: the worker-side classes, with upstream's names,
signatures, abstract methods and parse/update flow."""
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import torch

from vllm.config.parallel import ParallelConfig  # noqa: F401 (as upstream imports it)
from vllm.config.weight_transfer import WeightTransferConfig  # noqa: F401

TInitInfo = TypeVar("TInitInfo", bound="WeightTransferInitInfo")
TUpdateInfo = TypeVar("TUpdateInfo", bound="WeightTransferUpdateInfo")


@dataclass
class WeightTransferInitInfo(ABC):  # noqa: B024
    pass


@dataclass
class WeightTransferUpdateInfo(ABC):  # noqa: B024
    pass


@dataclass
class WeightTransferInitRequest:
    init_info: dict = field(default_factory=dict)


@dataclass
class WeightTransferUpdateRequest:
    update_info: dict = field(default_factory=dict)


class WeightTransferEngine(ABC, Generic[TInitInfo, TUpdateInfo]):
    init_info_cls: type
    update_info_cls: type

    supports_draft_weight_update: bool = True

    def __init__(self, config, vllm_config, device, model) -> None:
        self.config = config
        self.vllm_config = vllm_config
        self.parallel_config = vllm_config.parallel_config
        self.model_config = vllm_config.model_config
        self.device = device
        self.model = model
        self._default_model_config = self.model_config
        self._default_model = model

    def set_weight_update_target(self, model, model_config) -> None:
        self.model = model
        self.model_config = model_config

    def reset_weight_update_target(self) -> None:
        self.model = self._default_model
        self.model_config = self._default_model_config

    def parse_init_info(self, init_dict: dict) -> Any:
        try:
            return self.init_info_cls(**init_dict)
        except TypeError as e:
            raise ValueError(f"Invalid init_info for {self.__class__.__name__}: {e}") from e

    def parse_update_info(self, update_dict: dict) -> Any:
        try:
            return self.update_info_cls(**update_dict)
        except TypeError as e:
            raise ValueError(f"Invalid update_info for {self.__class__.__name__}: {e}") from e

    @abstractmethod
    def init_transfer_engine(self, init_info) -> None:
        raise NotImplementedError

    @abstractmethod
    def start_weight_update(self) -> None:
        raise NotImplementedError

    @abstractmethod
    def finish_weight_update(self) -> None:
        raise NotImplementedError

    def update_weights(self, update_info: dict) -> None:
        typed_update_info = self.parse_update_info(update_info)
        self.receive_weights(typed_update_info)
        # (upstream: torch.accelerator.synchronize(); torch 1.13 has no torch.accelerator)
        if hasattr(torch, "accelerator"):
            torch.accelerator.synchronize()

    @abstractmethod
    def receive_weights(self, update_info) -> None:
        raise NotImplementedError

    @abstractmethod
    def shutdown(self) -> None:
        raise NotImplementedError

    @staticmethod
    @abstractmethod
    def trainer_send_weights(iterator, trainer_args) -> None:
        raise NotImplementedError
