"""torch.compile's norm backward beside normlab's, and the kernels Inductor generated (GPU).

    python3 benchmarks/inductor_norm_bwd.py --out DIR [--cells 32768x8192] [--ops layer_norm]
        [--modes default,max-autotune-no-cudagraphs] [--reps 10]

For each cell, norm and mode, ``torch.compile(F.layer_norm / F.rms_norm, dynamic=False)`` runs one
forward, then its backward is timed as the population times it (``registry.norm_case``, L2
flushed, device time), beside normlab's planned backward in the same process. The Triton source
of every kernel Inductor wrote for that compile, with the launch config its autotuner kept, goes
to ``DIR/<op>_<M>x<N>_<mode>.py``: the backward's kernels (PyTorch's mix-order reduction fuses
the row sums for dx with the column sums for dw/db in one kernel) are what normlab's persistent
backward is compared against. Records go to ``DIR/records.jsonl``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from normlab.bench import device_info, registry
from normlab.bench.records import portable_command, write_jsonl
from normlab.bench.sweep import measure, parse_shapes

OPS = ("rms_norm", "layer_norm")
MODES = ("default", "max-autotune-no-cudagraphs")


def _compiled(op: str, mode: str):
    if op == "rms_norm":
        fn = lambda x, w, b, eps: F.rms_norm(x, (x.shape[-1],), w, eps)
    else:
        fn = lambda x, w, b, eps: F.layer_norm(x, (x.shape[-1],), w, b, eps)
    return torch.compile(fn, dynamic=False, mode=None if mode == "default" else mode)


def _kernel_sources() -> dict[str, str]:
    """Every module Inductor's code cache holds, by path: the compiled graphs and their kernels."""
    return {m.__file__: Path(m.__file__).read_text() for m in _cached_modules()
            if getattr(m, "__file__", None)}  # fmt: skip


def _cached_modules() -> list:
    """The modules of Inductor's code cache (a list in torch 2.11 to 2.13)."""
    from torch._inductor.codecache import PyCodeCache

    return list(PyCodeCache.modules)


def _kept_configs(paths) -> list[str]:
    """The launch config each kernel of these modules runs (its autotuner keeps one launcher)."""
    out = []
    for m in _cached_modules():
        if getattr(m, "__file__", None) not in paths:
            continue
        for name, obj in vars(m).items():
            launchers = getattr(obj, "launchers", None)
            if launchers:
                out.append(f"# {name}: {', '.join(str(lc.config) for lc in launchers)}")
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cells", default="32768x8192", help="MxN[,MxN...]")
    parser.add_argument("--ops", default="layer_norm", help="rms_norm and/or layer_norm")
    parser.add_argument("--modes", default=",".join(MODES), help=f"a comma list of {MODES}")
    parser.add_argument("--reps", type=int, default=10)
    args = parser.parse_args(argv)
    ops, modes = args.ops.split(","), args.modes.split(",")
    if bad := [op for op in ops if op not in OPS]:
        parser.error(f"--ops: unknown {', '.join(bad)} (expected {', '.join(OPS)})")
    if bad := [m for m in modes if m not in MODES]:
        parser.error(f"--modes: unknown {', '.join(bad)} (expected {', '.join(MODES)})")
    if args.reps < 1:
        parser.error("--reps must be >= 1")
    try:
        cells = parse_shapes(args.cells)
    except ValueError:
        parser.error("--cells takes MxN[,MxN...] (integers)")
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU")
    torch._functorch.config.donated_buffer = False  # repeated backwards over one graph
    torch._dynamo.config.recompile_limit = 64
    args.out.mkdir(parents=True, exist_ok=True)
    dev = device_info()
    command = portable_command(["python3", "benchmarks/inductor_norm_bwd.py",
                                *(argv if argv is not None else sys.argv[1:])])  # fmt: skip
    for m, n in cells:
        for op in ops:
            impls = {"normlab": lambda M, N, dt, d, op=op: registry.get(op, "normlab").build(
                M, N, dt, d, "cuda")}  # fmt: skip
            for mode in modes:
                impls[f"compile {mode}"] = (lambda M, N, dt, d, op=op, mode=mode:
                                            registry.norm_case(_compiled(op, mode), op, M, N, dt,
                                                               d, "cuda"))  # fmt: skip
            for impl, build in impls.items():
                before = set(_kernel_sources())
                run = build(m, n, torch.bfloat16, "bwd")
                rec = measure(run, op, impl, m, n, torch.bfloat16, "bwd", device=dev,
                              reps=args.reps, command=command)  # fmt: skip
                write_jsonl([rec], args.out / "records.jsonl", append=True)  # kept if cut short
                print(f"{op} bwd {m}x{n} {impl}: {rec.device_us:.1f} us "
                      f"({rec.gbps:.0f} GB/s)", flush=True)  # fmt: skip
                if impl != "normlab":
                    sources = {k: v for k, v in _kernel_sources().items() if k not in before}
                    name = f"{op}_{m}x{n}_{impl.split()[1]}.py"
                    text = [f"# {op} {m}x{n} bf16 {impl}: {rec.device_us:.1f} us backward, "
                            f"{dev.card}, torch {torch.__version__}"]  # fmt: skip
                    text += _kept_configs(set(sources))
                    text += [f"\n# ---- {Path(p).name}\n{src}" for p, src in sources.items()]
                    (args.out / name).write_text("\n".join(text))
                    torch._dynamo.reset()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
