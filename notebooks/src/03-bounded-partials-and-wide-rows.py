# 03-bounded-partials-and-wide-rows: the source of notebooks/03-bounded-partials-and-wide-rows.ipynb (percent format, as jupytext
# reads it; `python scripts/make_notebooks.py` writes the notebook, scripts/execute_notebooks.py
# fills its outputs).

# %% [markdown]
# # 03 · Bounded partials, wide rows, and what decides a change's sign
#
# **Question.** One partial row per block of rows makes the reduce kernel's input grow with M. Does
# bounding it pay, and how do we tell whether a change to a kernel will help before timing it?
#
# **Answer.** At 1024 columns the two-stage reduce kernel reads a workspace that grows with M, while
# the persistent grid's stays fixed: 264 paired rows in the H200 records (figure, recorded: the
# `reduce` bar), 528 in today's plan, which pairs none (below).
# Whether a kernel change helps is decided by **registers**: the same change that saved 3% at
# 8192 columns cost 165% at 16384, where the tile already spilled (the end of this notebook).

# %%
import normlab  # first: picks GPU or the Triton interpreter before any kernel is defined
import torch
from normlab import bench, exercises, ref, viz

recorded = bench.load_recorded(card="NVIDIA H200")  # the shipped H200 measurements
standard = viz.select(recorded, shape_set=None)  # the benchmark shape sets (populations aside)
bwd = viz.select(standard, op="rms_norm", direction="bwd")
by_m = viz.select(bwd, impl="normlab", strategy=["two_stage", "persistent"], N=1024)
viz.kernel_breakdown(by_m, source="recorded", title="RMSNorm backward at 1024 columns: main vs reduce as M grows")

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
# ## Two changes from Fast-LLM's backward rewrite (ServiceNow/Fast-LLM#546)
#
# 1. **Bound the partial-reduction work.** A persistent grid of `programs_per_sm × SMs` programs
#    folds many row tiles into one fp32 partial each, so the buffer is independent of M.
# 2. **Decouple the tile from the row width.** Rows wider than one register tile take a
#    **two-pass** scheme: pass 1 reduces the per-row corrections over column chunks, pass 2 re-reads
#    $x$, $dy$ to write $dx$ and the partials. Narrow rows stay single-pass.
#
# Bounding the partials has a limit of its own. A row tile past 8192 columns leaves an SM no
# registers to prefetch the next row, so each SM works one row at a time and waits on every load:
# LayerNorm's backward at 4096×12288 moved 1.2 TB/s. The planner sends such rows, at any row count, to the **split-row**
# backward (`normlab/norms/split_row.py`). Each program walks a group of rows over one column
# chunk, so it reads $x$ and $dy$ twice (5 units of traffic against 3). In exchange, every SM
# stays busy: 151 µs instead of 261 at 4096×12288 (recorded on the H200;
# [the note](../docs/notes/2026-12-01-norm-backward-split-rows.md)).
#
# ## Correctness: program counts and single vs two-pass
#
# The launcher `normlab.norms.row.norm_backward` takes `programs_per_sm` and `two_pass` directly;
# a small `block_cols` forces the two-pass path on a small row.

# %%
# NBVAL_CHECK_OUTPUT
from normlab.norms.row import norm_backward, norm_forward

torch.manual_seed(0)
M, N = 67, 300
x = torch.randn(M, N, device=normlab.DEVICE)
w = 1 + 0.1 * torch.randn(N, device=normlab.DEVICE)
dy = torch.randn(M, N, device=normlab.DEVICE)
_, mean, rstd = norm_forward(x, w, None, 1e-6, True)
ref_dx, ref_dw, _ = ref.norm_backward(dy.double(), x.double(), w.double(), eps=1e-6)
for two_pass, block_cols in ((False, None), (True, 128)):
    for pps in (1, 2, 4):
        dx, dw, _ = norm_backward(dy, x, w, None, mean, rstd, True, strategy="persistent",
                                  programs_per_sm=pps, two_pass=two_pass, block_cols=block_cols)
        tag = f"{'two-pass' if two_pass else 'single-pass'} {pps}×SMs"
        print(viz.verdict(f"{tag:<18} dx", dx, ref_dx), "|", viz.verdict("dγ", dw, ref_dw, reduce_len=M))

# %% [markdown]
# ## How the buffer scales
#
# Partial rows the reduce kernel must read (fp32, N = 1024, 132 SMs), from the planner's
# configuration in `viz.contention_model`: two-stage grows with M; persistent is fixed by the
# program count.

