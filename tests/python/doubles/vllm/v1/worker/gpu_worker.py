# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
"""Test double of vllm/v1/worker/gpu_worker.py's Worker: the engine built by the factory from
the weight-transfer config (as load_model does), and the weight-transfer verbs with upstream's
session state machine (init_weight_transfer_engine parses the dict, start / update / finish)."""
from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory


class Worker:
    def __init__(self, vllm_config, device, model):
        self.vllm_config = vllm_config
        self.weight_transfer_engine = None
        self._weight_update_active = False
        if vllm_config.weight_transfer_config is not None:
            self.weight_transfer_engine = WeightTransferEngineFactory.create_engine(
                vllm_config.weight_transfer_config, vllm_config, device, model)

    def _check_weight_transfer_engine(self):
        if self.weight_transfer_engine is None:
            raise RuntimeError("Weight transfer not configured. "
                               "Please set weight_transfer_config to enable weight transfer.")

    def init_weight_transfer_engine(self, init_info: dict) -> None:
        self._check_weight_transfer_engine()
        typed_init_info = self.weight_transfer_engine.parse_init_info(init_info)
        self.weight_transfer_engine.init_transfer_engine(typed_init_info)

    def start_weight_update(self) -> None:
        self._check_weight_transfer_engine()
        if self._weight_update_active:
            raise RuntimeError("start_weight_update called while a weight update is already "
                               "active. Call finish_weight_update first.")
        self.weight_transfer_engine.start_weight_update()
        self._weight_update_active = True

    def update_weights(self, update_info: dict) -> None:
        self._check_weight_transfer_engine()
        if not self._weight_update_active:
            raise RuntimeError("start_weight_update must be called before update_weights.")
        try:
            self.weight_transfer_engine.update_weights(update_info)
        except BaseException:
            self._weight_update_active = False
            raise

    def finish_weight_update(self) -> None:
        self._check_weight_transfer_engine()
        if not self._weight_update_active:
            raise RuntimeError(
                "finish_weight_update called without a matching start_weight_update.")
        self.weight_transfer_engine.finish_weight_update()
        self._weight_update_active = False

    def shutdown(self) -> None:
        if self.weight_transfer_engine is not None:
            self.weight_transfer_engine.shutdown()
