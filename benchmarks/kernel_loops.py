"""SASS instructions per loop of the loss kernels, by option, compiled for sm_90 (no GPU).

    python3 benchmarks/kernel_loops.py [--form fused|chunked] [--block 4096 --warps 4]
        [--maxnreg 64] [--target fp32] [--one-hot-in-loop] [--plain-exp] [--poly-exp2]
        [--no-thread-stats] [--persistent] [--out FILE]
    python3 benchmarks/kernel_loops.py --ship benchmarks/data/kernel_loops_*_sm90.txt ...

Compiles ``losses.fused._entropy_fused_kernel`` (or ``losses.chunked._entropy_chunked_kernel``,
label CE's form at V >= 65536) ahead of time for an H100/H200 (``sm_90``) with this machine's
Triton and its ``ptxas``, for label cross-entropy with each option on alone and all together,
for reverse KL and soft CE with and without a temperature, and for JSD; prints registers, the
stack a thread spills to (ptxas' ``STACK``: local memory; cuobjdump's ``LOCAL`` stays 0 for
spills), the shared memory a program takes and, for each loop of the SASS, its instructions,
their count per logit (a tile of ``--block`` logits over ``32 * --warps`` threads) and the
commonest opcodes. An option that costs time in a memory-bound kernel costs it in these loops:
the row statistics' pass and the gradient's.

Each variant's line ends with a model, computed and not measured: the instructions and MUFU
operations a logit over the loops that hold a MUFU op (the tile loops, each run once over the
row), and the least time to issue them and to run the MUFU ops over ``--shape`` (M x V) logits,
at 4 warp instructions a clock an SM (one per scheduler) and 16 MUFU results a clock an SM (the
CUDA C Programming Guide's throughput table, compute capability 9.0), ``--sms`` SMs and
``--clock-ghz`` (``normlab.bench.pipes``). Compare them with the op's measured device time and
its bytes at copy speed.

``--ship`` parses recorded outputs (files named ``kernel_loops_<what>_<commit>_sm90.txt``) into
``normlab/data/sm90-loss-loops.json``, which notebook 07 plots beside the measured times
(``normlab.bench.devdata.loss_loops``, ``normlab.viz.option_bounds``): per variant, the
compile's kernel, tile, warps, register cap and switches, its registers and stack, and its
instructions and MUFU operations a logit, with ``--sms`` and ``--clock-ghz`` as the model's.

The compile needs no GPU, but normlab must define its kernels compiled rather than interpreted:
this script makes ``torch.cuda.is_available`` answer True before importing normlab, and launches
nothing. Triton's code generation changes between versions: say which one a figure came from.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "0"  # compiled kernels, even when a caller interprets
os.environ["NORMLAB_MODE"] = "auto"
if "--one-hot-in-loop" in sys.argv:  # read by normlab.losses.online at import
    os.environ["NORMLAB_LOSS_LABEL_AFTER"] = "0"
if "--plain-exp" in sys.argv:  # likewise
    os.environ["NORMLAB_LOSS_FAST_EXP"] = "0"
if "--poly-exp2" in sys.argv:  # likewise
    os.environ["NORMLAB_LOSS_POLY_EXP2"] = "1"
if "--no-thread-stats" in sys.argv:  # read by normlab.losses.config at import
    os.environ["NORMLAB_LOSS_THREAD_STATS"] = "0"

import torch

torch.cuda.is_available = lambda: True  # compiled kernels on a machine without a GPU (above)

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from normlab.bench import devdata, pipes  # noqa: E402
from normlab.bench.sweep import parse_shapes  # noqa: E402
from normlab.losses import config  # noqa: E402
from normlab.losses.chunked import _entropy_chunked_kernel  # noqa: E402
from normlab.losses.fused import _entropy_fused_kernel  # noqa: E402

POINTERS = {"x_ptr": "*bf16", "t_ptr": "*bf16", "labels_ptr": "*i64", "grad_ptr": "*bf16",
            "loss_ptr": "*fp32", "n_valid_ptr": "*fp32", "out_ptr": "*fp32",
            "ticket_ptr": "*i32", "mask_ptr": "*i1"}  # fmt: skip
SCALARS = {"grad_scale": "fp32", "ignore_index": "i32", "n_rows": "i32", "n_cols": "i32",
           "x_row_stride": "i32",
           "t_row_stride": "i32", "grad_row_stride": "i32", "xparam": "fp32", "beta": "fp32",
           "smoothing": "fp32", "uniform_weight": "fp32", "z_loss": "fp32"}  # fmt: skip
ALIGNED = ("x_ptr", "t_ptr", "labels_ptr", "grad_ptr", "loss_ptr", "n_valid_ptr", "out_ptr",
           "ticket_ptr", "n_cols", "x_row_stride", "t_row_stride", "grad_row_stride")
# variant -> (KIND, XFORM, SMOOTH, ZLOSS): the options as config.kernel_args sets them for bf16
CE, RKL, SCE, JSD = (config.KINDS[k] for k in ("cross_entropy", "reverse_kl",
                                                "soft_cross_entropy", "jsd"))
APPROX, TEMPERATURE = config.XFORMS["softcap_approx"], config.XFORMS["temperature"]
VARIANTS = {
    "cross_entropy": (CE, 0, False, False),
    "cross_entropy label_smoothing": (CE, 0, True, False),
    "cross_entropy z_loss": (CE, 0, False, True),
    "cross_entropy softcap": (CE, APPROX, False, False),
    "cross_entropy all three": (CE, APPROX, True, True),
    "reverse_kl": (RKL, 0, False, False),
    "reverse_kl T=2": (RKL, TEMPERATURE, False, False),
    "soft_cross_entropy": (SCE, 0, False, False),
    "soft_cross_entropy T=2": (SCE, TEMPERATURE, False, False),
    "jsd": (JSD, 0, False, False),
}
_INSTR = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_LABEL = re.compile(r"^\.?(L_x_\d+):")
_BRANCH = re.compile(r"\bBRA\b.*?`?\(?\.?(L_x_\d+)")


# The chunked form's own arguments (a row of 131072 in 8 chunks: config.entropy_chunk_tiles).
CHUNKED_POINTERS = {"stats_ptr": "*fp32", "sync_ptr": "*i32"}
CHUNKED_SCALARS = {"n_rows": "i32", "n_chunks": "i32", "chunk_tiles": "i32", "n_long": "i32"}
CHUNKED_CONSTANTS = {"PHASE": 3, "CHUNKS_POW2": 8}


def compile_variant(kind, xform, smooth, zloss, block, warps, arch, form="fused", maxnreg=None,
                    target="bf16", persistent=False):  # fmt: skip
    """The compiled kernel of one variant (forward+backward: COMPUTE_GRAD, a mean over the
    counted rows, aligned rows) in ``form`` (fused or chunked), its registers capped at
    ``maxnreg`` (None: no cap), the target logits in ``target`` ("bf16" or "fp32"); the fused
    form's programs taking the rows from a queue with ``persistent``."""
    constants = {"KIND": kind, "COMPUTE_GRAD": True, "ACCUMULATE": False,
                 "MEAN_OVER_VALID": True, "COUNT": True, "REDUCE": 0, "BLOCK": block,
                 "LANE": config.entropy_lane(block), "ALIGN": 1, "FRAME": 1, "XFORM": xform,
                 "HAS_MASK": False, "SMOOTH": smooth, "ZLOSS": zloss}  # fmt: skip
    kernel = _entropy_fused_kernel
    types = {**POINTERS, **SCALARS, "t_ptr": f"*{target}"}
    if form == "fused":  # every constexpr in the signature: Triton 3.9 takes no defaults here
        constants["PERSISTENT"] = persistent
    if form == "chunked":
        kernel = _entropy_chunked_kernel
        types = {**types, **CHUNKED_POINTERS, **CHUNKED_SCALARS}
        constants = {**constants, **CHUNKED_CONSTANTS}
    names = kernel.arg_names
    signature = {n: types[n] if n in types else "constexpr" for n in names if n in types
                 or n in constants}  # fmt: skip
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in ALIGNED}
    constants["THREADS"] = config.entropy_threads(  # bf16 logits
        kind, block, warps, 2, form == "fused" and xform >= config.XFORMS["softcap"])
    signature["THREADS"] = "constexpr"
    src = ASTSource(kernel, signature, constants, attrs)
    options = {"num_warps": warps} if maxnreg is None else {"num_warps": warps, "maxnreg": maxnreg}
    return triton.compile(src, target=GPUTarget("cuda", arch, 32), options=options)