# %%
# NBVAL_CHECK_OUTPUT
print(f"{'M':>7} {'two_stage rows':>15} {'persistent rows':>16} {'MiB read by reduce (two_stage / persistent)':>45}")
for M in (2048, 8192, 32768, 131072):
    m = viz.contention_model(M, 1024, n_sm=132, **viz.contention_plan(M, 1024, n_sm=132))
    two, per = m["two_stage"], m["persistent"]
    print(f"{M:>7} {two['partial_rows']:>15} {per['partial_rows']:>16} "
          f"{two['reduce_read_bytes'] / 2**20:>36.2f} / {per['reduce_read_bytes'] / 2**20:.2f}")

# %% [markdown]
# ### Exercise: what the reduce kernel reads
#
# Building on notebook 02's `partial_rows`: how many bytes does the reduce kernel read for RMSNorm
# (`is_rms=True`, one parameter gradient) and LayerNorm (dγ and dβ)? Partials are fp32 whatever the
# input dtype.

# %%
from normlab.norms import config as configs


def reduce_read_bytes(strategy: str, M: int, N: int, n_sm: int, is_rms: bool) -> int:
    """Bytes of fp32 partials the reduce kernel reads ("atomic": 0)."""
    # ▶ YOUR ANSWER: replace this line with your own code
    return exercises.solution("reduce_read_bytes")(strategy, M, N, n_sm, is_rms)


# %%
# NBVAL_CHECK_OUTPUT
exercises.check("reduce_read_bytes", reduce_read_bytes)

# %% [markdown]
# ## Live: sweep the program count
#
# On the H200 the knee sits at **four** programs per SM up to 2048 columns, and four partial rows
# per SM double the buffer. Programs 2k and 2k + 1 can `atomic_add` into one zeroed row instead
# ("paired rows", `paired_partials=True`), which stays bitwise deterministic: with exactly two
# addends into 0, $(0 + a) + b = (0 + b) + a$ in floating point, whichever program comes first.
# The planner leaves them unpaired. At most 528 rows of 2048 fp32 columns per parameter (8.6 MB
# for LayerNorm's two) are written and read back within the L2, so halving them saves little, and
# the zeroed rows cost a fill launch: unpaired, LayerNorm's backwards ran 5% faster on an H100 at
# the 36 population members timed that had paired (up to 18%), RMSNorm's 2%.
#
# Few rows turn the budget around: at 512×2048 four programs per SM would write and read back more
# bytes of fp32 partial rows than the rows themselves hold. The planner stops the grid where the
# partials would move more than half the rows' bytes (`config.norm_bwd_partials_cap`, never under
# one program per SM): LayerNorm's backward there went from 11.2 to 7.8 µs.
#
# Each call is measured by `bench.measure` into a record the plots can draw. On the GPU the shape is
# Fast-LLM's 32768×1024; on a CPU a tiny one, where the timings only show the pipeline works.

# %%
M, N = (32, 256) if normlab.INTERPRET else (32768, 1024)
device = bench.device_info()
x = torch.randn(M, N, dtype=torch.bfloat16, device=normlab.DEVICE)
w = torch.ones(N, dtype=torch.bfloat16, device=normlab.DEVICE)
dy = torch.randn_like(x)
_, mean, rstd = norm_forward(x, w, None, 1e-6, True)

knee = [
    bench.measure(lambda: norm_backward(dy, x, w, None, mean, rstd, True, strategy="persistent",
                                        programs_per_sm=pps, paired_partials=paired),
                  "rms_norm", "normlab", M, N, "bf16", "bwd", device=device,
                  strategy=f"persistent {pps}/SM" + (", paired rows" if paired else ""),
                  reps=1 if normlab.INTERPRET else 30, warmup=0 if normlab.INTERPRET else 3)
    for pps, paired in ((1, False), (2, False), (4, False), (4, True), (8, False))
]
viz.records_table(knee, ["strategy", "M", "N", "device_us", "wall_us", "gbps"])

# %%
viz.kernel_breakdown(knee, source="live", title="Programs per SM: main vs reduce kernel")

# %% [markdown]
# ## Cold vs warm L2
#
# Fast-LLM's rewrite warns about a **measurement confound**: timed back to back (or as
# `fwd_bwd − fwd`), the backward finds its inputs still in L2 and looks faster than training will
# ever see it. normlab's bench writes a buffer larger than L2 before every timed call. Below, the
# same backward timed both ways: live (on a GPU, at 2048×4096, whose x, dy and dx, 48 MiB together,
# fit the H200's 60 MB L2) beside the recorded cold time. No warm time is recorded: run this cell on
# a GPU to see the gap.

