"""The lean launch path's cache key tells apart every pair of arguments Triton's specializer
does."""

import itertools

import pytest
import torch
from triton._C.libtriton import native_specialize_impl
from triton.backends.nvidia.compiler import CUDABackend

from normlab import _launch

INTS = [0, 1, 2, 15, 16, 17, 32, 2**31 - 16, 2**31 - 1, 2**31, 2**31 + 16, -1, -16, -(2**31),
        -(2**31) - 1, 2**63 - 16, 2**63, 2**63 + 16]  # fmt: skip


def _triton(v):
    return native_specialize_impl(CUDABackend, v, False, True, True)


def _tensors():
    out = []
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64):
        base = torch.empty(64, dtype=dtype)
        out += [base, base[1:], base[8:], base[16:]]
    return out


@pytest.mark.parametrize("values", [INTS, [1.0, 0.5, 3], [True, False, 1, 0], _tensors()],
                         ids=["ints", "floats", "bools", "pointers"])  # fmt: skip
def test_key_separates_what_triton_separates(values):
    for a, b in itertools.combinations(values, 2):
        if _triton(a) != _triton(b):
            assert _launch._spec(a) != _launch._spec(b), (a if not isinstance(a, torch.Tensor)
                                                          else (a.dtype, a.data_ptr() % 16), b)


def test_constexprs_are_keyed_by_value():
    """Two calls that differ only in a constexpr (n_cols = 24 vs 40: the same runtime spec) need
    two kernels; runtime ints with the same spec share one."""
    constexpr = [False, True, False]
    assert _launch._key(constexpr, [7, 24, 32]) != _launch._key(constexpr, [7, 40, 32])
    assert _launch._key(constexpr, [7, 24, 32]) == _launch._key(constexpr, [9, 24, 48])
    assert _launch._key(constexpr, [7, 24, 32]) != _launch._key(constexpr, [1, 24, 32])


def test_empty_hook_chains_are_inactive():
    from triton import knobs

    chain = knobs.HookChain()
    assert not _launch._active(None) and not _launch._active(chain)
    chain.add(print)
    assert _launch._active(chain) and _launch._active(print)


def test_disabled_under_the_interpreter():
    assert not _launch.ENABLED  # CPU tests run the interpreter: launch is kernel[grid](...)