def _tool(name: str) -> str:
    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name)


def disassemble(kernel) -> tuple[str, str]:
    """(cuobjdump's resource usage, nvdisasm's SASS) of a compiled kernel's cubin."""
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "k.cubin"
        cubin.write_bytes(kernel.asm["cubin"])
        usage = subprocess.run([_tool("cuobjdump"), "--dump-resource-usage", str(cubin)],
                               capture_output=True, text=True, check=True).stdout  # fmt: skip
        sass = subprocess.run([_tool("nvdisasm"), "-c", str(cubin)], capture_output=True,
                              text=True, check=True).stdout  # fmt: skip
    return usage, sass


def analyse(kernel) -> tuple[dict, list]:
    """(resource usage, loops): usage as ptxas' REG, STACK, SHARED and the SASS's instruction
    count (INSTR); loops as (instructions, opcode counts), one per backward branch of the SASS
    that encloses no other."""
    usage, sass = disassemble(kernel)
    resources = {k: int(v) for k, v in re.findall(r"\b(REG|STACK|SHARED):(\d+)", usage)}
    instrs, labels, pending = [], {}, []
    for line in sass.splitlines():
        label = _LABEL.match(line.strip())
        if label:
            pending.append(label.group(1))
            continue
        m = _INSTR.match(line)
        if m:
            addr = int(m.group(1), 16)
            for name in pending:
                labels[name] = addr
            pending = []
            instrs.append((addr, re.sub(r"^@!?U?P\w+\s+", "", m.group(2))))
    resources["INSTR"] = len(instrs)
    spans = []
    for addr, text in instrs:
        target = _BRANCH.search(text)
        if target and labels.get(target.group(1), addr + 1) <= addr:
            spans.append((labels[target.group(1)], addr))
    loops = []
    for start, end in spans:  # innermost: a loop around others (a row loop) counts them twice
        if any(start <= s and e <= end and (s, e) != (start, end) for s, e in spans):
            continue
        body = [t for a, t in instrs if start <= a <= end]
        loops.append((len(body), collections.Counter(t.split()[0].split(".")[0] for t in body)))
    return resources, loops


