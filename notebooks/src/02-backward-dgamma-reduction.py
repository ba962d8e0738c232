# 02-backward-dgamma-reduction: the source of notebooks/02-backward-dgamma-reduction.ipynb (percent format, as jupytext
# reads it; `python scripts/make_notebooks.py` writes the notebook, scripts/execute_notebooks.py
# fills its outputs).

# %% [markdown]
# # 02 · The backward pass and the dγ reduction
#
# **Question.** The weight gradient $d\gamma$ is a sum over all M rows, and every program holds a
# piece of it. Where should the pieces meet?
#
# **Answer.** Not in one vector (`atomic`: the adds queue up), and not in one workspace row per
# block of rows (`two_stage`: the second kernel's input grows with M), but in a **bounded** set of
# fp32 partial rows, a few per SM, that a short reduce kernel sums (`persistent`). The figure
# splits each recorded backward into its kernels: `main` writes dx and the partials, `reduce` sums
# them, `memset`/`fill` zero buffers (hover a bar for the kernels' full names).

# %%
import normlab  # first: picks GPU or the Triton interpreter before any kernel is defined
import torch
from normlab import bench, exercises, ref, viz

recorded = bench.load_recorded(card="NVIDIA H200")  # the shipped H200 measurements
standard = viz.select(recorded, shape_set=None)  # the benchmark shape sets (populations aside)
bwd = viz.select(standard, op="rms_norm", direction="bwd")
strategies = viz.select(bwd, impl="normlab", strategy=["atomic", "two_stage", "persistent"],
                        N=[1024, 4096], M=[4096, 8192, 32768])
viz.kernel_breakdown(strategies, source="recorded", title="RMSNorm backward: the three dγ strategies")

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
# ## The math
#
# With $\hat x = x \cdot \mathrm{rstd}$ and $g = \gamma \odot dy$:
#
# $$
# dx = \mathrm{rstd}\,\Big(g - \hat x\,\tfrac{1}{N}\textstyle\sum_k \hat x_k g_k\Big),
# \qquad
# d\gamma_j = \sum_{i=1}^{M} dy_{ij}\,\hat x_{ij}.
# $$
#
# $dx$ is per row, like the forward; $d\gamma$ is a column sum over all M rows. normlab keeps three
# designs side by side (`strategy=`):
#
# | strategy | where partials go | second kernel | workspace |
# |---|---|---|---|
# | `atomic` | `tl.atomic_add` into one fp32 vector | none | $N$ fp32 |
# | `two_stage` | one fp32 partial row per block of rows (TorchInductor's way) | reduce | grows with $M$ |
# | `persistent` | programs/SM × SMs programs grid-stride the rows, fold them in registers | reduce | bounded, independent of $M$ |
#
# ## Correctness: every strategy against the fp64 reference
#
# The parameter gradient sums M terms, so its tolerance grows like $\sqrt{M}$ (`reduce_len=M`).
# M = 67 rows of 300 columns make 17 row tiles of 4 rows, more than the interpreter's 16 persistent
# programs (4 stand-in SMs × 4), so programs really grid-stride, and the last tile is ragged.

# %%
# NBVAL_CHECK_OUTPUT
torch.manual_seed(0)
M, N = 67, 300
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
# ## The contention picture, as the kernels run it
#
# Each coloured square is a program carrying its partial $d\gamma$ (a cart); grey squares are where
# partials are delivered (docks). `atomic` queues every program at the one dγ vector; `two_stage`
# gives each block of rows its own workspace row; `persistent` bounds the rows. The numbers are the
# planner's own (`viz.contention_plan` reads `configs.norm_bwd_config`): at 1024 columns the
# persistent grid runs **4** programs per SM, and above
# `configs.NORM_BWD_PARTIALS_PER_SM` = 2 programs 2k and 2k + 1 `atomic_add` into one zeroed
# partial row, so 528 programs write 264 rows. Drawn for the H200's 132 SMs.

# %%
N_SM = 132 if normlab.INTERPRET else normlab._runtime.sm_count()
viz.contention_figure(32768, 1024, n_sm=N_SM, **viz.contention_plan(32768, 1024, n_sm=N_SM))

