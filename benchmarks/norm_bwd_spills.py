"""Registers and spills of the planned norm backward, compiled for sm_90 (no GPU).

    python3 benchmarks/norm_bwd_spills.py [--cells 65536x4096,65536x16384] [--dtypes bf16,fp32]
        [--ops rms_norm,layer_norm] [--fused no,yes] [--sms 132] [--set prefetch=False ...]

For each cell, norm and dtype, ``row.norm_backward`` plans the backward as on a card of ``--sms``
SMs, with the launches captured instead of run. Each launch of the row kernels is then compiled
ahead of time for an H100/H200 (``sm_90``) with this machine's Triton and its ``ptxas``. The
script prints the kernel, its grid, warps and register cap, the registers and stack a thread
takes (ptxas' ``STACK``: local memory) and the kernel's SASS instructions. A planned kernel that
spills in its row loop once fell off a cliff: past 12288 columns the shifted tile spilled 240 B a
thread and the fused add's backward ran 33% slower per byte
(docs/notes/2026-12-06-liger-order-past-12288-columns.md). This finds such plans without a GPU.

``--fused yes`` plans the fused add's backward (it reads dh too). ``--set KEY=VALUE`` passes a
keyword of ``row.norm_backward`` (a Python literal: ``prefetch=False``, ``maxnreg=0``,
``num_warps=8``) to every plan, to see what a rule's alternative would take. Only the row layout is
covered: LayerNorm past 8192 columns and rows under one a SM take the split-row kernel at the
API, and narrow rows the block-row one. Register allocation changes between Triton versions, so
say which version a figure came from.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import inspect
import itertools
import os
import sys

os.environ["TRITON_INTERPRET"] = "0"  # compiled kernels, even when a caller interprets
os.environ["NORMLAB_MODE"] = "auto"

import torch

torch.cuda.is_available = lambda: True  # compiled kernels on a machine without a GPU

import triton  # noqa: E402
from kernel_loops import analyse  # noqa: E402
from norm_bwd_variants import parse_cells  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from normlab import _launch, _runtime  # noqa: E402
from normlab.norms import block_row, reduce, row, split_row  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
POINTER_TYPES = {torch.bfloat16: "*bf16", torch.float16: "*fp16", torch.float32: "*fp32"}
OPTIONS = ("num_warps", "num_stages", "maxnreg")  # launch options, not kernel arguments
# row.norm_backward's keywords that --set may pass (--fused passes dh)
KEYWORDS = {name for name, p in inspect.signature(row.norm_backward).parameters.items()
            if p.kind is p.KEYWORD_ONLY and name != "dh"}  # fmt: skip


@contextlib.contextmanager
def captured_launches(sms: int):
    """Every norm launch (row, block-row, split-row kernels and the dγ/dβ reduce) listed as
    (fn, grid, args, kwargs), not run, planned for ``sms`` SMs and an H200's 60 MiB L2, with no
    replay: each call plans and launches."""
    launches = []

    def capture(fn, grid, *args, **kwargs):
        launches.append((fn, grid, args, kwargs))

    modules = (row, block_row, split_row, reduce)
    saved = [m.launch for m in modules], _runtime.sm_count, _runtime.l2_bytes, _launch.REPLAY
    _launch.REPLAY = False
    for module in modules:
        module.launch = capture
    _runtime.sm_count = lambda *args, **kwargs: sms
    _runtime.l2_bytes = lambda *args, **kwargs: 60 * 2**20
    try:
        yield launches
    finally:
        for module, launch in zip(modules, saved[0], strict=True):
            module.launch = launch
        _runtime.sm_count, _runtime.l2_bytes, _launch.REPLAY = saved[1:]


def compile_launch(fn, args, kwargs, arch: int = 90):
    """The launch compiled for ``arch``: pointers and integers divisible by 16 specialized as
    Triton specializes them, None and integers equal to 1 as constexprs, every constexpr in the
    signature (by keyword or position, else its default): a static width passed by position
    compiles as the constant it is on a GPU."""
    names = fn.arg_names
    options = {k: v for k, v in kwargs.items() if k in OPTIONS}
    constants = {k: v for k, v in kwargs.items() if k not in OPTIONS}
    signature, attrs = {}, {}
    is_constexpr = {p.name: p.is_constexpr for p in fn.params}
    for name, value in zip([n for n in names if n not in constants], args, strict=False):
        index = (names.index(name),)
        if is_constexpr[name] or value is None or (type(value) is int and value == 1):
            signature[name] = "constexpr"  # a static width by position, an absent tensor, a 1
            constants[name] = value
        elif isinstance(value, torch.Tensor):
            signature[name] = POINTER_TYPES[value.dtype]
            attrs[index] = [["tt.divisibility", 16]]
        elif isinstance(value, float):
            signature[name] = "fp32"
        else:
            signature[name] = "i64" if abs(value) >= 2**31 else "i32"
            if value and value % 16 == 0:
                attrs[index] = [["tt.divisibility", 16]]
    for param in fn.params:
        if param.name not in signature:
            signature[param.name] = "constexpr"
            constants.setdefault(param.name, param.default)
    source = ASTSource(fn, signature, constants, attrs)
    return triton.compile(source, target=GPUTarget("cuda", arch, 32), options=options), options


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", default="65536x4096,65536x8192,65536x12288,65536x16384",
                        help="MxN[,MxN...]")
    parser.add_argument("--dtypes", default="bf16,fp32")
    parser.add_argument("--ops", default="rms_norm,layer_norm")
    parser.add_argument("--fused", default="no,yes", help="no, yes or both (no,yes)")
    parser.add_argument("--sms", type=int, default=132)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a row.norm_backward keyword for every plan (repeatable)")
    args = parser.parse_args(argv)
    cells = parse_cells(parser, args.cells)
    dtypes, ops, fused = (args.dtypes.split(","), args.ops.split(","), args.fused.split(","))
    if not set(dtypes) <= set(DTYPES):
        parser.error(f"--dtypes: a comma list of {', '.join(DTYPES)}")
    if not set(ops) <= {"rms_norm", "layer_norm"}:
        parser.error("--ops: a comma list of rms_norm, layer_norm")
    if not set(fused) <= {"no", "yes"}:
        parser.error("--fused: no, yes or no,yes")
    if args.sms < 1:
        parser.error("--sms must be >= 1")
    keywords = {}
    for item in args.set:
        key, _, value = item.partition("=")
        try:
            keywords[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            parser.error(f"--set {item!r}: KEY=VALUE with a Python literal value")
        if key not in KEYWORDS:
            parser.error(f"--set {item!r}: {key!r} is not one of {', '.join(sorted(KEYWORDS))}")
    print(f"triton {triton.__version__}, sm_90, planned for {args.sms} SMs"
          + (f", with {keywords}" if keywords else ""))
    for (m, n), op, dtype, add in itertools.product(cells, ops, dtypes, fused):
        is_rms, dt = op == "rms_norm", DTYPES[dtype]
        x, dy = torch.empty(m, n, dtype=dt), torch.empty(m, n, dtype=dt)
        w = torch.empty(n, dtype=dt)
        b = None if is_rms else torch.empty(n, dtype=dt)
        mean, rstd = (None if is_rms else torch.empty(m)), torch.empty(m)
        dh = torch.empty(m, n, dtype=dt) if add == "yes" else None
        with captured_launches(args.sms) as launches:
            row.norm_backward(dy, x, w, b, mean, rstd, is_rms, dh=dh, **keywords)
        for fn, grid, fn_args, kwargs in launches:
            if fn is reduce._reduce_partials_kernel:  # the row kernels alone
                continue
            kernel, options = compile_launch(fn, fn_args, kwargs)
            resources, _ = analyse(kernel)
            name = ("add_" if dh is not None else "") + op
            print(f"{name} {m}x{n} {dtype}: {fn.__name__} grid {grid[0]}, {options}: "
                  f"{resources['REG']} registers, {resources['STACK']} B stack, "
                  f"{resources['INSTR']} instructions", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
