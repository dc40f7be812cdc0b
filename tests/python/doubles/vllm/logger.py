# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
"""Test double of vllm/logger.py: init_logger."""
import logging


def init_logger(name):
    return logging.getLogger(name)
