# 04-narrow-rows-block-row: the source of notebooks/04-narrow-rows-block-row.ipynb (percent format, as jupytext
# reads it; `python scripts/make_notebooks.py` writes the notebook, scripts/execute_notebooks.py
# fills its outputs).

# %% [markdown]
# # 04 · Narrow rows: block-row vs one row per program
#
# **Question.** Tiny networks normalize 16–256 features over millions of rows (Liger-Kernel's
# block-row pull request, linkedin/Liger-Kernel#1620, trains at 7,864,320 rows). What goes wrong
# with one program per row, and what fixes it?
#
# **Answer.** At 16 bf16 columns one program moves 64 bytes: far less than one warp loads in a
# single instruction, so most lanes idle and the 7.9-million-program grid is mostly scheduling.
# **Block-row** kernels pack many rows into one 2-D tile, so every program does a full tile of work:
# below, LayerNorm's forward at 7.9M rows (recorded), one row per program (`row`) against the
# block-row layout and the peers.

# %%
import normlab  # first: picks GPU or the Triton interpreter before any kernel is defined
import torch
from normlab import bench, exercises, ref, viz

recorded = bench.load_recorded(card="NVIDIA H200")  # the shipped H200 measurements
standard = viz.select(recorded, shape_set=None)  # the benchmark shape sets (populations aside)
narrow = viz.select(standard, M=7_864_320)
viz.gbps_vs_shape(viz.select(narrow, op="layer_norm", direction="fwd"), source="recorded",
                  title="LayerNorm forward at 7,864,320 rows")

# %%
# NBVAL_CHECK_OUTPUT
print(viz.recorded_summary(recorded))

# %% [markdown]
# > **Live vs recorded.** *Live* numbers are measured in this session on this machine. Without a GPU,
# > normlab runs its Triton kernels in the interpreter on CPU tensors: the live cells then check
# > correctness and exercise the pipeline on tiny shapes, and their timings say **nothing** about GPU
# > bandwidth. *Recorded* numbers were measured on an NVIDIA H200 and ship in `normlab/data/`; every
# > caption says which kind it shows, with the card, date and commit.
#
# ## Which layout runs
#
# `layout="block_row"` packs `BLOCK_ROWS × next_pow2(N)` elements per tile (up to
# `configs.BLOCK_ROW_MAX_COLS` = 256 columns; it refuses wider rows), and its backward runs a
# persistent grid. `layout="auto"` (the default) takes it when the rows are narrow *and* there are
# enough of them to fill the card with tiles (`configs.use_block_row`). With fewer rows the
# backward runs one row a tile, while the forward still shares row tiles once each holds two rows
# and the grid keeps four programs a SM (`configs.narrow_fwd_tile`): one program a row would pay a
# program's launch for a few hundred bytes. [The planner's page](../docs/planner.md) lists every
# rule with the runs behind it.
#
# ### Exercise: predict the planner
#
# Write the rule from the paragraph above, then check it against `configs.plan(...)` on 20 shapes
# around both limits.

# %%
from normlab.norms import config as configs


def uses_block_row(M: int, N: int) -> bool:
    """Does layout="auto" take the block-row kernels for M rows of N columns?"""
    # ▶ YOUR ANSWER: replace this line with your own code
    return exercises.solution("uses_block_row")(M, N)


# %%
# NBVAL_CHECK_OUTPUT
exercises.check("uses_block_row", uses_block_row)

# %% [markdown]
# ## The occupancy intuition, in numbers
#
# Elements per program and programs launched for 7,864,320 rows, from the kernels' own launch
# configuration (`configs.block_row_fwd_config`, LayerNorm's forward tiles; RMSNorm's differ at 16,
# 128 and 256 columns). Only the widths the block-row layout accepts are listed; at 512 columns
# `layout="auto"` runs the wide-row forward's short tiles (`configs.NORM_FWD_BLOCK_ROW`), printed
# last.

# %%
# NBVAL_CHECK_OUTPUT
ROWS = 7_864_320
print(f"{'N':>5} {'row: elems/program':>19} {'row: programs':>14} {'block-row: rows/tile':>21} "
      f"{'elems/program':>14} {'programs':>10}")
for N in (16, 32, 64, 128, 256):
    cfg = configs.block_row_fwd_config(N, is_rms=False)
    print(f"{N:>5} {N:>19} {ROWS:>14,} {cfg.block_rows:>21} {cfg.block_rows * N:>14} "
          f"{-(-ROWS // cfg.block_rows):>10,}")
short = configs.norm_fwd_block_row_config(ROWS, 512, is_rms=False)
print(f"  512: above BLOCK_ROW_MAX_COLS; layout='auto' runs tiles of {short.block_rows} rows, "
      f"{short.num_warps} warps: {-(-ROWS // short.block_rows):,} programs")

# %% [markdown]
# ### Fewer rows: the forward still tiles
#
# Below 16384 rows the layout is `row`, but one program a row still costs a launch for a few
# hundred bytes: on the H200 about 0.6 ns a row over the card, so 12000 rows of 48 columns took
# 8.6 µs to move 2.3 MB. The planner's forward tile keeps four programs a SM and at most 1024
# padded elements a tile, and starts at two rows a tile (a decode batch of a few rows a SM runs
# one row a program). Rows per tile at a few row counts, on an H200's 132 SMs:

# %%
# NBVAL_CHECK_OUTPUT
print(f"{'M':>6} " + " ".join(f"{f'N={N}':>6}" for N in (26, 80, 214)))
for M in (868, 1056, 2982, 6872, 16383):
    tiles = [configs.plan(True, M, N, sm_count=132).fwd_tile for N in (26, 80, 214)]
    print(f"{M:>6} " + " ".join(f"{t.block_rows if t else 1:>6}" for t in tiles))

