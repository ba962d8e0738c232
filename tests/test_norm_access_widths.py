"""The norm kernels' row hint reaches the loads: compiled for sm_90 on this CPU machine
(benchmarks/norm_access_widths.py), at row strides and widths Triton knows nothing of."""

import functools
import os
import re
import subprocess
import sys
from pathlib import Path


@functools.cache
def _run_script() -> str:
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "benchmarks/norm_access_widths.py"], cwd=root,
                          capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(root)})  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_row_alignment_sets_the_access_width():
    """A row of ROW_ALIGN elements' alignment (2 ROW_ALIGN bytes) takes accesses that wide: no
    2-byte access once ROW_ALIGN >= 2, 16-byte loads and stores at 8. ROW_ALIGN 1 is the
    control: 2-byte accesses (what every unhinted row stride got while the hint was a
    tl.multiple_of on the argument, which Triton drops)."""
    stdout = _run_script()
    rows = re.findall(r"^(.+), ROW_ALIGN (\d): load (.*); store (.*)$", stdout, re.M)
    assert len(rows) == 12, stdout
    for kernel, align, load, store in rows:
        loads = {int(b): int(n) for b, n in re.findall(r"(\d+) B x (\d+)", load)}
        stores = {int(b): int(n) for b, n in re.findall(r"(\d+) B x (\d+)", store)}
        where = f"{kernel} at ROW_ALIGN {align}: {load}; {store}"
        if align == "1":
            assert 2 in loads and 2 in stores, where
        else:
            assert 2 not in loads and 2 not in stores, where
        if align == "8":
            assert 16 in loads and 16 in stores, where

    # w/b apart from x (config.params_apart): x's layout takes the row's own alignment, so its
    # element loads are consecutive across a warp, not 16 bytes apart.
    elems = dict(re.findall(r"^forward x row, ROW_ALIGN (\d): (\d+) consecutive", stdout,
                            re.M))  # fmt: skip
    assert elems == {"1": "1", "2": "2", "4": "4", "8": "8"}, stdout


def test_shifted_row_loads_vectors():
    """The reason for config.shift_vec: at ROW_ALIGN 1 the shifted row loads and stores its body
    in 16-byte vectors (one load and one store a thread at 201 columns on one warp); the 2-byte
    accesses left are the head, the tail and w at shifted columns."""
    found = re.search(r"^forward shifted row \(201 columns, ROW_ALIGN 1\): load (.*); store (.*)$",
                      _run_script(), re.M)  # fmt: skip
    assert found, _run_script()
    loads = {int(b): int(n) for b, n in re.findall(r"(\d+) B x (\d+)", found.group(1))}
    stores = {int(b): int(n) for b, n in re.findall(r"(\d+) B x (\d+)", found.group(2))}
    assert loads.get(16) and stores.get(16), found.group(0)


def test_shifted_backward_rows_load_vectors():
    """The reason for config.bwd_shift_vec: at ROW_ALIGN 1 the persistent backward's shifted rows
    load x and dy and store dx in 16-byte vectors, both body blocks (8192 + 2048 columns on 8
    warps: 32 + 8 elements, 5 vectors, a thread, x and dy), where unshifted rows (ROW_ALIGN 1
    above) take 2-byte accesses only; the 2-byte loads left are the head, the tail and w."""
    found = re.search(r"^backward shifted rows \(8192 \+ 2048 columns, ROW_ALIGN 1\): load (.*); "
                      r"store (.*)$", _run_script(), re.M)  # fmt: skip
    assert found, _run_script()
    loads = {int(b): int(n) for b, n in re.findall(r"(\d+) B x (\d+)", found.group(1))}
    stores = {int(b): int(n) for b, n in re.findall(r"(\d+) B x (\d+)", found.group(2))}
    assert loads.get(16) == 2 * 5 and stores.get(16) == 5, found.group(0)


def test_one_warp_keeps_a_row_in_its_warp():
    """The reason for config.one_warp_rows: at ROW_ALIGN 1 the planned 8-warp block-row backward
    spreads a 128-column row over several warps and syncs them with barriers in its loop; at 16-
    byte rows a row sits in one warp; one warp a program has no barrier at all."""
    found = re.findall(r"^block-row backward 128 columns, ROW_ALIGN (\d), (\d) warps?, \d+ rows: "
                       r"a row spans (\d) warps?; \d+ instructions; BAR (\d+)", _run_script(),
                       re.M)  # fmt: skip
    spans = {(align, warps): (int(span), int(bars)) for align, warps, span, bars in found}
    assert spans.keys() == {("8", "8"), ("1", "8"), ("1", "1")}, found
    assert spans[("8", "8")][0] == 1
    assert spans[("1", "8")][0] > 1 and spans[("1", "8")][1] > 0
    assert spans[("1", "1")] == (1, 0)


def test_int32_row_offsets_take_fewer_instructions():
    """The reason for config.row_offsets_int64: the block-row forward's tiny-width tile at
    ROW_ALIGN 1 takes fewer SASS instructions an element with int32 row offsets."""
    found = dict(re.findall(r"^block-row forward 256 x 8 tile, ROW_ALIGN 1, 4 warps, "
                            r"(int64|int32) row offsets: ([\d.]+) instructions an element",
                            _run_script(), re.M))  # fmt: skip
    assert found.keys() == {"int64", "int32"}, found
    assert float(found["int32"]) < float(found["int64"]), found


def test_backward_by_role_keeps_to_registers():
    """The decode backward by role (row._norm_bwd_roles_kernel) compiles for sm_90 with no
    local memory in a loop at its four decode batches, both norms, and at most two registers
    saved once (8 B of stack: Triton 3.6's ptxas saves two registers once in RMSNorm's
    4096-wide row): a spill in the column programs' row loop would add a local-memory round
    trip to each step of a call that is all latency."""
    rows = re.findall(r"^backward by role, (\w+) .*: (\d+) registers, (\d+) B stack, "
                      r"(\d+) local accesses in loops$", _run_script(), re.M)  # fmt: skip
    assert len(rows) == 8, _run_script()
    assert all(int(stack) <= 8 and looped == "0" for _, _, stack, looped in rows), rows
