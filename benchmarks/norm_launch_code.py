"""The sm_90 code of every kernel a planned norm call launches, with a digest (no GPU).

    python3 benchmarks/norm_launch_code.py [--cells 1x8192,4096x4096,...] [--dtypes bf16]
        [--ops rms_norm,layer_norm] [--fused no,yes] [--affine yes,no]
        [--strategies auto,atomic,two_stage] [--sms 132] [--out FILE]

For each cell, norm, dtype, fused add, affine or not, and dγ strategy, the forward and the
backward are planned as ``normlab``'s ops plan them on a card of ``--sms`` SMs (every layout:
row, block-row, split-row), with the launches captured instead of run. Each launch is compiled
ahead of time for an H100/H200 (``sm_90``) with this machine's Triton and its ``ptxas``. A line
gives the call, the kernel, its grid and launch options, its registers, stack and SASS
instructions, and two digests of the SASS with its kernel-parameter offsets blanked (a parameter
dropped or added moves them): of the instructions in order, and of them sorted with register
numbers blanked. Two trees that print the same first digest run the same GPU code; the same
second digest alone, the same instructions scheduled in another order. A host-side change, such
as launching absent tensors as None, is shown that way to leave the kernels as they were.
Code generation changes between Triton versions: run both trees under the same one.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import os
import re
import sys

os.environ["TRITON_INTERPRET"] = "0"  # compiled kernels, even when a caller interprets
os.environ["NORMLAB_MODE"] = "auto"

import torch

torch.cuda.is_available = lambda: True  # compiled kernels on a machine without a GPU

import triton  # noqa: E402
from kernel_loops import analyse, disassemble  # noqa: E402
from norm_bwd_spills import DTYPES, captured_launches, compile_launch  # noqa: E402
from norm_bwd_variants import parse_cells  # noqa: E402

from normlab.norms import op  # noqa: E402

# One cell per plan kind on a 132-SM card: a decode row and batch, one-row tiles, the static and
# shifted widths, the two-pass and split-row widths, block-row tiles, one column.
CELLS = ("1x8192,8x1024,4096x1024,4096x4096,4096x2880,4096x12288,32768x8192,2x65536,"
         "1000003x200,1000003x24,65536x1")  # fmt: skip
_PARAM_OFFSET = re.compile(r"c\[0x0\]\[0x[0-9a-f]+\]")  # a kernel parameter's constant bank slot
_COMMENT = re.compile(r"/\*.*?\*/")  # addresses and encodings
_REGISTER = re.compile(r"\b(U?R|U?P)\d+\b")  # a register's number


def sass_digests(sass: str) -> tuple[str, str]:
    """12 hex digits each: of the SASS's instructions and labels in order, parameter offsets
    blanked; and of its instructions as a sorted list, registers blanked too (the same
    instructions scheduled in another order give the same second digest)."""
    lines = []
    for line in sass.splitlines():
        text = _COMMENT.sub("", line).strip()
        if text.startswith(".L") or (text and not text.startswith((".", "//"))):  # a label, code
            lines.append(_PARAM_OFFSET.sub("c[0x0][param]", text))
    unordered = sorted(_REGISTER.sub(r"\1", line) for line in lines if not line.startswith(".L"))
    return tuple(hashlib.sha256("\n".join(part).encode()).hexdigest()[:12]
                 for part in (lines, unordered))


def planned_launches(m, n, dtype, is_rms, fused, affine, strategy, sms):
    """(direction, fn, grid, args, kwargs) of one forward and its backward, as planned."""
    x = torch.empty(m, n, dtype=dtype)
    residual = torch.empty(m, n, dtype=dtype) if fused else None
    weight = torch.empty(n, dtype=dtype) if affine else None
    bias = torch.empty(n, dtype=dtype) if affine and not is_rms else None
    common = (1e-6, 0.0, is_rms, strategy, "auto")
    with captured_launches(sms) as fwd:
        _, h, mean, rstd = op.planned_forward(x, residual, weight, bias, *common)
    normed = h if fused else x
    dy = torch.empty(m, n, dtype=dtype)
    dh = torch.empty(m, n, dtype=dtype) if fused else None
    with captured_launches(sms) as bwd:
        op.planned_backward(dy, dh, normed, weight, bias, mean, rstd, *common)
    return [("fwd", *launch) for launch in fwd] + [("bwd", *launch) for launch in bwd]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", default=CELLS, help="MxN[,MxN...]")
    parser.add_argument("--dtypes", default="bf16")
    parser.add_argument("--ops", default="rms_norm,layer_norm")
    parser.add_argument("--fused", default="no,yes", help="no, yes or both (no,yes)")
    parser.add_argument("--affine", default="yes,no", help="yes (weight, LayerNorm's bias), no")
    parser.add_argument("--strategies", default="auto,atomic,two_stage")
    parser.add_argument("--sms", type=int, default=132)
    parser.add_argument("--out", help="also write the lines here")
    args = parser.parse_args(argv)
    cells = parse_cells(parser, args.cells)
    lists = {name: getattr(args, name).split(",") for name in
             ("dtypes", "ops", "fused", "affine", "strategies")}  # fmt: skip
    allowed = {"dtypes": set(DTYPES), "ops": {"rms_norm", "layer_norm"}, "fused": {"no", "yes"},
               "affine": {"yes", "no"}, "strategies": {"auto", "atomic", "two_stage", "persistent"}}
    for name, values in lists.items():
        if not values or not set(values) <= allowed[name]:
            parser.error(f"--{name}: a comma list of {', '.join(sorted(allowed[name]))}")
    if args.sms < 1:
        parser.error("--sms must be >= 1")
    lines = [f"triton {triton.__version__}, sm_90, planned for {args.sms} SMs"]
    print(lines[0], flush=True)
    compiled = {}  # one compile per distinct launch signature
    for (m, n), op_name, dtype, add, affine, strategy in itertools.product(
            cells, lists["ops"], lists["dtypes"], lists["fused"], lists["affine"],
            lists["strategies"]):  # fmt: skip
        is_rms = op_name == "rms_norm"
        call = (f"{'add_' if add == 'yes' else ''}{op_name} {m}x{n} {dtype}"
                f"{'' if affine == 'yes' else ' no-affine'} {strategy}")
        for direction, fn, grid, fn_args, kwargs in planned_launches(
                m, n, DTYPES[dtype], is_rms, add == "yes", affine == "yes", strategy, args.sms):
            key = (fn.__name__, tuple(_signature_key(a) for a in fn_args),
                   tuple(sorted(kwargs.items())))  # fmt: skip
            if key not in compiled:
                kernel, options = compile_launch(fn, fn_args, kwargs)
                res, _ = analyse(kernel)
                ordered, unordered = sass_digests(disassemble(kernel)[1])
                compiled[key] = (f"{options}: {res['REG']} registers, {res['STACK']} B stack, "
                                 f"{res['INSTR']} instructions, sass {ordered}, "
                                 f"unordered {unordered}")  # fmt: skip
            line = f"{call} {direction}: {fn.__name__} grid {tuple(grid)}, {compiled[key]}"
            lines.append(line)
            print(line, flush=True)
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")
    return 0


def _signature_key(value):
    """An argument as the compile cache keys it: a tensor by its dtype, any other value as it
    is."""
    if isinstance(value, torch.Tensor):
        return ("tensor", value.dtype)
    return value


if __name__ == "__main__":
    sys.exit(main())