# %% [markdown]
# Recorded: the population's members of 16–256 columns below the block-row layout, RMSNorm
# forward. Torch and Liger-Kernel run one row a program; normlab tiles from 1056 rows.

# %%
members = viz.select(recorded, shape_set="population", op="rms_norm", direction="fwd", dtype="bf16")
few_rows = [r for r in members if 16 <= r["N"] <= 256 and r["M"] < configs.BLOCK_ROW_MIN_ROWS]
viz.gbps_vs_shape(few_rows, source="recorded",
                  title="RMSNorm forward, 16-256 columns, fewer than 16384 rows")

# %% [markdown]
# ## Save or recompute the row statistics
#
# The backward needs each row's mean and rstd. Stored by the forward they cost 4 (RMSNorm) or 8
# (LayerNorm) bytes a row, against 64 bytes of x and y at 16 bf16 columns. The block-row backward
# reads the row's x anyway, so it can recompute them instead. It pays where the stores are a large
# share of the forward's bytes and the two extra row reductions are cheap
# (`configs.block_row_recompute_stats`):

# %%
# NBVAL_CHECK_OUTPUT
print(f"{'N':>5} {'RMSNorm':>11} {'LayerNorm':>11}   stores' share of a storing forward's bytes (RMS / LN)")
for N in (16, 32, 64, 128, 256):
    kind = ["recomputed" if configs.block_row_recompute_stats(N, is_rms) else "stored" for is_rms in (True, False)]
    share = [stat / (2 * N * 2 + stat) for stat in (4, 8)]
    print(f"{N:>5} {kind[0]:>11} {kind[1]:>11}   {share[0]:.1%} / {share[1]:.1%}")

# %% [markdown]
# ## Correctness: both layouts, both norms, forward and backward
#
# M = 37 is not a multiple of any tile height, so the last tile is ragged. At N = 16 and 48 the
# block-row backward recomputes the statistics; at N = 256 LayerNorm's reads them.

# %%
# NBVAL_CHECK_OUTPUT
torch.manual_seed(0)
M = 37
for N in (16, 48, 256):
    for layout in ("row", "block_row"):
        x = torch.randn(M, N, device=normlab.DEVICE, requires_grad=True)
        w = (1 + 0.1 * torch.randn(N, device=normlab.DEVICE)).requires_grad_()
        b = (0.1 * torch.randn(N, device=normlab.DEVICE)).requires_grad_()
        dy = torch.randn(M, N, device=normlab.DEVICE)
        y = normlab.layer_norm(x, w, b, layout=layout)
        dx, dw, db = torch.autograd.grad(y, (x, w, b), dy)
        ref_y = ref.layer_norm(x.double(), w.double(), b.double())
        want = ref.norm_backward(dy.double(), x.double(), w.double(), b.double(), eps=1e-5, is_rms=False)
        print(f"layer_norm {layout:<9} N={N:<3}", viz.verdict("y", y, ref_y), "|", viz.verdict("dx", dx, want[0]),
              "|", viz.verdict("dγ", dw, want[1], reduce_len=M), "|", viz.verdict("dβ", db, want[2], reduce_len=M))
        y = normlab.rms_norm(x, w, layout=layout)
        dx, dw = torch.autograd.grad(y, (x, w), dy)
        want = ref.norm_backward(dy.double(), x.double(), w.double(), eps=1e-6)
        print(f"rms_norm   {layout:<9} N={N:<3}", viz.verdict("y", y, ref.rms_norm(x.double(), w.double())),
              "|", viz.verdict("dx", dx, want[0]), "|", viz.verdict("dγ", dw, want[1], reduce_len=M))

# %% [markdown]
# ## Live measurement
#
# Tiny under the interpreter (the timings only show the pipeline works); a million rows on a GPU.

# %%
SHAPES = [(32, 16), (32, 64)] if normlab.INTERPRET else [(1_048_576, n) for n in (16, 64, 256, 512)]
FAST = {"reps": 1, "warmup": 0} if normlab.INTERPRET else {}
live = bench.sweep("layer_norm", ["torch", "normlab"], SHAPES, ["bf16"], ["fwd"], device=bench.device_info(),
                   options={"layout": ["row", "block_row"]}, **FAST)
print(bench.format_table(live, live.skipped))

# %%
viz.gbps_vs_shape(live, source="live")

# %% [markdown]
# ## Recorded on the H200: the backward and the "total"
#
# The block-row pull request's "total" is the forward and its backward in one call, as a training
# step runs them (`direction="fwd+bwd"`, bytes 5·M·N·e).

# %%
viz.gbps_vs_shape(viz.select(narrow, op="layer_norm", direction="bwd"), source="recorded",
                  title="LayerNorm backward at 7,864,320 rows")

# %%
viz.gbps_vs_shape(viz.select(narrow, op="layer_norm", direction="fwd+bwd"), source="recorded",
                  title="LayerNorm forward + backward at 7,864,320 rows")

# %%
viz.speedup_vs_best_peer(viz.select(narrow, op="rms_norm"), source="recorded",
                         title="RMSNorm at 7,864,320 rows: speed-up vs the best peer")

# %% [markdown]
# The tiles per width, the backward sweep, the recomputed statistics and the 512-column gap are in
# the [narrow-rows note](../docs/notes/2026-11-30-narrow-rows-block-row.md).
#
# [← 03-bounded-partials-and-wide-rows](03-bounded-partials-and-wide-rows.ipynb) · [all notebooks](../README.md#notebooks) · [05-reverse-kl-fused-vs-split →](05-reverse-kl-fused-vs-split.ipynb)
