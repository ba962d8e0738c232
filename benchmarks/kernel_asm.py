"""The PTX and SASS of normlab's RMSNorm forward and Liger-Kernel's at one shape (GPU).

    python3 benchmarks/kernel_asm.py --out out/asm --shape 512x768

Runs both forwards once (bf16) and writes each compiled kernel's PTX and SASS (where Triton can
disassemble) into ``--out``, with a count of SASS instructions by opcode: what a latency-bound
call spends between its loads and its stores.
"""

from __future__ import annotations

import argparse
import collections
import re
from pathlib import Path

import torch

import normlab
from normlab import _launch
from normlab.norms import row


def _compiled(jit_fn):
    """Every kernel Triton compiled for ``jit_fn`` in this process."""
    out = []
    for cache in getattr(jit_fn, "device_caches", {}).values():
        out += list(cache[0].values())
    return out


def _dump(kernel, name: str, out: Path) -> None:
    (out / f"{name}.ptx").write_text(kernel.asm["ptx"])
    try:
        sass = kernel.asm["sass"]
    except Exception as exc:  # no disassembler: the PTX is still there
        print(f"{name}: no SASS ({exc!r})")
        return
    (out / f"{name}.sass").write_text(sass)
    # nvdisasm lines: "<control codes>\t[@predicate ]OPCODE operands;"
    opcode = re.compile(r"^[-\w:]+\t(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", re.M)
    ops = collections.Counter(m.group(1) for m in opcode.finditer(sass))
    print(f"{name}: {sum(ops.values())} SASS instructions; {dict(ops.most_common(25))}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--shape", default="512x768", help="MxN")
    args = parser.parse_args(argv)
    try:
        m, n = (int(v) for v in args.shape.split("x"))
    except ValueError:
        parser.error("--shape takes MxN (integers)")
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU")
    args.out.mkdir(parents=True, exist_ok=True)
    x = torch.randn(m, n, dtype=torch.bfloat16, device="cuda")
    w = torch.ones(n, dtype=torch.bfloat16, device="cuda")
    normlab.rms_norm(x, w, 1e-6)  # the planned kernel
    row.norm_forward(x, w, None, 1e-6, True)  # one row per program
    for site in _launch._SITES.values():
        for i, entry in enumerate(site.compiled.values()):
            _dump(entry[0], f"normlab_{site.fn.__name__}_{m}x{n}_{i}", args.out)
    try:
        from liger_kernel.ops import rms_norm as liger
    except ImportError:
        print("Liger-Kernel not installed")
        return 0
    liger.rms_norm_forward(x, w, 1e-6, 0.0, "llama", False)
    for i, k in enumerate(_compiled(liger._rms_norm_forward_kernel)):
        _dump(k, f"liger_rms_norm_fwd_{m}x{n}_{i}", args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
