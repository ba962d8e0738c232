"""normlab's one-row forward against Liger-Kernel's kernel at the same launch: where the time goes.

    python3 benchmarks/norm_fwd_peer_kernel.py --out FILE [--reps 6] [--cells ...]

At the same grid (one row a program) and warps, Liger-Kernel's LayerNorm/RMSNorm forward kernel
measured faster than normlab's (LayerNorm 4096 x 1024 bf16: 5.78 µs against 7.26 at 4 warps,
``norm_launch_variants_c80fee7``), though the two compile to nearly the same SASS (same
registers, one 16-byte load a thread). This times, per cell and in one process: Liger's
module call and its forward function, and normlab's row kernel at Liger's warps, each through
normlab's lean launcher and through Triton's own ``kernel[grid]``, with the parameters loaded
early, and without the statistics stores, all on the tensors Liger's function is given.
``--compile-between``: then torch.compile's forward (as the population runs it, before Liger),
and normlab's default and Liger's again, to see whether what ran before moves them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from norm_population import _compiled_peer

from normlab import _launch, _runtime
from normlab.bench import device_info, registry
from normlab.bench.records import portable_command, write_jsonl
from normlab.bench.sweep import measure, parse_op_shapes
from normlab.norms import op as norm_op
from normlab.norms import row

CELLS = ("layer_norm:4096x1024,layer_norm:8192x1024,layer_norm:512x2880,rms_norm:512x2880,"
         "rms_norm:4096x1024,rms_norm:4096x4096,layer_norm:4096x4096")  # fmt: skip
EPS = {"rms_norm": 1e-6, "layer_norm": 1e-5}


def liger_warps(n: int) -> int:
    """Liger-Kernel's calculate_settings: 4 warps, 8 from 2048 columns, 16 from 8192."""
    block = 1 << (n - 1).bit_length()
    return 16 if block >= 8192 else 8 if block >= 2048 else 4


def variants(op: str, x, w, b):
    is_rms, eps = op == "rms_norm", EPS[op]
    n, warps = x.shape[1], liger_warps(x.shape[1])
    block = 1 << (n - 1).bit_length()

    def ours(early=None, stats=True, lean=True):
        def run():
            before, _launch.ENABLED = _launch.ENABLED, lean
            try:
                return row.norm_forward(x, w, b, eps, is_rms, block_size=block, num_warps=warps,
                                        early_params=early, store_stats=stats)[0]  # fmt: skip
            finally:
                _launch.ENABLED = before
        return run

    if is_rms:
        from liger_kernel.ops.rms_norm import rms_norm_forward

        def liger_fn():
            return rms_norm_forward(x, w, eps, 0.0, "llama", False)[0]
    else:
        from liger_kernel.ops.layer_norm import layer_norm_forward

        def liger_fn():
            return layer_norm_forward(x, w, b, eps)[0]
    return {
        "normlab default": lambda: norm_op._forward(x, None, w, b, eps, 0.0, is_rms, "auto",
                                                    "auto")[0],  # fmt: skip
        f"normlab row w{warps}": ours(),
        f"normlab row w{warps} triton launch": ours(lean=False),
        f"normlab row w{warps} early": ours(early=True),
        f"normlab row w{warps} no stats": ours(stats=False),
        "liger function": liger_fn,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--reps", type=int, default=6)
    parser.add_argument("--cells", default=CELLS, help="op:MxN,... (bf16)")
    parser.add_argument("--compile-between", action="store_true",
                        help="time torch.compile's forward, then normlab and Liger again")
    args = parser.parse_args(argv)
    if args.reps < 1:
        parser.error("--reps must be >= 1")
    try:
        cells = parse_op_shapes(args.cells, EPS)
    except ValueError as exc:
        parser.error(f"--cells takes op:MxN,... ({exc})")
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU")
    dev = device_info()
    command = portable_command(["python3", "benchmarks/norm_fwd_peer_kernel.py",
                                *(argv if argv is not None else sys.argv[1:])])  # fmt: skip
    records = []
    for op, m, n in cells:
        x = torch.randn(m, n, dtype=torch.bfloat16, device="cuda")
        w = (1 + 0.1 * torch.randn(n, device="cuda")).to(torch.bfloat16)
        b = None if op == "rms_norm" else (0.1 * torch.randn(n, device="cuda")).to(torch.bfloat16)
        runs = variants(op, x, w, b)
        want = runs["normlab default"]()
        line = [f"{op} fwd {m}x{n} bf16:"]
        for name, run in runs.items():
            got = run()
            if not torch.allclose(got.float(), want.float(), atol=2e-2, rtol=2e-2):
                line.append(f"{name} MISMATCH")
                continue
            rec = measure(run, op, name, m, n, "bf16", "fwd", device=dev, reps=args.reps,
                          command=command, shape_set="norm_fwd_peer_kernel")  # fmt: skip
            records.append(rec)
            line.append(f"{name} {rec.device_us:.2f}")
        peer = registry.get(op, "liger").build(m, n, torch.bfloat16, "fwd", "cuda")
        rec = measure(peer, op, "liger", m, n, "bf16", "fwd", device=dev, reps=args.reps,
                      command=command, shape_set="norm_fwd_peer_kernel")  # fmt: skip
        records.append(rec)
        line.append(f"liger {rec.device_us:.2f}")
        if args.compile_between:
            compiled = registry.norm_case(_compiled_peer(op), op, m, n, torch.bfloat16, "fwd",
                                          "cuda")  # fmt: skip
            again = {"compile": compiled, "normlab default after compile": runs["normlab default"],
                     "liger function after compile": runs["liger function"],
                     "liger after compile": peer}  # fmt: skip
            for name, run in again.items():
                rec = measure(run, op, name, m, n, "bf16", "fwd", device=dev, reps=args.reps,
                              command=command, shape_set="norm_fwd_peer_kernel")  # fmt: skip
                records.append(rec)
                line.append(f"{name} {rec.device_us:.2f}")
        print(" | ".join(line), flush=True)
        write_jsonl(records, args.out)
    print(f"{_runtime.sm_count()} SMs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
