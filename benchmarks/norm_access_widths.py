"""The widths of the norm kernels' global loads and stores, by row alignment, for sm_90 (no GPU).

    python3 benchmarks/norm_access_widths.py [--out FILE]

Compiles three norm kernels ahead of time for an H100/H200 (``sm_90``) with this machine's
Triton and its ``ptxas``, in bf16, at each ``ROW_ALIGN`` a launch can take (1, 2, 4, 8 elements:
the row strides' and width's common power of two, up to one 16-byte vector), and counts the
SASS global loads (LDG) and stores (STG) by width. The row strides and the width are plain
ints, not multiples of 16: the case where Triton's own specialization knows nothing and only
the kernels' hint (``tiles.known_multiple``) can make the accesses vectors. An access of
2 * ROW_ALIGN bytes is what a row of that alignment allows.

- the forward, one row per program (its width a constexpr);
- the block-row forward (narrow rows, the width a runtime int);
- the persistent single-pass backward at a runtime width.

Then, for the one-row forward, how many consecutive elements of x a thread takes per load: the
row's own alignment, which w/b loaded in x's layout would raise to 8 (strided element loads;
``config.params_apart``).

Then the same forward at an odd width (201 columns, ROW_ALIGN 1) with the row loaded from its
first 16-byte boundary (``row._shifted_row``): its x and y body in 16-byte accesses; and the
persistent backward's rows split the same way (``row._shifted_bwd_rows``) at 9693 columns, its
body in blocks of 8192 and 2048 on 8 warps.

Then the block-row backward at 128 columns (RMSNorm, recomputed statistics): how many warps
share a row (Triton's layout of the x tile) and the SASS barriers (BAR), shared-memory accesses
(LDS, STS) and shuffles (SHFL), at ROW_ALIGN 8 and 1 with the planned 8 warps, and at ROW_ALIGN
1 with one warp (``config.one_warp_rows``). Then the block-row forward's tile of a 5-column row
with int64 and int32 row offsets (``config.row_offsets_int64``): SASS instructions an element.
Last, the decode backward by role (``row._norm_bwd_roles_kernel``, ``config.bwd_roles``) at
four decode batches, planned as on 132 SMs: its registers and the stack it spills to.

Like ``kernel_loops.py``, normlab must define its kernels compiled rather than interpreted: this
script makes ``torch.cuda.is_available`` answer True before importing normlab, and launches
nothing. Triton's code generation changes between versions: say which one a figure came from.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import os
import re
import sys
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "0"  # compiled kernels, even when a caller interprets
os.environ["NORMLAB_MODE"] = "auto"

import torch

torch.cuda.is_available = lambda: True  # compiled kernels on a machine without a GPU (above)

import triton  # noqa: E402
from kernel_loops import analyse  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from normlab.norms import config  # noqa: E402
from normlab.norms.block_row import _block_row_bwd_kernel, _block_row_fwd_kernel  # noqa: E402
from normlab.norms.row import (  # noqa: E402
    _norm_bwd_persistent_kernel,
    _norm_bwd_roles_kernel,
    _norm_fwd_kernel,
)

ALIGNS = (1, 2, 4, 8)
FP32_POINTERS = ("mean_ptr", "rstd_ptr", "dw_partial_ptr", "db_partial_ptr")
FLOATS = ("eps", "offset")
# kernel -> (its constexprs, warps): 8 elements a thread, one vector. n_cols 200 where the width
# is a constexpr (a multiple of 8; else it is the int the launch passes).
KERNELS = {
    "forward, one row a program": (_norm_fwd_kernel, {
        "n_cols": 200, "IS_RMS": True, "HAS_WEIGHT": True, "HAS_BIAS": False,
        "HAS_RESIDUAL": False, "BLOCK_SIZE": 256, "SINGLE_BLOCK": True, "EVEN_COLS": False,
        "INT64_ROWS": False, "EARLY_PARAMS": False, "STORE_STATS": True, "PARAMS_APART": False,
        "SHIFT_VEC": 0}, 1),
    "block-row forward": (_block_row_fwd_kernel, {
        "IS_RMS": True, "HAS_WEIGHT": True, "HAS_BIAS": False, "HAS_RESIDUAL": False,
        "BLOCK_ROWS": 8, "BLOCK_COLS": 256, "PERSISTENT": False, "STORE_STATS": False,
        "INT64_ROWS": False}, 4),
    "persistent backward": (_norm_bwd_persistent_kernel, {
        "IS_RMS": True, "HAS_WEIGHT": True, "HAS_BIAS": False, "HAS_DH": False, "BLOCK_ROWS": 8,
        "BLOCK_COLS": 256, "LOOP_STAGES": 1, "PREFETCH": True, "PAIRED": False, "SHIFT_VEC": 0,
        "BODY_B": 0}, 4),
}  # fmt: skip
WIDTH_BYTES = {"U16": 2, "": 4, "64": 8, "128": 16}  # the SASS suffix of LDG.E / STG.E
BLOCK_ROW_BWD = {"IS_RMS": True, "HAS_WEIGHT": True, "HAS_BIAS": False, "HAS_DH": False,
                 "BLOCK_COLS": 128, "ACC_TILE": True, "PREFETCH": False,
                 "RECOMPUTE_STATS": True, "INT64_ROWS": True}  # fmt: skip
# (ROW_ALIGN, warps, tile rows): the planned tiles at 8 and 1, and the one-warp tile at 1
BLOCK_ROW_BWD_TILES = ((8, 8, 16), (1, 8, 16), (1, 1, 4))
SASS_OPS = ("BAR", "LDS", "STS", "SHFL")
# The block-row forward's tile at 5 columns (the tiny-width rule's 256 x 8, 4 warps): SASS
# instructions an element with int64 and with int32 row offsets (config.row_offsets_int64).
TINY_FWD = {"IS_RMS": True, "HAS_WEIGHT": True, "HAS_BIAS": False, "HAS_RESIDUAL": False,
            "BLOCK_ROWS": 256, "BLOCK_COLS": 8, "PERSISTENT": False, "STORE_STATS": False}
# Decode batches for the backward by role (rows, columns, ROW_ALIGN), each on
# config.NORM_BWD_ROLES_WARPS warps: odd widths (the row plan's one warp), a model width, the
# most rows at the most columns (config.bwd_roles).
ROLES_CASES = ((12, 973, 1), (14, 1022, 2), (8, 3584, 8), (16, 8192, 8))


def compile_kernel(kernel, constants: dict, row_align: int, warps: int, arch: int = 90):
    """The kernel compiled for sm_<arch>: bf16 row tensors and weight, fp32 statistics, 16-byte
    aligned pointers, int arguments with no divisibility known."""
    names = kernel.arg_names
    constants = {**constants, "ROW_ALIGN": row_align}
    signature = {}
    for name in names:
        if name in constants:
            signature[name] = "constexpr"
        elif name.endswith("_ptr"):
            signature[name] = "*fp32" if name in FP32_POINTERS else "*bf16"
        else:
            signature[name] = "fp32" if name in FLOATS else "i32"
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in names if n.endswith("_ptr")}
    src = ASTSource(kernel, signature, constants, attrs)
    return triton.compile(src, target=GPUTarget("cuda", arch, 32), options={"num_warps": warps})


def access_widths(compiled) -> dict[str, collections.Counter]:
    """{"load": Counter(bytes -> instructions), "store": ...} of the global accesses in the
    kernel's SASS (Triton disassembles its cubin with its own nvdisasm)."""
    widths = {"load": collections.Counter(), "store": collections.Counter()}
    for op, suffix in re.findall(r"\b(LDG|STG)\.E(?:\.(U16|64|128))?\b", compiled.asm["sass"]):
        widths["load" if op == "LDG" else "store"][WIDTH_BYTES[suffix]] += 1
    return widths


