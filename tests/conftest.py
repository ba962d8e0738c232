"""Shared test setup: normlab is imported first so the runtime mode (and TRITON_INTERPRET) is set
before any kernel module is defined."""

import normlab  # noqa: F401
import pytest
import torch


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


@pytest.fixture
def device():
    return normlab.DEVICE
