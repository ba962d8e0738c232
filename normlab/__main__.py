"""The headless entry point: ``python -m normlab {info,bench,report}`` (also the ``normlab`` script).

* ``info``: card, runtime mode, versions, SMs, L2, datasheet and measured copy bandwidth.
* ``bench``: measures the copy roofline, then the chosen impls, prints a table, writes records.
* ``report``: provided by ``normlab/report.py`` (imported only when asked for).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

NORM_OPS = ("rms_norm", "layer_norm")
LOSS_OPS = ("reverse_kl", "soft_cross_entropy", "cross_entropy")


def _csv(text: str) -> list[str]:
    return [s.strip() for s in text.split(",") if s.strip()]


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="normlab",
        description="normlab: fused Triton kernels for norms and losses, and the lab to measure them.",
    )
    sub = parser.add_subparsers(dest="command", metavar="{info,bench,report}")
    sub.required = True

    info = sub.add_parser(
        "info",
        help="card, mode, versions, SMs, L2, datasheet and copy bandwidth",
        description="Describe the device normlab runs on and measure its copy "
        "bandwidth (a large device-to-device copy, bytes read + written).",
    )
    info.add_argument("--no-copy", action="store_true", help="skip the copy-bandwidth measurement")
    info.add_argument(
        "--copy-mib",
        type=int,
        default=None,
        help="copy buffer size in MiB (default 1024 on a GPU, 64 on CPU)",
    )

    bench = sub.add_parser(
        "bench",
        help="measure impls over shapes; print a table; write records",
        description="Measure the copy roofline, then each impl (device time from torch.profiler "
        "with a cold L2, wall time from CUDA events), print a table and write records. On CPU "
        "the timings are CPU/interpreter timings and say nothing about GPU bandwidth.",
    )
    bench.add_argument(
        "--op",
        type=_csv,
        default=None,
        help=f"comma list of ops (default rms_norm,layer_norm; 'all'): "
        f"{', '.join(NORM_OPS + LOSS_OPS)}, copy",
    )
    bench.add_argument(
        "--impl",
        type=_csv,
        default=None,
        help="comma list of impls (default: all of each op's, where available): "
        "eager, torch, compile, normlab, liger, quack",
    )
    bench.add_argument(
        "--strategy",
        type=_csv,
        default=None,
        help="normlab norm strategies: auto, atomic, two_stage, persistent",
    )
    bench.add_argument(
        "--layout", type=_csv, default=None, help="normlab norm layouts: auto, row, block_row"
    )
    bench.add_argument(
        "--form", type=_csv, default=None, help="normlab loss forms: auto, fused, chunked, split"
    )
    bench.add_argument(
        "--block-cap",
        type=_csv,
        default=None,
        help="normlab loss tile caps: none, 4096, 8192, 16384, 32768",
    )
    bench.add_argument(
        "--shapes",
        default=None,
        help="presets peers|narrow|losses|quick and/or MxN items, comma-separated "
        "(default peers for norms, losses for losses; quick with --quick)",
    )
    bench.add_argument("--dtype", type=_csv, default=["bf16"], help="comma list: bf16, fp16, fp32")
    bench.add_argument(
        "--direction",
        type=_csv,
        default=None,
        help="comma list: fwd, bwd, fwd+bwd (default fwd,bwd for norms, fwd+bwd for losses)",
    )
    bench.add_argument(
        "--reps", type=int, default=None, help="timed calls per case (default 30 GPU, 5 CPU)"
    )
    bench.add_argument("--warmup", type=int, default=3, help="untimed calls first (compilation)")
    bench.add_argument(
        "--model", choices=("minimal", "full"), default="minimal",
        help="bytes model (full: + weights, row statistics, labels; the backward's fp32 partial "
        "rows are not counted here, their number depends on the strategy)",
    )
    bench.add_argument(
        "--quick", action="store_true", help="tiny shapes and few reps (CPU smoke run)"
    )
    bench.add_argument(
        "--out", type=Path, default=None, help="write records to FILE.jsonl or FILE.csv"
    )
    bench.add_argument("--no-progress", action="store_true", help="no progress counter on stderr")

    report = sub.add_parser(
        "report",
        help="render recorded runs (normlab.report)",
        add_help=False,
        description="Provided by normlab.report; arguments are passed through.",
    )
    report.add_argument("args", nargs=argparse.REMAINDER)
    return parser


def _cmd_info(args) -> int:
    from normlab.bench.device import device_info

    copy_bytes = args.copy_mib * 2**20 if args.copy_mib else None
    info = device_info(measure_copy=not args.no_copy, copy_bytes=copy_bytes)
    print("\n".join(info.lines()))
    return 0


def _block_caps(values: list[str] | None) -> list[int | None] | None:
    if values is None:
        return None
    caps: list[int | None] = []
    for v in values:
        if v.lower() == "none":
            caps.append(None)
        elif v.isdigit():
            caps.append(int(v))
        else:
            raise ValueError(f"bad --block-cap {v!r}: expected none or an integer")
    return caps


def _cmd_bench(args, argv: list[str]) -> int:
    from normlab import _runtime
    from normlab.bench import registry
    from normlab.bench.device import device_info
    from normlab.bench.records import parse_dtype, portable_command, write_records
    from normlab.bench.sweep import CPU_LABEL, Results, format_table, parse_shapes, sweep

    ops = args.op or list(NORM_OPS)
    if ops == ["all"]:
        ops = list(NORM_OPS + LOSS_OPS)
    for op in ops:
        if op not in registry.REGISTRY:
            raise ValueError(f"unknown op {op!r} (expected {', '.join(registry.REGISTRY)})")
    if args.impl:
        known = {name for op in ops for name in registry.REGISTRY[op]}
        unknown = [i for i in args.impl if i not in known]
        if unknown:
            raise ValueError(
                f"unknown impl(s) {', '.join(unknown)} for "
                f"{', '.join(ops)} (expected {', '.join(sorted(known))})"
            )
    if args.shapes:  # fail on a typo before spending time on the copy roofline
        parse_shapes(args.shapes)
    for dtype in args.dtype:
        parse_dtype(dtype)
    reps = args.reps
    if reps is None and args.quick:
        reps = 5
    options = {
        "strategy": args.strategy,
        "layout": args.layout,
        "form": args.form,
        "block_cap": _block_caps(args.block_cap),
    }
    command = portable_command(["python", "-m", "normlab", *argv])

    info = device_info(measure_copy=True)
    print(
        f"copy roofline: {info.copy.gbps:.0f} GB/s ({info.copy.n_bytes / 2**30:.2f} GiB "
        f"device-to-device copy, median of {info.copy.reps}); "
        f"datasheet {f'{info.datasheet_gbps:.0f} GB/s' if info.datasheet_gbps else 'unknown'}; "
        f"{info.card}, mode {info.mode}",
        flush=True,
    )
    if _runtime.DEVICE != "cuda":
        print(CPU_LABEL, flush=True)

    everything = Results(device=info)

    def on_record(rec) -> None:
        everything.append(rec)
        if args.out:  # rewritten after each case, so an interrupted run keeps what it measured
            write_records(everything, args.out)

    for op in ops:
        if args.shapes:
            shapes = args.shapes
        elif args.quick:
            shapes = "quick"
        else:
            shapes = "peers" if op in NORM_OPS else "losses" if op in LOSS_OPS else "64x2097152"
        if args.impl:
            impls = [i for i in args.impl if i in registry.REGISTRY[op]]
        elif args.quick and _runtime.INTERPRET:  # the interpreter runs ~1 ms per program
            impls = [name for name, impl in registry.REGISTRY[op].items() if impl.baseline]
        else:
            impls = None
        if impls == []:
            continue
        directions = None
        if args.direction:
            supported = {d for impl in registry.REGISTRY[op].values() for d in impl.directions}
            directions = [d for d in args.direction if d in supported]
            if not directions:
                print(f"skipped: {op}: none of {','.join(args.direction)} applies", file=sys.stderr)
                continue
        result = sweep(
            op,
            impls,
            shapes,
            args.dtype,
            directions,
            options=options,
            reps=reps,
            warmup=args.warmup,
            device=info,
            model=args.model,
            progress=None if args.no_progress else "terminal",
            on_record=on_record,
            command=command,
        )
        everything.skipped.extend(result.skipped)
    print(format_table(everything, everything.skipped))
    if args.out:
        write_records(everything, args.out)
        print(f"wrote {len(everything)} records to {args.out}")
    return 0


def _cmd_report(argv: list[str]) -> int:
    from normlab import report

    return report.main(argv) or 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _build_parser()
    if argv[:1] == ["report"]:  # everything after `report` belongs to normlab.report
        return _cmd_report(argv[1:])
    args = parser.parse_args(argv)
    try:
        if args.command == "info":
            return _cmd_info(args)
        if args.command == "bench":
            return _cmd_bench(args, argv)
        return _cmd_report(args.args)
    except ValueError as exc:  # bad shapes, dtypes, directions: a usage error, not a traceback
        parser.exit(2, f"normlab {args.command}: error: {exc}\n")


if __name__ == "__main__":
    sys.exit(main())
