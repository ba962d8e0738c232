# 02-backward-dgamma-reduction: the source of notebooks/02-backward-dgamma-reduction.ipynb (percent format, as jupytext
# reads it; `python scripts/make_notebooks.py` writes the notebook, scripts/execute_notebooks.py
# fills its outputs).

# %% [markdown]
# # 02 · The backward pass and the dγ reduction
#
# With $\hat x = x \cdot \mathrm{rstd}$ and $g = \gamma \odot dy$, the RMSNorm backward is
#
# $$
# dx = \mathrm{rstd}\,\Big(g - \hat x\,\tfrac{1}{N}\textstyle\sum_k \hat x_k g_k\Big),
# \qquad
# d\gamma_j = \sum_{i=1}^{M} dy_{ij}\,\hat x_{ij}.
# $$
#
# $dx$ is per row, like the forward. $d\gamma$ is a **column sum over all M rows**: every program
# holds a piece of it, and the pieces must meet somewhere. The Fused RMSNorm write-up's backward added them with
# `tl.atomic_add` straight into the one $N$-vector; under many programs the atomics contend on the same
# addresses and serialize: *a queue of carts at a single loading dock*. normlab keeps that design and
# two better ones side by side (`strategy=`):
#
# | strategy | where partials go | second kernel | workspace |
# |---|---|---|---|
# | `atomic` | `tl.atomic_add` into one fp32 vector | none | $N$ fp32 |
# | `two_stage` | one fp32 partial row per block of rows (TorchInductor's way) | reduce | grows with $M$ |
# | `persistent` | $\approx$ programs/SM × SMs programs grid-stride the rows, fold them in registers | reduce | bounded, independent of $M$ |

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
# ## Correctness: every strategy against the fp64 reference
#
# The parameter gradient sums M terms, so its tolerance grows like $\sqrt{M}$ (`reduce_len=M`).
# M = 300 is ragged and larger than the interpreter's persistent grid, so programs really grid-stride.

# %%
# NBVAL_CHECK_OUTPUT
torch.manual_seed(0)
M, N = 300, 200
for op in ("rms_norm", "layer_norm"):
    x = torch.randn(M, N, device=normlab.DEVICE, requires_grad=True)
    w = (1 + 0.1 * torch.randn(N, device=normlab.DEVICE)).requires_grad_()
    b = (0.1 * torch.randn(N, device=normlab.DEVICE)).requires_grad_() if op == "layer_norm" else None
    dy = torch.randn(M, N, device=normlab.DEVICE)
    expected = ref.norm_backward(dy.double(), x.double(), w.double(), None if b is None else b.double(),
                                 eps=1e-6 if op == "rms_norm" else 1e-5, is_rms=op == "rms_norm")
    for strategy in ("atomic", "two_stage", "persistent"):
        if op == "rms_norm":
            y = normlab.rms_norm(x, w, strategy=strategy)
        else:
            y = normlab.layer_norm(x, w, b, strategy=strategy)
        grads = torch.autograd.grad(y, [t for t in (x, w, b) if t is not None], dy)
        for name, got, want, red in zip(("dx", "dγ", "dβ"), grads, expected, (None, M, M)):
            print(viz.verdict(f"{op:<10} {strategy:<10} {name} {M}×{N}", got, want, reduce_len=red))

# %% [markdown]
# ## The contention picture
#
# Each square is a program carrying its partial $d\gamma$ (a cart); grey squares are where partials are
# delivered (docks). `atomic` queues every program at the one dγ vector; `two_stage` gives each block
# of rows its own workspace row and pays a reduce kernel that reads them all; `persistent` bounds the
# number of partial rows to programs/SM × SMs, whatever M. The numbers (programs, queue depth, partial
# rows) come from `viz.contention_model`, with the kernels' own configuration. Drawn for the H200's 132 SMs.

# %%
from normlab.norms import config as configs

N_SM = 132 if normlab.INTERPRET else normlab._runtime.sm_count()
viz.contention_figure(32768, 1024, n_sm=N_SM,
                      programs_per_sm=configs.norm_bwd_config("persistent", 32768, 1024).programs_per_sm,
                      two_stage_rows=configs.norm_bwd_config("two_stage", 32768, 1024).rows_per_program)

# %%
# NBVAL_CHECK_OUTPUT
for M in (4096, 32768, 262144):
    m = viz.contention_model(M, 1024, n_sm=132, programs_per_sm=2,
                             two_stage_rows=configs.NORM_BWD_TWO_STAGE_ROWS_PER_PROGRAM)
    print(f"M={M:>6}: atomic queue depth {m['atomic']['queue_depth']:>6}; "
          f"two_stage partial rows {m['two_stage']['partial_rows']:>5}; "
          f"persistent partial rows {m['persistent']['partial_rows']}")

# %% [markdown]
# Move the sliders to see the queue grow with M for `atomic` and the workspace grow for `two_stage`,
# while `persistent` stays bounded (the widget needs a live kernel in JupyterLab):

# %%
viz.widgets.contention_explorer(n_sm=N_SM)

# %% [markdown]
# ## Live measurement: the three strategies against `F.rms_norm`

# %%
SHAPES = [(64, 256), (37, 1000)] if normlab.INTERPRET else [(8192, 1024), (1024, 8192), (4096, 4096), (32768, 8192)]
live = bench.sweep("rms_norm", ["torch", "normlab"], SHAPES, ["bf16"], ["bwd"], device=device,
                   options={"strategy": ["atomic", "two_stage", "persistent"]})
print(bench.format_table(live, live.skipped))

# %%
viz.gbps_vs_shape(live, source="live")

# %%
viz.kernel_breakdown(viz.select(live, impl="normlab"), source="live")

# %% [markdown]
# ## Recorded on the H200
#
# The per-kernel breakdown separates the main kernel (dx and the partials) from the reduce kernel;
# for `atomic` there is no reduce kernel, the waiting happens inside the main one.
#
# Device time counts every kernel the call launches, including ones nobody wrote on purpose. Until
# commit `5cfd85b`, autograd zero-filled a gradient for each statistic the forward op returns (mean,
# rstd) before every backward: 0.7–1.8 µs per call on these shapes, 7–15 µs at 7.9 million rows.
# `ctx.set_materialize_grads(False)` removed them. The fill kernels still in the breakdown at
# N ≤ 2048 zero the workspace rows that programs share in pairs.

# %%
bwd = viz.select(recorded, op="rms_norm", direction="bwd")
viz.gbps_vs_shape(bwd, source="recorded")

# %%
viz.kernel_breakdown(viz.select(bwd, impl="normlab"), source="recorded")

# %%
viz.speedup_vs_best_peer(bwd, source="recorded")

# %% [markdown]
# [← 01-rmsnorm-forward](01-rmsnorm-forward.ipynb) · [all notebooks](../README.md#notebooks) · [03-bounded-partials-and-wide-rows →](03-bounded-partials-and-wide-rows.ipynb)