_HEADER = re.compile(r"^_entropy_(?P<kernel>\w+)_kernel, sm_(?P<arch>\d+), triton (?P<triton>\S+), "
                     r"tile (?P<tile>\d+) at (?P<warps>\d+) warps .*?, (?P<target>\w+) target"
                     r"(?:, at most (?P<maxnreg>\d+) registers)?;")
_VARIANT = re.compile(r"^(?P<variant>[^:\n]+): (?P<registers>\d+) registers, (?P<stack>\d+) B "
                      r"stack, \d+ B shared; (?P<instructions>[\d.]+) instructions and "
                      r"(?P<mufu>[\d.]+) MUFU a logit")
_SOURCE = re.compile(r"^kernel_loops_.*_(?P<commit>[0-9a-f]{7,40})_sm(?P<arch>\d+)\.txt$")


def parse_loops(text: str, name: str) -> list[dict]:
    """The variants of one recorded output ``name`` (``kernel_loops_<what>_<commit>_sm90.txt``)
    as rows: its compile (kernel, tile, warps, register cap, switches) and its counts."""
    source = _SOURCE.match(name)
    lines = text.splitlines()
    header = _HEADER.match(lines[0]) if lines else None
    if source is None or header is None:
        raise ValueError(f"{name}: not a kernel_loops output named kernel_loops_<what>_<commit>_"
                         "sm<arch>.txt")
    compile_ = {"source": name, "commit": source["commit"], "kernel": header["kernel"],
                "arch": f"sm_{header['arch']}", "triton": header["triton"],
                "tile": int(header["tile"]), "warps": int(header["warps"]),
                "maxnreg": int(header["maxnreg"]) if header["maxnreg"] else None,
                "target": header["target"],
                "poly_exp2": "softcap's gradient exp as poly_exp2" in lines[0],
                "thread_stats": "label CE's statistics per thread" in lines[0],
                "one_hot_in_loop": "one-hot in the gradient loop" in lines[0],
                "plain_exp": "; tl.exp" in lines[0]}  # fmt: skip
    rows = []
    for line in lines[1:]:
        m = _VARIANT.match(line)
        if m:
            rows.append({**compile_, "variant": m["variant"], "registers": int(m["registers"]),
                         "stack": int(m["stack"]), "instructions": float(m["instructions"]),
                         "mufu": float(m["mufu"])})  # fmt: skip
    if not rows:
        raise ValueError(f"{name}: no variant lines")
    return rows