# %%
M, N = (16, 256) if normlab.INTERPRET else (2048, 4096)
x = torch.randn(M, N, dtype=torch.bfloat16, device=normlab.DEVICE)
w = torch.ones(N, dtype=torch.bfloat16, device=normlab.DEVICE)
dy = torch.randn_like(x)
_, mean, rstd = norm_forward(x, w, None, 1e-6, True)
run = lambda: norm_backward(dy, x, w, None, mean, rstd, True)  # noqa: E731
reps = {"reps": 1, "warmup": 0} if normlab.INTERPRET else {"reps": 50}
cold = bench.time_call(run, **reps)
warm = bench.time_warm(run, **reps)
label = "interpreter on CPU: no L2 story here" if normlab.INTERPRET else device.card
print(f"live ({label}), {M}×{N}: cold L2 {cold.device_us:.1f} µs, warm (back to back) {warm:.1f} µs")
print("recorded cold:", viz.quote(bwd, impl="normlab", strategy="auto", M=2048, N=4096))

# %% [markdown]
# ## Registers decide a change's sign
#
# From 1024 to 8192 columns the single-pass backward has a twin that takes the row width as a
# compile-time constant and sums LayerNorm's two row sums in one reduction (`pair_static` below).
# Measured as an A/B with each compiled kernel's registers and spills per thread, it gained at
# 8192 columns and lost badly at 16384, where the one-row tile already spilled. Registers per
# thread and warps give the programs that fit on an SM (`bench.occupancy`, compute capability 9.0);
# spills go to local memory, that is, to L1/L2 and DRAM, inside the loop:

# %%
# NBVAL_CHECK_OUTPUT
from normlab.bench import devdata, occupancy

ab = devdata.register_ab("4dd23b8+ab")
if ab is None:
    print("recorded: not in this installation's normlab/data/")
else:
    meta, rows = ab
    print(f"recorded A/B, {meta['card']}, {meta['date'][:10]}, commit {meta['commit']} "
          f"(median of {rows[0]['rounds']} rounds, µs):")
    print(f"{'op':<4}{'M×N':>12} {'variant':<17}{'regs':>5}{'spills':>7}{'programs/SM':>12}{'µs':>8}")
    for r in rows:
        if r["n_regs"] is None or r["variant"] not in ("norm_base", "norm_pair_static"):
            continue
        cfg = configs.norm_bwd_config("persistent", r["M"], r["N"], is_rms=r["op"] == "rms")
        shape = f"{r['M']}×{r['N']}"
        print(f"{r['op']:<4}{shape:>12} {r['variant']:<17}{r['n_regs']:>5}{r['n_spills']:>7}"
              f"{occupancy.programs_per_sm(r['n_regs'], cfg.num_warps):>12}{r['device_us']:>8.1f}")

# %% [markdown]
# At 32768×8192 neither variant spills, and the one with fewer cross-warp exchanges wins. At
# 2048×16384 the base LayerNorm kernel already spills 60 registers per thread; the compiler gave
# the constant-width, paired-sum kernel 64 registers and spilled 152, so two programs fit per SM
# instead of one, and it took more than twice as long: more programs do not help when each goes
# to local memory inside its loop. So `configs.NORM_BWD_STATIC_COLS` keeps the change at
# 1024–8192 columns, where it was measured faster.
#
# Live, Triton's compiled kernels say the same about themselves (`occupancy.compiled_kernels` reads
# `n_regs` and `n_spills` from what Triton compiled in this process; under the interpreter nothing is
# compiled, so there is nothing to read):

# %%
from normlab.norms import row

kernels = [k for fn in (row._norm_bwd_persistent_kernel, row._norm_bwd_persistent_static_kernel,
                        row._norm_bwd_persistent_two_pass_kernel)
           for k in occupancy.compiled_kernels(fn)]
if not kernels:
    print("live: no compiled kernels (Triton interpreter on CPU): registers, spills and programs "
          "per SM exist only for compiled code; the recorded H200 values are above")
for k in kernels:
    print(f"live ({device.card}): {k['name']}: {k['num_warps']} warps, {k['n_regs']} registers, "
          f"{k['n_spills']} spills per thread -> {k['programs_per_sm']} programs per SM")

