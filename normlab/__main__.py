"""The headless entry point: ``python -m normlab {info,bench,report}`` (also the ``normlab``
script).

* ``info``: card, runtime mode, versions, SMs, L2, datasheet and measured copy bandwidth.
* ``bench``: measures the copy roofline, then the chosen impls, prints a table, writes records.
  On CPU, a sweep estimated above ``CPU_CONFIRM_SECONDS`` is refused (with the estimate) unless
  ``--yes`` is given; a long sweep shows its progress with an ETA on stderr.
* ``report``: provided by ``normlab/report.py`` (imported only when asked for).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from normlab.losses.config import FORMS as LOSS_FORMS
from normlab.norms.config import BLOCK_ROW_STRATEGIES
from normlab.norms.config import LAYOUTS as NORM_LAYOUTS
from normlab.norms.config import STRATEGIES as NORM_STRATEGIES

NORM_OPS = ("rms_norm", "layer_norm")
ADD_NORM_OPS = ("add_rms_norm", "add_layer_norm")
LOSS_OPS = ("reverse_kl", "soft_cross_entropy", "forward_kl", "jsd", "cross_entropy")
OPS = NORM_OPS + ADD_NORM_OPS + LOSS_OPS + ("copy",)
IMPLS = ("eager", "torch", "compile", "normlab", "liger", "quack")
DTYPES = ("bf16", "fp16", "fp32")
DIRECTIONS = ("fwd", "bwd", "fwd+bwd")
# On a CPU, a sweep estimated above this many seconds needs --yes.
CPU_CONFIRM_SECONDS = 300


def _csv(text: str) -> list[str]:
    items = [s.strip() for s in text.split(",")]
    if not any(items):
        raise argparse.ArgumentTypeError(f"empty list {text!r}")
    if not all(items):
        raise argparse.ArgumentTypeError(f"empty item in {text!r}")
    return items


def _choices(what: str, allowed: tuple[str, ...], *, extra: tuple[str, ...] = ()):
    """A ``type=`` for a comma list whose items are each one of ``allowed`` (or ``extra``)."""

    def parse(text: str) -> list[str]:
        items = _csv(text)
        for item in items:
            if item not in allowed + extra:
                raise argparse.ArgumentTypeError(
                    f"unknown {what} {item!r} (expected {', '.join(allowed + extra)})"
                )
        return list(dict.fromkeys(items))  # once each, in the order given

    return parse


def _dtypes(text: str) -> list[str]:
    from normlab.bench.records import dtype_name, parse_dtype

    names = []
    for item in _csv(text):
        try:
            name = dtype_name(parse_dtype(item))
        except ValueError:
            name = None
        if name not in DTYPES:
            raise argparse.ArgumentTypeError(
                f"unknown dtype {item!r} (expected {', '.join(DTYPES)})"
            )
        names.append(name)
    return list(dict.fromkeys(names))


def _block_caps(text: str) -> list[int | None]:
    from normlab.losses import config as configs

    lo, hi = configs.ENTROPY_MIN_BLOCK, configs.ENTROPY_MAX_BLOCK
    caps: list[int | None] = []
    for item in _csv(text):
        if item.lower() == "none":
            caps.append(None)
            continue
        cap = int(item) if item.isdigit() else 0
        if not lo <= cap <= hi or cap & (cap - 1):
            raise argparse.ArgumentTypeError(
                f"bad block cap {item!r}: expected none or a power of two in [{lo}, {hi}] "
                f"(measured: {', '.join(map(str, configs.ENTROPY_BLOCK_CAPS))})"
            )
        caps.append(cap)
    return list(dict.fromkeys(caps))


def _shapes(text: str) -> str:
    from normlab.bench.sweep import parse_shapes

    try:
        parse_shapes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _int_at_least(low: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{value} is below {low}")
        return value

    return parse


def _records_path(text: str) -> Path:
    """A path a records file can be written to: .jsonl or .csv, not a folder, under a folder."""
    path = Path(text)
    if path.suffix.lower() not in (".jsonl", ".csv", ".json"):
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected a .jsonl or .csv file name (.json with --overhead)")
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a folder")
    parent = existing = path.absolute().parent
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r}: {existing} is not a folder")
    try:  # made now (write_records would make it after the run): a place that cannot be fails here
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise argparse.ArgumentTypeError(
            f"{text!r}: cannot make {parent}: {exc.strerror or exc}") from None
    if not os.access(parent, os.W_OK):
        raise argparse.ArgumentTypeError(f"{text!r}: {parent} is not writable")
    return path


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line on stderr, exit status 2."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _build_parser() -> _Parser:
    parser = _Parser(
        prog="normlab",
        description="normlab: fused Triton kernels for norms and losses, and the lab to measure "
                    "them.",
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
        type=_int_at_least(1),
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
        type=_choices("op", OPS, extra=("all",)),
        default=None,
        help=f"comma list of ops (default rms_norm,layer_norm; 'all'): "
        f"{', '.join(NORM_OPS + ADD_NORM_OPS + LOSS_OPS)}, copy",
    )
    bench.add_argument(
        "--impl",
        type=_choices("impl", IMPLS, extra=("normlab+compile",)),
        default=None,
        help="comma list of impls (default: all of each op's, where available): "
        "eager, torch, compile, normlab, liger, quack; named only: normlab+compile (normlab "
        "inside torch.compile: the losses, and every op with --overhead)",
    )
    bench.add_argument(
        "--strategy",
        type=_choices("strategy", NORM_STRATEGIES),
        default=None,
        help="normlab norm strategies: auto, atomic, two_stage, persistent",
    )
    bench.add_argument(
        "--layout",
        type=_choices("layout", NORM_LAYOUTS),
        default=None,
        help="normlab norm layouts: auto, row, block_row",
    )
    bench.add_argument(
        "--form",
        type=_choices("form", LOSS_FORMS),
        default=None,
        help="normlab loss forms: auto, fused, chunked, split",
    )
    bench.add_argument(
        "--block-cap",
        type=_block_caps,
        default=None,
        help="normlab loss tile caps: none, 4096, 8192, 16384, 32768 (or another power of two "
        "in [16, 65536])",
    )
    bench.add_argument(
        "--shapes",
        type=_shapes,
        default=None,
        help="presets peers|narrow|losses|quick|population|vocab_population and/or MxN items, "
        "comma-separated (default peers for norms, losses for losses; quick with --quick)",
    )
    bench.add_argument(
        "--dtype", type=_dtypes, default=["bf16"], help="comma list: bf16, fp16, fp32"
    )
    bench.add_argument(
        "--direction",
        type=_choices("direction", DIRECTIONS),
        default=None,
        help="comma list: fwd, bwd, fwd+bwd (default fwd,bwd for norms, fwd+bwd for losses)",
    )
    bench.add_argument(
        "--reps",
        type=_int_at_least(1),
        default=None,
        help="timed calls per case (default 30 GPU, 5 CPU)",
    )
    bench.add_argument(
        "--warmup",
        type=_int_at_least(0),
        default=None,
        help="untimed calls first (compilation; default 3, 1 with --quick on CPU)",
    )
    bench.add_argument(
        "--model", choices=("minimal", "full"), default="minimal",
        help="bytes model (full: + weights, row statistics, labels; the backward's fp32 partial "
        "rows are not counted here, their number depends on the strategy)",
    )
    bench.add_argument(
        "--quick",
        action="store_true",
        help="tiny shapes and few reps: a CPU smoke run of every impl, normlab's kernels in "
        "the Triton interpreter (seconds to a minute)",
    )
    bench.add_argument(
        "--yes",
        "--force",
        dest="yes",
        action="store_true",
        help=f"run a sweep estimated above {CPU_CONFIRM_SECONDS // 60} min on CPU (refused "
        "otherwise, with the estimate)",
    )
    bench.add_argument(
        "--out", type=_records_path, default=None, help="write records to FILE.jsonl or FILE.csv"
    )
    bench.add_argument("--no-progress", action="store_true", help="no progress counter on stderr")
    bench.add_argument(
        "--overhead",
        action="store_true",
        help="host cost instead of device time: CPU µs per call in a launch-bound loop on a tiny "
        "input, and the isolated call's wall µs, forward and forward+backward, beside torch, "
        "torch.compile and Liger (--op/--impl select; --out FILE.json). On CPU these are "
        "interpreter figures",
    )

    report = sub.add_parser(
        "report",
        help="render recorded runs (normlab.report)",
        add_help=False,
        description="Provided by normlab.report; arguments are passed through.",
    )
    report.add_argument("args", nargs=argparse.REMAINDER)
    parser.subcommands = {"info": info, "bench": bench, "report": report}
    return parser


def _cmd_info(args, parser) -> int:
    from normlab.bench.device import device_info

    if args.no_copy and args.copy_mib is not None:
        parser.error("argument --copy-mib: not allowed with --no-copy")
    copy_bytes = args.copy_mib * 2**20 if args.copy_mib else None
    try:
        info = device_info(measure_copy=not args.no_copy, copy_bytes=copy_bytes)
    except (MemoryError, RuntimeError) as exc:  # torch.OutOfMemoryError is a RuntimeError
        if args.copy_mib is None:
            raise
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        parser.error(f"argument --copy-mib: cannot measure a {args.copy_mib} MiB copy: {first}")
    print("\n".join(info.lines()))
    return 0


def _bench_jobs(args, parser) -> list[tuple[str, list[str] | None, str, list[str] | None]]:
    """(op, impls, shapes, directions) per op the arguments select, after checking that each
    argument applies to something in the run."""
    from normlab.bench import registry

    ops = args.op or list(NORM_OPS)
    if "all" in ops:
        if ops != ["all"]:
            parser.error("argument --op: 'all' cannot be combined with other ops")
        ops = list(NORM_OPS + ADD_NORM_OPS + LOSS_OPS)
    if args.impl:
        known = {name for op in ops for name in registry.REGISTRY[op]}
        unknown = [i for i in args.impl if i not in known]
        if unknown:
            parser.error(
                f"argument --impl: {', '.join(unknown)} implements none of {', '.join(ops)} "
                f"(their impls: {', '.join(sorted(known))})"
            )
    if args.direction:
        for d in args.direction:
            impls = [impl for op in ops for impl in registry.REGISTRY[op].values()]
            if not any(d in impl.directions for impl in impls):
                parser.error(f"argument --direction: {d} applies to none of {', '.join(ops)}")

    jobs = []
    notes = []  # said once the arguments are known to be good
    for op in ops:
        if args.shapes:
            shapes = args.shapes
        elif args.quick:
            shapes = "quick"
        else:
            shapes = ("peers" if op in NORM_OPS + ADD_NORM_OPS else "losses" if op in LOSS_OPS
                      else "64x2097152")  # fmt: skip
        impls = [i for i in args.impl if i in registry.REGISTRY[op]] if args.impl else None
        if impls == []:
            continue
        directions = None
        if args.direction:
            supported = {d for impl in registry.REGISTRY[op].values() for d in impl.directions}
            directions = [d for d in args.direction if d in supported]
            if not directions:
                notes.append(f"skipped: {op}: none of {','.join(args.direction)} applies")
                continue
        jobs.append((op, impls, shapes, directions))

    # normlab's knobs must reach a normlab impl of their op family
    for flags, family in ((("strategy", "layout"), NORM_OPS + ADD_NORM_OPS),
                          (("form", "block_cap"), LOSS_OPS)):  # fmt: skip
        runs_normlab = any(
            op in family and (impls is None or "normlab" in impls or "normlab+compile" in impls)
            for op, impls, _, _ in jobs
        )  # fmt: skip
        for flag in flags:
            if getattr(args, flag) is not None and not runs_normlab:
                parser.error(
                    f"argument --{flag.replace('_', '-')}: applies to normlab's "
                    f"{'/'.join(family)}, and this run has none"
                )
    if args.strategy and args.layout and not any(
        layout != "block_row" or strategy in BLOCK_ROW_STRATEGIES
        for strategy in args.strategy for layout in args.layout
    ):  # fmt: skip
        parser.error(
            f"argument --strategy: {','.join(args.strategy)} does not exist for --layout "
            f"block_row (its backward is always persistent): use auto or persistent"
        )
    if not jobs:
        parser.error("nothing to run: no op takes these --impl and --direction together")
    for note in notes:
        print(note, file=sys.stderr)
    return jobs


def _check_cpu_cost(args, jobs, options, reps, warmup, parser) -> None:
    """On a CPU, refuse a sweep estimated above CPU_CONFIRM_SECONDS unless --yes is given."""
    from normlab import _runtime
    from normlab.bench.progress import format_duration
    from normlab.bench.sweep import CpuEstimate, estimate_cpu

    if _runtime.DEVICE == "cuda":
        return
    total = CpuEstimate(0, 0.0, 0.0, 0)
    for op, impls, shapes, directions in jobs:
        total += estimate_cpu(
            op, impls, shapes, args.dtype, directions, options=options, reps=reps, warmup=warmup
        )
    if total.seconds <= CPU_CONFIRM_SECONDS:
        return
    what = (
        f"{total.cases} cases, estimated ~{format_duration(total.seconds)} on this CPU"
        + (
            f" ({total.interpreter_elements / 1e6:,.0f}M elements through the Triton "
            f"interpreter, ~{format_duration(total.interpreter_seconds)})"
            if total.interpreter_seconds
            else ""
        )
    )
    if args.yes:
        print(f"note: {what}; running it (--yes)", file=sys.stderr, flush=True)
        return
    parser.exit(
        2,
        f"normlab bench: error: this sweep is {what}: use --quick or --shapes quick "
        f"(or small MxN shapes) on CPU, or --yes to run it anyway\n",
    )


def _cmd_overhead(args, argv: list[str], parser) -> int:
    from normlab.bench import overhead
    from normlab.bench.records import portable_command

    if args.out is not None and args.out.suffix.lower() != ".json":
        parser.error("--overhead writes FILE.json (--out)")
    ops = [o for o in (args.op or overhead.OPS) if o in overhead.OPS]
    if not ops:
        parser.error(f"--overhead measures {', '.join(overhead.OPS)}; --op named none of them")
    impls = [i for i in (args.impl or overhead.IMPLS) if i in overhead.IMPLS]
    if not impls:
        parser.error(f"--overhead compares {', '.join(overhead.IMPLS)}; --impl named none")
    progress = None if args.no_progress else (lambda what: print(what, file=sys.stderr))
    costs = overhead.measure_overhead(ops=tuple(ops), impls=tuple(impls), progress=progress)
    print(overhead.format_overhead(costs))
    if args.out:
        command = portable_command(["python", "-m", "normlab", *argv])
        overhead.write_overhead(costs, args.out, command=command)
        print(f"wrote {len(costs)} host costs to {args.out}")
    return 0


def _cmd_bench(args, argv: list[str], parser) -> int:
    from normlab import _runtime

    if args.overhead:
        return _cmd_overhead(args, argv, parser)
    if args.out is not None and args.out.suffix.lower() == ".json":
        parser.error("--out FILE.json is for --overhead; records go to FILE.jsonl or FILE.csv")
    from normlab.bench.device import device_info
    from normlab.bench.records import portable_command, write_records
    from normlab.bench.sweep import CPU_LABEL, Results, format_table, sweep

    jobs = _bench_jobs(args, parser)
    reps = args.reps
    if reps is None and args.quick:
        reps = 5
    warmup = args.warmup
    if warmup is None:  # the interpreter compiles nothing: one untimed call is enough
        warmup = 1 if args.quick and _runtime.DEVICE != "cuda" else 3
    options = {
        "strategy": args.strategy,
        "layout": args.layout,
        "form": args.form,
        "block_cap": args.block_cap,
    }
    _check_cpu_cost(args, jobs, options, reps, warmup, parser)
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

    for op, impls, shapes, directions in jobs:
        result = sweep(
            op,
            impls,
            shapes,
            args.dtype,
            directions,
            options=options,
            reps=reps,
            warmup=warmup,
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
    sub_parser = parser.subcommands[args.command]
    try:
        if args.command == "info":
            return _cmd_info(args, sub_parser)
        if args.command == "bench":
            return _cmd_bench(args, argv, sub_parser)
        return _cmd_report(args.args)
    except ValueError as exc:  # a bad value found late: a usage error, not a traceback
        sub_parser.exit(2, f"normlab {args.command}: error: {exc}\n")


if __name__ == "__main__":
    sys.exit(main())