def shipped(paths: list[Path], sms: int, clock_ghz: float, argv: list[str]) -> dict:
    """``normlab/data/sm90-loss-loops.json``: the rows of every file, and the model's rates."""
    from normlab.bench.records import portable_command

    rows = [row for path in paths for row in parse_loops(path.read_text(), path.name)]
    meta = {"model": {"sm_count": sms, "clock_ghz": clock_ghz,
                      "issue_per_clock_sm": pipes.ISSUE_PER_CLOCK_SM,
                      "mufu_per_clock_sm": pipes.MUFU_PER_CLOCK_SM},
            "command": portable_command([sys.executable, *argv]),
            "note": "SASS counts compiled without a GPU (not a measurement): instructions and "
                    "MUFU operations a logit over a loss kernel's tile loops"}  # fmt: skip
    return {"meta": meta, "rows": rows}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--block", type=int, default=4096, help="the column tile (a power of 2)")
    parser.add_argument("--warps", type=int, default=4)
    parser.add_argument("--arch", type=int, default=90, help="the SM version (90: H100/H200)")
    parser.add_argument("--out", type=Path, help="also write the lines here (with --ship: the "
                        "JSON, instead of normlab/data/sm90-loss-loops.json)")
    parser.add_argument("--form", choices=("fused", "chunked"), default="fused",
                        help="the kernel: fused (a row a program) or chunked (label CE's form "
                             "at V >= 65536)")
    parser.add_argument("--one-hot-in-loop", action="store_true",
                        help="label CE's one-hot compare in the gradient loop, not after it "
                             "(NORMLAB_LOSS_LABEL_AFTER=0)")
    parser.add_argument("--plain-exp", action="store_true",
                        help="tl.exp, not the one-instruction exp (NORMLAB_LOSS_FAST_EXP=0)")
    parser.add_argument("--poly-exp2", action="store_true",
                        help="softcap's gradient exp on the FMA pipe (NORMLAB_LOSS_POLY_EXP2=1)")
    parser.add_argument("--no-thread-stats", action="store_true",
                        help="label CE's one-lane statistics across the warps, as before "
                             "(NORMLAB_LOSS_THREAD_STATS=0)")
    parser.add_argument("--persistent", action="store_true",
                        help="the fused form's programs taking the rows from a queue (a grid of "
                             "fewer programs than rows: config.entropy_fused_programs)")
    parser.add_argument("--maxnreg", type=int, help="cap the registers per thread (as the chunked "
                        "form's launch does at some tiles)")
    parser.add_argument("--target", choices=("bf16", "fp32"), default="bf16",
                        help="the target logits' dtype (reverse KL's teacher)")
    parser.add_argument("--shape", default="4096x131072", help="M x V of the model's bounds")
    parser.add_argument("--sms", type=int, default=132, help="SMs of the model (H200: 132)")
    parser.add_argument("--clock-ghz", type=float, default=1.98,
                        help="SM clock of the model (H200 boost: 1.98)")
    parser.add_argument("--ship", type=Path, nargs="+", metavar="TXT",
                        help="recorded outputs -> normlab/data/sm90-loss-loops.json (no compile)")
    argv = list(argv) if argv is not None else sys.argv[1:]
    args = parser.parse_args(argv)
    if args.ship:
        if args.sms <= 0 or not args.clock_ghz > 0:
            parser.error("--sms and --clock-ghz must be positive")
        missing = [str(p) for p in args.ship if not p.is_file()]
        if missing:
            parser.error(f"--ship: no such file: {', '.join(missing)}")
        try:
            data = shipped(args.ship, args.sms, args.clock_ghz,
                           ["benchmarks/kernel_loops.py", *argv])
        except ValueError as err:
            parser.error(f"--ship: {err}")
        out = args.out or devdata.DATA / devdata.LOSS_LOOPS
        rows = ",\n".join(f"  {json.dumps(row)}" for row in data["rows"])  # a row a line
        meta = json.dumps(data["meta"], indent=1)
        out.write_text(f'{{"meta": {meta},\n "rows": [\n{rows}\n ]}}\n', encoding="utf-8")
        print(f"wrote {out} ({len(data['rows'])} variants from {len(args.ship)} files)")
        return 0
    try:
        shapes = parse_shapes(args.shape)
    except ValueError:
        shapes = []
    if len(shapes) != 1:
        parser.error(f"--shape takes MxV with positive integers, got {args.shape!r}")
    n_logits = math.prod(shapes[0])
    if args.sms <= 0 or not args.clock_ghz > 0:
        parser.error("--sms and --clock-ghz must be positive")
    if args.persistent and args.form != "fused":
        parser.error("--persistent is the fused form's grid")
    if args.maxnreg is not None and not 24 <= args.maxnreg <= 255:
        parser.error("--maxnreg must be in [24, 255]")
    if args.block < 16 or args.block & (args.block - 1):
        parser.error("--block must be a power of two, at least 16")
    if args.warps not in (1, 2, 4, 8, 16, 32) or args.block < 32 * args.warps:
        parser.error("--warps must be a power of two up to 32, at most --block / 32")
    per_thread = args.block // (32 * args.warps)
    lines = [f"_entropy_{args.form}_kernel, sm_{args.arch}, triton {triton.__version__}, tile "
             f"{args.block} at {args.warps} warps ({per_thread} logits a thread), bf16, "
             f"forward+backward, {args.target} target"
             + (f", at most {args.maxnreg} registers" if args.maxnreg else "")
             + "; loops with 60+ instructions"
             + ("; label CE's one-hot in the gradient loop" if args.one_hot_in_loop
                else "; label CE's one-hot after the loops")
             + ("; tl.exp" if args.plain_exp else "; exp as one ex2.approx.ftz")
             + ("; softcap's gradient exp as poly_exp2" if args.poly_exp2 else "")
             + ("; label CE's statistics per thread" if config.ENTROPY_THREAD_STATS else "")
             + ("; programs taking the rows from a queue" if args.persistent else "")]
    for name, variant in VARIANTS.items():
        kernel = compile_variant(*variant, args.block, args.warps, args.arch, args.form,
                                 args.maxnreg, args.target, args.persistent)  # fmt: skip
        res, loops = analyse(kernel)
        tile_loops = [(count, ops) for count, ops in loops if ops.get("MUFU")]
        issued = sum(count for count, _ in tile_loops) / per_thread
        mufu = sum(ops["MUFU"] for _, ops in tile_loops) / per_thread
        issue = pipes.issue_us(issued, n_logits, args.sms, args.clock_ghz)
        lines.append(f"{name}: {res.get('REG', 0)} registers, {res.get('STACK', 0)} B stack, "
                     f"{kernel.metadata.shared} B shared; "
                     f"{issued:.1f} instructions and {mufu:.1f} MUFU a logit: at {args.shape} "
                     f"at least {issue:.0f} us to issue, "
                     f"{pipes.mufu_us(mufu, n_logits, args.sms, args.clock_ghz):.0f} us of MUFU "
                     "(model)")
        for count, ops in loops:
            if count >= 60:  # the tile loops, not the label count or the fill
                top = ", ".join(f"{op} {n}" for op, n in ops.most_common(8))
                lines.append(f"  loop of {count} instructions, {count / per_thread:.1f} a logit: "
                             f"{top}")
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