# %% [markdown]
# ### Exercise: how many partial rows?
#
# For a grid on `n_sm` SMs, how many fp32 partial rows of $d\gamma$ does each strategy write (the
# rows the reduce kernel then reads)? Use the planner: `configs.norm_bwd_config(strategy, M, N)`
# gives the row tile (`block_rows`), the two-stage block (`rows_per_program`), the persistent
# `programs_per_sm` and whether partial rows are `paired_partials`. A grid never has more programs
# than row tiles. Predict 32768×1024 before you run it.

# %%
from normlab.norms import config as configs


def partial_rows(strategy: str, M: int, N: int, n_sm: int) -> int:
    """fp32 partial rows of dγ the backward writes for `strategy` ("atomic": none)."""
    # ▶ YOUR ANSWER: replace this line with your own code
    return exercises.solution("partial_rows")(strategy, M, N, n_sm)


# %%
# NBVAL_CHECK_OUTPUT
exercises.check("partial_rows", partial_rows)

# %% [markdown]
# The same numbers as M grows (the planner's configuration at N = 1024, 132 SMs): the atomic queue
# and the two-stage workspace grow with M, the persistent rows do not.

# %%
# NBVAL_CHECK_OUTPUT
for M in (4096, 32768, 262144):
    m = viz.contention_model(M, 1024, n_sm=132, **viz.contention_plan(M, 1024, n_sm=132))
    print(f"M={M:>6}: atomic queue depth {m['atomic']['queue_depth']:>6}; "
          f"two_stage partial rows {m['two_stage']['partial_rows']:>5}; "
          f"persistent partial rows {m['persistent']['partial_rows']} "
          f"({m['persistent']['programs']} programs, paired: {m['persistent']['paired']})")

# %% [markdown]
# Move the sliders to see the queue grow with M for `atomic` and the workspace grow for
# `two_stage`, while `persistent` stays bounded (the widget needs a live kernel in JupyterLab):

# %%
viz.widgets.contention_explorer(n_sm=N_SM)

# %% [markdown]
# ## Live measurement: the three strategies against `F.rms_norm`

# %%
SHAPES = [(7, 1000)] if normlab.INTERPRET else [(8192, 1024), (1024, 8192), (4096, 4096), (32768, 8192)]
FAST = {"reps": 1, "warmup": 0} if normlab.INTERPRET else {}
live = bench.sweep("rms_norm", ["torch", "normlab"], SHAPES, ["bf16"], ["bwd"], device=bench.device_info(),
                   options={"strategy": ["atomic", "two_stage", "persistent"]}, **FAST)
print(bench.format_table(live, live.skipped))

# %%
viz.kernel_breakdown(viz.select(live, impl="normlab"), source="live")

# %% [markdown]
# ## Recorded on the H200
#
# Device time counts every kernel a call launches, including ones nobody wrote on purpose: the
# `fill` bars are the zeroed workspace of the paired partial rows these records' plan used. (The
# plan pairs none since 2026-12-07: the partial rows stay in the L2 and the fill is a launch,
# see [notebook 03](03-bounded-partials-and-wide-rows.ipynb). Autograd used to zero-fill a
# gradient for the forward's mean and rstd outputs before every backward, 0.7–1.8 µs a statistic
# at the peer shapes and 7–15 µs at 7,864,320 rows;
# `ctx.set_materialize_grads(False)` removed them, see the
# [few-row wide shapes note](../docs/notes/2026-11-29-norm-backward-few-row-wide-shapes.md); the
# strategies' history is in the [persistent-backward note](../docs/notes/2026-11-29-norm-backward-persistent.md).)

# %%
viz.gbps_vs_shape(bwd, source="recorded", title="RMSNorm backward, bf16")

# %%
viz.speedup_vs_best_peer(bwd, source="recorded", title="RMSNorm backward: speed-up vs the best peer")

# %% [markdown]
# Over the shape population (normlab's default ÷ the fastest peer, each shape one point):

# %%
from normlab.bench import devdata

population = viz.select(recorded, shape_set="population")
viz.cliff_map(population, op="rms_norm", direction="bwd", dtype="bf16", source="recorded")

# %% [markdown]
# [← 01-rmsnorm-forward](01-rmsnorm-forward.ipynb) · [all notebooks](../README.md#notebooks) · [03-bounded-partials-and-wide-rows →](03-bounded-partials-and-wide-rows.ipynb)