# %% [markdown]
# ## Past 8192 columns: a row in the blocks it needs
#
# RMSNorm's rows of 8193–16384 columns stay in the single pass, one program of 8 warps a SM, each
# holding one row at a time and waiting on it. Two things set how long a row takes:
#
# - **how many threads hold columns.** A tile is a power of two wide, so 8363 columns padded to
#   16384 leave half the threads idle, and the row still waits on all of them;
# - **whether the loads are vectors.** An odd width starts every row off a 16-byte boundary, so
#   each load would take one element.
#
# So the backward splits each row as the forward's shifted row does (notebook 01): a head up to
# its first 16-byte boundary, a body of whole vectors, a tail. The body is one block, or two where
# two pad it less (8192 + 256 for 8363). Every row of a program must start as far into a vector,
# so the grid is a multiple of 8 programs. The plan, from `config` (padded: the threads' columns,
# head and tail tiles of one vector each included, beyond the row's):

# %%
# NBVAL_CHECK_OUTPUT
print(f"{'N':>6} {'kernel':<9} {'body blocks':>13} {'padded':>7}")
for N in (8192, 8193, 8363, 9693, 12288, 14487, 16384):
    vec = configs.bwd_shift_vec(2, N, (N,) * 4)  # bf16, contiguous rows
    if not vec:
        block = configs.norm_bwd_config("persistent", 4096, N).block_cols
        print(f"{N:>6} {'static':<9} {block:>13} {block / N - 1:>7.0%}")
        continue
    first, second = configs.bwd_body_blocks(N, vec)
    blocks = f"{first} + {second}" if second else f"{first}"
    print(f"{N:>6} {'shifted':<9} {blocks:>13} {(first + second + 2 * vec) / N - 1:>7.0%}")

# %% [markdown]
# The check: the shifted kernel forced on 19 rows of 44 columns (a body of 32 + 16) against fp64.

# %%
# NBVAL_CHECK_OUTPUT
x = torch.randn(19, 44, device=normlab.DEVICE).to(torch.bfloat16)
w = (1 + 0.5 * torch.randn(44, device=normlab.DEVICE)).to(torch.bfloat16)
dy = torch.randn(19, 44, device=normlab.DEVICE).to(torch.bfloat16)
_, _, rstd = row.norm_forward(x, w, None, 1e-6, True)
dx, dw, _ = row.norm_backward(dy, x, w, None, None, rstd, True, shift=True, programs_per_sm=4)
rdx, rdw, _ = ref.norm_backward(dy.double(), x.double(), w.double(), None, 1e-6, True)
for name, got, want in (("dx", dx, rdx), ("dw", dw, rdw)):
    err = ((got.double() - want).norm() / want.norm()).item()
    print(f"shifted backward {name}: {'ok' if err < 1e-2 else 'FAIL'} (relative error under 1e-2)")

# %% [markdown]
# Recorded on the H200 (RMSNorm backward, bf16; each beside the fastest of torch, torch.compile
# and Liger-Kernel in the same run). In the population run before this change, with one padded
# block and element loads, they took 1.17–1.99× as long
# ([the note](../docs/notes/2026-12-04-wide-rows-in-the-blocks-they-need.md)):

# %%
from normlab.bench import population as pop

members = viz.select(recorded, shape_set="population", op="rms_norm", direction="bwd",
                     dtype="bf16")
best = {(r.op, r.direction, r.M, r.N, r.dtype): r  # each member's fastest peer
        for r in pop.ratios(recorded, shape_set="population")}
for M, N in ((36052, 8363), (27492, 9693), (16384, 12288), (65536, 16384)):
    peer = best["rms_norm", "bwd", M, N, "bf16"]
    print(viz.quote(members, impl="normlab", M=M, N=N))
    print(f"    fastest peer: {peer.peer}, {peer.ratio:.2f}× normlab's time")

# %% [markdown]
# ## Recorded on the H200

# %%
viz.gbps_vs_shape(bwd, source="recorded", title="RMSNorm backward, bf16")

# %% [markdown]
# What was tried (programs per SM, paired rows, prefetch, tile sizes, the constant width and paired
# sums at each width, the LayerNorm target) is in the notes:
# [persistent backward](../docs/notes/2026-11-29-norm-backward-persistent.md),
# [constant width](../docs/notes/2026-11-30-norm-backward-constant-width.md),
# [few-row wide shapes](../docs/notes/2026-11-29-norm-backward-few-row-wide-shapes.md),
# [LayerNorm target](../docs/notes/2026-11-30-layernorm-backward-target.md),
# [split rows](../docs/notes/2026-12-01-norm-backward-split-rows.md).
#
# [← 02-backward-dgamma-reduction](02-backward-dgamma-reduction.ipynb) · [all notebooks](../README.md#notebooks) · [04-narrow-rows-block-row →](04-narrow-rows-block-row.ipynb)
