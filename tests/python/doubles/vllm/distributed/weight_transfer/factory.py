# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
"""Test double of vllm/distributed/weight_transfer/factory.py at
047c993cc49c32e9b94f5bf826a9214e163eb982: WeightTransferEngineFactory's registry (lazy module
path + class name, or a class), create_engine's "Invalid weight transfer backend" error."""
import importlib

from vllm.logger import init_logger

logger = init_logger(__name__)


class WeightTransferEngineFactory:
    _registry = {}

    @classmethod
    def register_engine(cls, name, module_path_or_cls, class_name=None):
        if name in cls._registry:
            raise ValueError(f"Weight transfer engine '{name}' is already registered.")
        if isinstance(module_path_or_cls, str):
            module_path = module_path_or_cls
            if class_name is None:
                raise ValueError("class_name is required when registering with module path")

            def loader():
                module = importlib.import_module(module_path)
                return getattr(module, class_name)

            cls._registry[name] = loader
        else:
            engine_cls = module_path_or_cls
            cls._registry[name] = lambda: engine_cls

    @classmethod
    def create_engine(cls, config, vllm_config, device, model):
        backend = config.backend
        if backend not in cls._registry:
            available = list(cls._registry.keys())
            raise ValueError(
                f"Invalid weight transfer backend: {backend}. Available engines: {available}")
        engine_cls = cls._registry[backend]()
        logger.info("Creating weight transfer engine: %s", engine_cls.__name__)
        return engine_cls(config, vllm_config, device, model)


WeightTransferEngineFactory.register_engine(
    "nccl", "vllm.distributed.weight_transfer.nccl_engine", "NCCLWeightTransferEngine")
WeightTransferEngineFactory.register_engine(
    "ipc", "vllm.distributed.weight_transfer.ipc_engine", "IPCWeightTransferEngine")
