"""A one-row LayerNorm forward against Liger-Kernel's at the same launch: kernel or launch path.

    python3 benchmarks/norm_fwd_launch_path.py --out out/norm_fwd_launch_path.jsonl [--reps 10]

In one run, at 1024 x 4096 fp32, normlab's one-row forward (8 warps, parameters loaded with x)
took 11.4 µs and Liger-Kernel's 9.3 (``norm_fp32_rows_342f1ea``), though both compile to the
same loads, reductions and stores (sm_90 SASS from this repository's CPU machine).

Each cell times, at Liger's block and warps (one row a program): Liger's
``layer_norm_forward``; Liger's kernel launched through ``kernel[grid]`` and through
``normlab._launch.launch``; normlab's kernel (parameters early) through both. The same kernel
through two launch paths tells the launch apart from the code. Then Liger's and normlab's calls
as the population times them, each on its own inputs (which require grad). Outputs on the
shared inputs are checked against Liger's.
``--around-compile`` times normlab's and Liger's calls before and after torch.compile's.
Records carry ``shape_set="norm_fwd_launch_path"`` and the variant in ``impl``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from normlab import _launch
from normlab.bench import device_info, registry
from normlab.bench.records import portable_command, write_jsonl
from normlab.bench.sweep import measure
from normlab.norms import op as norm_op
from normlab.norms import row

CELLS = ("1024x4096:fp32,4096x1024:fp32,4096x8192:fp32,1024x8192:fp32,512x2880:bf16,"
         "512x4096:bf16,4096x4096:bf16")
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
EPS = 1e-5


def _parse(cells: str):
    out = []
    for cell in cells.split(","):
        shape, _, dtype = cell.partition(":")
        m, n = (int(v) for v in shape.split("x"))
        if dtype not in DTYPES or m < 1 or n < 1:
            raise ValueError(cell)
        out.append((m, n, dtype))
    return out


def _variants(x, w, b):
    from liger_kernel.ops.layer_norm import _layer_norm_forward_kernel as liger_kernel
    from liger_kernel.ops.layer_norm import layer_norm_forward
    from liger_kernel.ops.utils import calculate_settings

    m, n = x.shape
    block, warps = calculate_settings(n)
    y = torch.empty_like(x)
    mean = torch.empty(m, dtype=torch.float32, device=x.device)
    rstd = torch.empty(m, dtype=torch.float32, device=x.device)
    args = (y, y.stride(0), x, x.stride(0), w, w.stride(0), b, b.stride(0), mean, mean.stride(0),
            rstd, rstd.stride(0), n, EPS)  # fmt: skip

    def liger_grid():
        liger_kernel[(m,)](*args, BLOCK_SIZE=block, num_warps=warps)
        return y

    def liger_lean():
        _launch.launch(liger_kernel, (m,), *args, BLOCK_SIZE=block, num_warps=warps)
        return y

    def normlab_lean():
        return row.norm_forward(x, w, b, EPS, False, block_size=block, num_warps=warps,
                                early_params=True)[0]  # fmt: skip

    def normlab_grid():
        enabled = _launch.ENABLED
        _launch.ENABLED = False  # launch() is then exactly kernel[grid](...)
        try:
            return normlab_lean()
        finally:
            _launch.ENABLED = enabled

    return block, warps, {
        "liger layer_norm_forward": lambda: layer_norm_forward(x, w, b, EPS)[0],
        "liger kernel, kernel[grid]": liger_grid,
        "liger kernel, normlab launch": liger_lean,
        "normlab kernel, kernel[grid]": normlab_grid,
        "normlab kernel, normlab launch": normlab_lean,
        "normlab planned": lambda: norm_op._forward(x, None, w, b, EPS, 0.0, False, "auto",
                                                    "auto")[0],
        # as the population times them: each its own inputs (requiring grad), normlab's public op
        "liger, own inputs": registry.get("layer_norm", "liger").build(m, n, x.dtype, "fwd",
                                                                        "cuda"),
        "normlab, own inputs": registry.get("layer_norm", "normlab").build(m, n, x.dtype, "fwd",
                                                                            "cuda"),
        "liger, own inputs again": registry.get("layer_norm", "liger").build(m, n, x.dtype,
                                                                              "fwd", "cuda"),
    }  # fmt: skip


def _around_compile(cells, reps, dev, command, records, out):
    """Does a torch.compile'd peer timed in the same process move the other calls' times? (The
    population times torch.compile's peer before Liger's in every cell.)"""
    from norm_population import _compiled_peer

    compiled = _compiled_peer("layer_norm")
    for m, n, dtype_name in cells:
        dtype = DTYPES[dtype_name]
        line = [f"layer_norm fwd {m}x{n} {dtype_name}:"]
        calls = {impl: registry.get("layer_norm", impl).build(m, n, dtype, "fwd", "cuda")
                 for impl in ("normlab", "liger")}  # fmt: skip
        steps = [*calls.items(), *calls.items(),
                 ("compile", registry.norm_case(compiled, "layer_norm", m, n, dtype, "fwd",
                                                "cuda")),
                 *calls.items(), *calls.items()]  # fmt: skip
        for i, (impl, run) in enumerate(steps):
            when = "before" if i < 4 else "" if i == 4 else "after"
            rec = measure(run, "layer_norm", f"{impl} {when}".strip(), m, n, dtype_name, "fwd",
                          device=dev, reps=reps, command=command,
                          shape_set="norm_fwd_launch_path")  # fmt: skip
            records.append(rec)
            line.append(f"{rec.impl} {rec.device_us:.2f}")
        print(" | ".join(line), flush=True)
        write_jsonl(records, out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--cells", default=CELLS, help="MxN:dtype,... (dtype bf16 or fp32)")
    parser.add_argument("--around-compile", action="store_true",
                        help="per cell: normlab's and Liger's calls on their own inputs, then "
                             "torch.compile's F.layer_norm timed (compiled on its first call), "
                             "then the two calls again")
    args = parser.parse_args(argv)
    if args.reps < 1:
        parser.error("--reps must be >= 1")
    try:
        cells = _parse(args.cells)
    except ValueError as exc:
        parser.error(f"--cells: expected MxN:bf16|fp32,..., got {exc}")
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU")
    try:
        import liger_kernel  # noqa: F401
    except ImportError:
        parser.error("needs liger_kernel")
    dev = device_info()
    command = portable_command(["python3", "benchmarks/norm_fwd_launch_path.py",
                                *(argv if argv is not None else sys.argv[1:])])  # fmt: skip
    records = []
    if args.around_compile:
        _around_compile(cells, args.reps, dev, command, records, args.out)
        return 0
    for m, n, dtype_name in cells:
        dtype = DTYPES[dtype_name]
        x = torch.randn(m, n, dtype=dtype, device="cuda")
        w = (1 + 0.1 * torch.randn(n, device="cuda")).to(dtype)
        b = (0.1 * torch.randn(n, device="cuda")).to(dtype)
        block, warps, variants = _variants(x, w, b)
        want = variants["liger layer_norm_forward"]().float()
        line = [f"layer_norm fwd {m}x{n} {dtype_name} (block {block}, {warps} warps):"]
        for name, run in variants.items():
            got = run().float()
            if "own inputs" not in name and not torch.allclose(got, want, rtol=2e-2, atol=2e-2):
                line.append(f"{name} MISMATCH")
                continue
            rec = measure(run, "layer_norm", name, m, n, dtype_name, "fwd", device=dev,
                          reps=args.reps, command=command, shape_set="norm_fwd_launch_path")
            records.append(rec)
            line.append(f"{name} {rec.device_us:.2f}")
        print(" | ".join(line), flush=True)
        write_jsonl(records, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
