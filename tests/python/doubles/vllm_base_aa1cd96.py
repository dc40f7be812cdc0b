# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
"""Test double of the earlier vllm/distributed/weight_transfer/base.py, at
aa1cd966f0c8e8ee5520457758b08000d6415cd6: the engine is built from (config, parallel_config),
the update info has a keyword-only is_checkpoint_format, and the worker hands
receive_weights(update_info, load_weights) its loader. (The tests put it in place of the newer
base module.)"""
from abc import ABC, abstractmethod
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Generic, TypeVar

TInitInfo = TypeVar("TInitInfo", bound="WeightTransferInitInfo")
TUpdateInfo = TypeVar("TUpdateInfo", bound="WeightTransferUpdateInfo")


@dataclass
class WeightTransferInitInfo(ABC):  # noqa: B024
    pass


@dataclass
class WeightTransferUpdateInfo(ABC):  # noqa: B024
    _: KW_ONLY
    is_checkpoint_format: bool = True


@dataclass
class WeightTransferInitRequest:
    init_info: dict = field(default_factory=dict)


@dataclass
class WeightTransferUpdateRequest:
    update_info: dict = field(default_factory=dict)


class WeightTransferEngine(ABC, Generic[TInitInfo, TUpdateInfo]):
    init_info_cls: type
    update_info_cls: type

    def __init__(self, config, parallel_config) -> None:
        self.config = config
        self.parallel_config = parallel_config

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
    def receive_weights(self, update_info, load_weights) -> None:
        raise NotImplementedError

    @abstractmethod
    def shutdown(self) -> None:
        raise NotImplementedError

    @staticmethod
    @abstractmethod
    def trainer_send_weights(iterator, trainer_args) -> None:
        raise NotImplementedError
