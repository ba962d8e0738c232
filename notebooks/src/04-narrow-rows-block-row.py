# 04-narrow-rows-block-row: the source of notebooks/04-narrow-rows-block-row.ipynb (percent format, as jupytext
# reads it; `python scripts/make_notebooks.py` writes the notebook, scripts/execute_notebooks.py
# fills its outputs).

# %% [markdown]
# # 04 · Narrow rows: block-row vs one row per program
#
# Liger-Kernel's block-row pull request (linkedin/Liger-Kernel#1620) trains tiny networks with 16–256 features and ~7.9 million rows. One
# program per row then moves 16 × 2 bytes per program: far less than a warp can load in one
# instruction, so most lanes idle and the launch grid (7.9 M programs) is mostly scheduling overhead.
# **Block-row** kernels pack many rows into one 2-D tile (`BLOCK_ROWS × next_pow2(N)`, 1024–8192
# elements, measured per norm and width) so every program does a full tile of work, and the backward
# runs a persistent grid.
#
# normlab picks the layout with `layout="auto"` (`configs.use_block_row`: N ≤ 256 and M ≥ 16384) or
# you force it with `layout="row"` / `layout="block_row"`.

# %% [markdown]
# > **Live vs recorded.** *Live* numbers are measured in this session on this machine. Without a GPU,
# > normlab runs its Triton kernels in the interpreter on CPU tensors: the live cells then check
# > correctness and exercise the pipeline on tiny shapes, and their timings say **nothing** about GPU
# > bandwidth. *Recorded* numbers were measured on an NVIDIA H200 and ship in `normlab/data/`; every
# > plot title says which kind it shows, with the card and date.

# %%
import normlab  # first: picks GPU or the Triton interpreter before any kernel is defined
import torch
from normlab import bench, ref, viz

device = bench.device_info()  # card, versions, and the copy bandwidth measured right now
recorded = bench.load_recorded(card="NVIDIA H200")  # shipped measurements ([] if none yet)
print("\n".join(device.lines()))
print(f"recorded H200 records in this package: {len(recorded)}")

# %% [markdown]
# ## The occupancy intuition, in numbers
#
# Elements per program and programs launched for the 7,864,320 rows of Liger-Kernel's block-row pull request (#1620), from the kernels' own
# launch configuration (`configs.block_row_fwd_config`, LayerNorm's forward tiles; RMSNorm's differ
# at 16, 128 and 256 columns, `configs.BLOCK_ROW_FWD_TILES`):

# %%
# NBVAL_CHECK_OUTPUT
from normlab.norms import config as configs

ROWS = 7_864_320
print(f"{'N':>5} {'row: elems/program':>19} {'row: programs':>14} {'block-row: rows/tile':>21} "
      f"{'elems/program':>14} {'programs':>10}")
for N in (16, 32, 64, 128, 256, 512):
    cfg = configs.block_row_fwd_config(N, is_rms=False)
    print(f"{N:>5} {N:>19} {ROWS:>14,} {cfg.block_rows:>21} {cfg.block_rows * N:>14} "
          f"{-(-ROWS // cfg.block_rows):>10,}")

# %% [markdown]
# ## Save or recompute the row statistics
#
# The backward needs each row's mean and rstd. Stored by the forward, they cost 4 (RMSNorm) or 8
# (LayerNorm) bytes a row, against 64 bytes of x and y at 16 bf16 columns: a tenth of the forward's
# traffic. The block-row backward reads the row's x anyway, so it can recompute them in registers
# with the forward's fp32 arithmetic instead. On the H200 that took LayerNorm's forward at 16 columns
# from 136.6 to 119.7 µs. The price is two more row reductions in the backward (the mean, then the
# variance). For RMSNorm they cost nothing measurable. For LayerNorm up to 64 columns they cost
# less than the stores save (at 16 and 32 columns, with tiles of their own, the backward even got
# faster); at 128 and 256 columns they cost more, so the stores stay there
# (`configs.block_row_recompute_stats`; the measurements are in `docs/notes/2026-11-30-narrow-rows-block-row.md`):

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
# M = 333 is not a multiple of any tile height, so the last tile is ragged. At N = 16 and 48 the
# block-row backward recomputes the statistics; at N = 256 LayerNorm's reads them.

# %%
# NBVAL_CHECK_OUTPUT
torch.manual_seed(0)
M = 333
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

# %%
SHAPES = [(256, 16), (256, 64)] if normlab.INTERPRET else [(1_048_576, n) for n in (16, 64, 256, 512)]
live = bench.sweep("layer_norm", ["torch", "normlab"], SHAPES, ["bf16"], ["fwd", "bwd"], device=device,
                   options={"layout": ["row", "block_row"]})
print(bench.format_table(live, live.skipped))

# %%
viz.gbps_vs_shape(viz.select(live, direction="fwd"), source="live")

# %% [markdown]
# ## Recorded on the H200: the block-row pull request's shapes
#
# `normlab` is the default (`layout="auto"`). At 512 columns, above the block-row layout's limit, its
# forward still packs rows: short tiles of 4 (RMSNorm) or 8 (LayerNorm) rows, one program each
# (`configs.NORM_FWD_BLOCK_ROW`), 1.2× faster than one row per program there; its backward stays on
# the row path.

# %%
narrow = [r for r in recorded if r.M == 7_864_320]
viz.gbps_vs_shape(viz.select(narrow, op="layer_norm", direction="fwd"), source="recorded")

# %%
viz.gbps_vs_shape(viz.select(narrow, op="layer_norm", direction="bwd"), source="recorded")

# %% [markdown]
# The block-row pull request's "total": the forward and its backward in one call, as a training step runs them
# (`direction="fwd+bwd"`, bytes 5·M·N·e).

# %%
viz.gbps_vs_shape(viz.select(narrow, op="layer_norm", direction="fwd+bwd"), source="recorded")

# %%
viz.speedup_vs_best_peer(viz.select(narrow, op="rms_norm"), source="recorded")

# %% [markdown]
# [← 03-bounded-partials-and-wide-rows](03-bounded-partials-and-wide-rows.ipynb) · [all notebooks](../README.md#notebooks) · [05-reverse-kl-fused-vs-split →](05-reverse-kl-fused-vs-split.ipynb)
