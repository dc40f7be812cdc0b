# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
"""pytest settings of the Python tests: the `gpu` marker (tests that need a CUDA GPU and a build
with CUDA; run them with `pytest -m gpu`, scripts/python-gpu-check.sh)."""


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU and weightsync built with CUDA")