def row_load_elements(compiled, block: int) -> int:
    """Consecutive elements a thread takes per load of the kernel's first 1-D row load (x in the
    one-row forward): its layout's sizePerThread, from Triton's TTGIR."""
    ttgir = compiled.asm["ttgir"]
    layout = re.search(rf"tt\.load [^\n]*: tensor<{block}x!tt\.ptr<bf16>, #(\w+)>", ttgir)
    size = re.search(rf"#{layout.group(1)} = #ttg\.blocked<{{sizePerThread = \[(\d+)\]", ttgir)
    return int(size.group(1))


def warps_per_row(compiled, cols: int) -> int:
    """Warps that share one row of the kernel's first 2-D bf16 load (Triton's TTGIR layout)."""
    ttgir = compiled.asm["ttgir"]
    layout = re.search(rf"tt\.load [^\n]*: tensor<\d+x{cols}x!tt\.ptr<bf16>, #(\w+)>", ttgir)
    attrs = re.search(rf"#{layout.group(1)} = #ttg\.blocked<{{sizePerThread = \[\d+, (\d+)\], "
                      r"threadsPerWarp = \[\d+, (\d+)\], warpsPerCTA = \[\d+, (\d+)\]", ttgir)
    per_thread, threads, warps = (int(g) for g in attrs.groups())
    return max(1, min(warps, cols // (per_thread * threads)))


def sass_counts(compiled) -> collections.Counter:
    """SASS instructions by opcode family (BAR.SYNC counts as BAR)."""
    opcode = re.compile(r"^[-\w:]+\t(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", re.M)
    return collections.Counter(opcode.findall(compiled.asm["sass"]))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="also write the lines here")
    args = parser.parse_args(argv)
    lines = [f"triton {triton.__version__}, sm_90, bf16: global accesses per thread, "
             "bytes x instructions"]  # fmt: skip
    for name, (kernel, constants, warps) in KERNELS.items():
        for align in ALIGNS:
            widths = access_widths(compile_kernel(kernel, constants, align, warps))
            cells = "; ".join(f"{kind} " + ", ".join(f"{b} B x {n}" for b, n in
                                                    sorted(widths[kind].items()))
                              for kind in ("load", "store"))  # fmt: skip
            lines.append(f"{name}, ROW_ALIGN {align}: {cells}")
    kernel, constants, warps = KERNELS["forward, one row a program"]
    for align in ALIGNS:  # w/b beside x would give x its 16-byte layout (config.params_apart)
        compiled = compile_kernel(kernel, {**constants, "PARAMS_APART": align < 8}, align, warps)
        lines.append(f"forward x row, ROW_ALIGN {align}: "
                     f"{row_load_elements(compiled, constants['BLOCK_SIZE'])} consecutive "
                     "elements a thread a load")  # fmt: skip
    # An odd width loaded from the row's first 16-byte boundary (row._shifted_row, config.shift_vec)
    shifted = {**constants, "n_cols": 201, "SHIFT_VEC": 8}
    widths = access_widths(compile_kernel(kernel, shifted, 1, warps))
    lines.append("forward shifted row (201 columns, ROW_ALIGN 1): " + "; ".join(
        f"{kind} " + ", ".join(f"{b} B x {n}" for b, n in sorted(widths[kind].items()))
        for kind in ("load", "store")))  # fmt: skip
    # The persistent backward's odd rows past 8192 columns (row._shifted_bwd_rows,
    # config.bwd_shift_vec), planned on 8 warps: 9693 columns in a body of 8192 + 2048.
    kernel, constants, _ = KERNELS["persistent backward"]
    shifted_bwd = {**constants, "BLOCK_ROWS": 1, "BLOCK_COLS": 8192, "PREFETCH": False,
                   "SHIFT_VEC": 8, "BODY_B": 2048}  # fmt: skip
    widths = access_widths(compile_kernel(kernel, shifted_bwd, 1, 8))
    lines.append("backward shifted rows (8192 + 2048 columns, ROW_ALIGN 1): " + "; ".join(
        f"{kind} " + ", ".join(f"{b} B x {n}" for b, n in sorted(widths[kind].items()))
        for kind in ("load", "store")))  # fmt: skip
    for align, warps, rows in BLOCK_ROW_BWD_TILES:
        compiled = compile_kernel(_block_row_bwd_kernel, {**BLOCK_ROW_BWD, "BLOCK_ROWS": rows},
                                  align, warps)  # fmt: skip
        ops = sass_counts(compiled)
        span = warps_per_row(compiled, 128)
        cells = ", ".join(f"{op} {ops[op]}" for op in SASS_OPS)
        lines.append(f"block-row backward 128 columns, ROW_ALIGN {align}, {warps} "
                     f"warp{'s' * (warps > 1)}, {rows} rows: a row spans "
                     f"{span} warp{'s' * (span > 1)}; "
                     f"{sum(ops.values())} instructions; {cells}")  # fmt: skip
    for int64 in (True, False):
        warps = 4
        compiled = compile_kernel(_block_row_fwd_kernel, {**TINY_FWD, "INT64_ROWS": int64}, 1,
                                  warps)  # fmt: skip
        per_elem = sum(sass_counts(compiled).values()) * 32 * warps / (256 * 8)
        lines.append(f"block-row forward 256 x 8 tile, ROW_ALIGN 1, {warps} warps, "
                     f"{'int64' if int64 else 'int32'} row offsets: {per_elem:.1f} "
                     "instructions an element")  # fmt: skip
    for (rows, cols, align), is_rms in itertools.product(ROLES_CASES, (True, False)):
        cfg = config.norm_bwd_config("persistent", rows, cols, is_rms=is_rms, sm_count=132,
                                     aligned=align == 8,
                                     one_warp=config.one_warp_rows(cols, align, 2))  # fmt: skip
        n_warps = config.NORM_BWD_ROLES_WARPS
        col_block, chunk_rows = config.bwd_roles_col_tile(rows, cols, cfg.block_cols,
                                                          n_warps)  # fmt: skip
        constants = {"IS_RMS": is_rms, "HAS_WEIGHT": True, "HAS_BIAS": not is_rms,
                     "HAS_DH": False, "BLOCK_COLS": cfg.block_cols, "COL_BLOCK": col_block,
                     "CHUNK_ROWS": chunk_rows, "PAIR_SUMS": True}  # fmt: skip
        usage, loops = analyse(compile_kernel(_norm_bwd_roles_kernel, constants, align,
                                              n_warps))  # fmt: skip
        looped_local = sum(ops.get("STL", 0) + ops.get("LDL", 0) for _, ops in loops)
        warps = f"{n_warps} warp{'s' * (n_warps > 1)}"
        norm = "RMSNorm" if is_rms else "LayerNorm"
        lines.append(f"backward by role, {norm} {rows} x {cols}, ROW_ALIGN {align}, {warps}, "
                     f"column tile {chunk_rows} x {col_block}: {usage.get('REG', 0)} registers, "
                     f"{usage.get('STACK', 0)} B stack, {looped_local} local accesses in "
                     "loops")  # fmt: skip
    print("\n".join(lines))
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
