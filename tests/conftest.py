"""Shared test setup: normlab is imported first so the runtime mode (and TRITON_INTERPRET) is set
before any kernel module is defined."""

import normlab  # noqa: I001  (first: the runtime mode before torch)
import pytest
import torch


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


@pytest.fixture
def device():
    return normlab.DEVICE
