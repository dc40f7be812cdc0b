# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
"""Test double of the driver of SGLang's external receivers: the WeightUpdater of the receiver
branch (the one that has python/sglang/srt/weight_sync/external_receiver.py at
fd623da6fc46f9d1176f9e6c09fabe6cfd980a5a): init_weights_update_group with receiver and
receiver_init_payload builds the receiver through the allowlist with the worker's context and
answers (success, message); receive_weights_from_distributed hands receiver_payload to
receive() and refuses names, dtypes or shapes; destroy_weights_update_group forgets the
receiver, then destroys it. One TP worker of tp_size (its tp_rank)."""
import torch

from sglang.srt.weight_sync.external_receiver import (WeightUpdateReceiverContext,
                                                      build_weight_update_receiver)


class WeightUpdater:
    def __init__(self, *, model, device, tp_rank, tp_size, weight_update_receivers):
        self.model, self.device = model, device
        self.tp_rank, self.tp_size = tp_rank, tp_size
        self.weight_update_receivers = weight_update_receivers
        self._external_receivers = {}

    def init_weights_update_group(self, master_address, master_port, rank_offset, world_size,
                                  group_name, backend="nccl", receiver=None,
                                  receiver_init_payload=None):
        assert group_name != "", "Group name cannot be empty"
        if receiver is None and receiver_init_payload is not None:
            return False, ("Failed to initialize custom process group: "
                           "receiver_init_payload requires receiver.")
        if receiver is None:
            return False, "this double drives external receivers only"
        try:
            if group_name in self._external_receivers:
                raise ValueError(f"group {group_name!r} already exists")
            self._external_receivers[group_name] = build_weight_update_receiver(
                receiver, self.weight_update_receivers,
                WeightUpdateReceiverContext(
                    model=self.model, device=torch.device(self.device), tp_rank=self.tp_rank,
                    tp_size=self.tp_size, group_name=group_name, master_address=master_address,
                    master_port=master_port, world_size=world_size, rank_offset=rank_offset,
                    init_payload=receiver_init_payload))
            return True, "Succeeded to initialize external weight-update receiver."
        except Exception as e:
            return False, f"Failed to initialize external weight-update receiver: {e}."

    def destroy_weights_update_group(self, group_name):
        if group_name not in self._external_receivers:
            return False, "The group to be destroyed does not exist."
        try:
            self._external_receivers.pop(group_name).destroy()
            return True, "Succeeded to destroy external weight-update receiver."
        except Exception as e:
            return False, f"Failed to destroy external weight-update receiver: {e}."

    def receive_weights_from_distributed(self, *, names, dtypes, shapes, group_name,
                                         load_format=None, receiver_payload=None):
        external = self._external_receivers.get(group_name)
        if external is None:
            raise ValueError(f"Group {group_name!r} has no external receiver")
        if names or dtypes or shapes:
            raise ValueError(f"Group {group_name!r} is an external receiver: tensor "
                             "names/dtypes/shapes must be empty; per-round data goes in "
                             "receiver_payload")
        if load_format is not None:
            raise ValueError("load_format is not supported on receiver rounds")
        external.receive(receiver_payload)
        return []
