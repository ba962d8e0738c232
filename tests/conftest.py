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


@pytest.fixture(autouse=True)
def _many_program_backward(monkeypatch):
    """The tests' shapes are small, and the norm backward runs any call of at most
    NORM_BWD_ONE_PROGRAM_ELEMS elements in one program: switched off here so that the
    multi-program paths (partials, pairing, the reduce kernel) run at those shapes.
    tests/test_norm_planner.py tests the rule itself."""
    from normlab.norms import config

    monkeypatch.setattr(config, "NORM_BWD_ONE_PROGRAM_ELEMS", 0)
