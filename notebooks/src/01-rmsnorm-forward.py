# 01-rmsnorm-forward: the source of notebooks/01-rmsnorm-forward.ipynb (percent format, as jupytext
# reads it; `python scripts/make_notebooks.py` writes the notebook, scripts/execute_notebooks.py
# fills its outputs).

# %% [markdown]
# # 01 · Fused RMSNorm forward
#
# **Question.** RMSNorm written as separate PyTorch ops moves each element about ten times. Does one
# fused kernel reach the copy roofline, and what kernel shape gets it there?
#
# **Answer.** Fused, the op moves 4 bytes per element (bf16 in, bf16 out) and runs at 79–101% of
# copy on the H200, level with or ahead of `torch.compile` at every benchmark shape (below,
# recorded). What got it there is not "keep the row in registers": it is a row read **twice** in
# small chunks, so each program needs few registers and many programs fit on an SM.

# %%
import normlab  # first: picks GPU or the Triton interpreter before any kernel is defined
import torch
from normlab import bench, exercises, ref, viz

recorded = bench.load_recorded(card="NVIDIA H200")  # the shipped H200 measurements
standard = viz.select(recorded, shape_set=None)  # the benchmark shape sets (populations aside)
fwd = viz.select(standard, op="rms_norm", direction="fwd", impl=["eager", "torch", "compile", "normlab"],
                 layout=[None, "auto"])
viz.gbps_vs_shape(fwd, source="recorded", title="RMSNorm forward, bf16")

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
# ## The op
#
# $$
# y_{ij} = \frac{x_{ij}}{\sqrt{\tfrac{1}{N}\sum_k x_{ik}^2 + \varepsilon}}\;\gamma_j .
# $$
#
# As separate fp32 ops (`x.float()`, `pow`, `mean`, `* rstd`, `* w`, the cast back) each step reads
# its input from HBM and writes its output back: 2 + 4 bytes per element to convert, 4 + 4 for
# `pow`, 4 for `mean`, 4 + 4 for each multiply and 4 + 2 to cast back, 40 against 4 for one fused
# kernel. That is the `eager` series above. normlab's forward runs one program per row, accumulates
# in fp32 whatever the input dtype, and writes `rstd` for the backward.
#
# ## Correctness against the fp64 reference
#
# `ref.rms_norm` is the one reference every test, benchmark and notebook uses. The shapes are
# awkward on purpose: a ragged width (1000), a single row, and a NaN that must stay in its row.

# %%
# NBVAL_CHECK_OUTPUT
torch.manual_seed(0)
for dtype, (M, N) in [(torch.bfloat16, (61, 1000)), (torch.float32, (61, 1000)), (torch.float16, (1, 4096))]:
    x = torch.randn(M, N, dtype=dtype, device=normlab.DEVICE)
    w = (1 + 0.1 * torch.randn(N, device=normlab.DEVICE)).to(dtype)
    y = normlab.rms_norm(x, w)
    print(viz.verdict(f"rms_norm fwd {str(dtype)[6:]:>8} {M}×{N} vs fp64 ref", y,
                      ref.rms_norm(x.double(), w.double()), dtype=dtype))
x2 = torch.randn(5, 300, device=normlab.DEVICE)
x2[3, 11] = float("nan")
print("rows with NaN in the output:", torch.isnan(normlab.rms_norm(x2)).any(1).nonzero().flatten().tolist())

# %% [markdown]
# ## The looped row: what the planner picks
#
# torch.compile's kernel for this op (read from its generated code, profiled with Nsight Compute)
# loops over the row twice in chunks of **one 16-byte vector per thread**: pass 1 sums the squares,
# pass 2 re-reads the row, now from L2, and writes $y$. The second pass costs no HBM traffic, and
# each thread holds 8 values instead of 32, so more programs fit on each SM and more loads are in
# flight. normlab's RMSNorm forward does the same at 1024–16384 columns (the planner's
# `configs.NORM_FWD_RMS_LOOPED`); narrower rows stay in registers. The second read hits L2 only
# while the rows held between the two reads fit there: four 16-warp programs an SM on 132 SMs hold
# 528 rows, 17 MB of bf16 rows of 16384 columns but 35 MB of fp32 ones, and at that width fp32 ran
# at 0.85× the speed of Liger-Kernel's one block on an H100. So the planner keeps the loop within
# half the L2 (`configs.looped_rows_fit_l2`). Past 16384 columns the balance turns: a row of up to
# 32768 columns is one register block of 64 values a thread, read once (47318×20163 on the H200:
# 1725 µs, against 1920 at best in 2048- or 4096-column chunks), and wider rows loop over
# 2048-column chunks. What it runs, per width:

# %%
# NBVAL_CHECK_OUTPUT
from normlab.norms import config as configs

for n in (512, 1000, 4096, 8192, 16384, 32768):
    cfg = configs.norm_fwd_config(n, is_rms=True)
    kind = "register-resident row" if cfg.block_size >= n else f"looped, {-(-n // cfg.block_size)} chunks per pass"
    print(f"N = {n:>5}: chunk {cfg.block_size:>5}, {cfg.num_warps:>2} warps, "
          f"{cfg.block_size // (32 * cfg.num_warps):>2} values per thread: {kind}")

# %% [markdown]
# ### Exercise: the chunk of the looped row
#
# A chunk is as wide as one 16-byte load per thread, over all of the program's threads. How many
# bf16 columns does one chunk cover for a program of `num_warps` warps? Predict, write it, check it
# against the planner's table.

# %%
def chunk_columns(num_warps: int) -> int:
    """Columns one pass of RMSNorm's looped forward covers per chunk, bf16."""
    # ▶ YOUR ANSWER: replace this line with your own code
    return exercises.solution("chunk_columns")(num_warps)


# %%
# NBVAL_CHECK_OUTPUT
exercises.check("chunk_columns", chunk_columns)

# %% [markdown]
# ## Recorded on the H200: against the best peer
#
# normlab's device time against the fastest peer at each shape (above 1× normlab is faster). The
# two halves of the x axis are two shape families (the peers' 11 shapes, and 7.9 million narrow
# rows), never joined by a line. One number, quoted from its record, is the same everywhere it
# appears:

# %%
viz.speedup_vs_best_peer(fwd, source="recorded", title="RMSNorm forward: speed-up vs the best peer")

# %%
# NBVAL_CHECK_OUTPUT
for impl in ("normlab", "compile"):
    print(viz.quote(fwd, impl=impl, M=32768, N=8192))

# %% [markdown]
# ## A measurement lesson at 16384×1024: two timing modes
#
# At 16384×1024 a kernel runs for about 18 µs, and a single ratio of two such times can be a ratio
# of two GPU states rather than of two kernels. In one recorded run, on the same buffers in a fixed
# order per round, Inductor's kernel (torch.compile's, launched on normlab's buffers) was timed
# first and again last; a one-warp row kernel third; normlab's default second. Inductor's kernel is
# fast or slow depending on what ran just before it, at the same SM clock (the
# [two-speeds note](../docs/notes/2026-11-30-rmsnorm-forward-1024-two-speeds.md) traces it); the
# default's range stays narrow. A CPU cannot show this live: the interpreter has no such state.

# %%
# NBVAL_CHECK_OUTPUT
from normlab.bench import devdata

run = devdata.sweep_run("fd6ed74")
if run is None:
    print("recorded: not in this installation's normlab/data/")
else:
    meta, results = run
    groups = {}
    for r in results:
        groups.setdefault((r["kernel"], r.get("take")), []).append(r["device_us"])
    print(f"recorded: RMSNorm 16384×1024, {meta['card']}, {meta['date'][:10]}, commit {meta['commit']}")
    for (kernel, take), us in groups.items():
        when = {1: " (first in its round)", 2: " (again, last)"}.get(take, "")
        print(f"  {kernel + when:<38} {min(us):.2f}–{max(us):.2f} µs over {len(us)} rounds")

# %% [markdown]
# ## Beyond the benchmark shapes: the cliff map
#
# Eleven benchmark shapes invite tuning that falls off a cliff beside them. The shape population
# (`normlab.bench.shapes`: seeded random shapes, model widths from decode to training batches,
# millions of narrow rows) is measured against every peer in one run. Each point is one shape:
# normlab ÷ the fastest peer (blue: normlab faster, red: slower; hover for the shape and the peer).

# %%
population = viz.select(recorded, shape_set="population")
viz.cliff_map(population, op="rms_norm", direction="fwd", dtype="bf16", source="recorded")

# %% [markdown]
# ## Widths that are not multiples of 16: a hint Triton dropped
#
# Row r of a bf16 tensor with N columns starts 2·N·r bytes in. A 16-byte load needs a multiple of
# 16 there. Triton learns only one fact about an int argument: whether it divides by 16. At
# N = 200, every row is 16-byte aligned (400 bytes), but Triton cannot tell. So the launcher
# computes how aligned the rows are (`config.row_align` of the row strides and the width), and
# the kernels are told.
#
# Until 2026-12-03 they were told with `tl.multiple_of(x_row_stride, ...)`. Triton attaches that
# hint to the op that defines a value, and a kernel argument has none, so it was dropped without
# a word. Every row stride that was not a multiple of 16 elements was loaded 2 bytes at a time.
# The fix writes the hint as a product, `stride // a * a`: the same value, whose divisibility
# Triton derives. On the H200 that made the 52 population members it reaches 1.30–1.49× faster
# in geomean ([the note](../docs/notes/2026-12-03-the-row-hint-reaches-the-loads.md)). What the
# rows allow, per width:

# %%
# NBVAL_CHECK_OUTPUT
for n in (4096, 200, 3956, 3958, 4097):
    align = configs.row_align(n, 2)  # elements, up to one 16-byte vector of bf16
    print(f"N = {n:>5}: every row starts on a multiple of {2 * align:>2} bytes: "
          f"loads of {2 * align} bytes at most")

# %% [markdown]
# This is checked without a GPU: `benchmarks/norm_access_widths.py` compiles three norm kernels for
# an H100/H200 (`sm_90`) with this machine's Triton and counts their global loads and stores by
# width, at each alignment a launch can take. With the old hint, every line below had 2-byte
# accesses; odd widths (alignment 1) still do.
#
# An odd row has whole vectors inside it all the same: from its first 16-byte boundary on. The
# forward of odd rows loads those as vectors and the few elements before and after them alone
# (`row._shifted_row`, planned by `config.shift_vec`); the `forward shifted row` line below has
# its 16-byte loads and stores. w and b are read at columns shifted by the row's head: element by
# element, or, in calls large enough to pay one more launch, as vectors from copies shifted by
# each head length. On the H200 the shifted rows alone made odd-width forwards up to 1.58× faster
# (LayerNorm 1492488×825 fp16), and they lost where rows already had 4- or 8-byte vectors
# ([the note](../docs/notes/2026-12-04-odd-rows-from-their-first-vector.md)).

# %%
import os
import subprocess
import sys
from pathlib import Path

root = Path(normlab.__file__).resolve().parents[1]
widths = subprocess.run([sys.executable, str(root / "benchmarks" / "norm_access_widths.py")],
                        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(root)})
print(widths.stdout or widths.stderr[-800:])

# %% [markdown]
# ## A decode batch: one row a SM, and the time is round trips
#
# Generating text runs the norm on one token per sequence: 1–64 rows. With one row per SM there
# is nothing to overlap, so bandwidth does not set the time; waiting does. Probe kernels of one
# program on the H200 show what a call pays (recorded, device µs,
# `benchmarks/short_call_probe.py`):

# %%
# NBVAL_CHECK_OUTPUT
from normlab.bench.records import read_jsonl

probe = read_jsonl(root / "benchmarks" / "data" / "short_call_probe_7efec02_h200.jsonl")
for r in probe:
    if r.M == 1 and r.impl.startswith(("store", "copy")):
        print(f"{r.impl:<36} {r.device_us:.2f} µs   ({r.card}, commit {r.commit})")

# %% [markdown]
# A second load that has to wait for the first costs 0.63 µs, about a third of such a call. Its
# parameters cost nothing. So a decode row wants every load in flight at once, and few loads
# per thread to wait on. An odd width such as 973 loads element by element (its rows are not
# 16-byte aligned). On the 2 warps that suit many rows, each thread would wait on 16 loads. Up
# to one row a SM and 2048 columns, the planner spreads the row to at most 8 values a thread
# (`config.NORM_FWD_DECODE_MAX_PER_THREAD`):

# %%
# NBVAL_CHECK_OUTPUT
for rows in (12, 132, 133, 4096):
    plans = [configs.norm_fwd_config(n, True, rows, 132).num_warps for n in (973, 2048, 4096)]
    print(f"{rows:>5} rows (132 SMs): warps at 973 / 2048 / 4096 columns = {plans}")

# %% [markdown]
# The check, at a decode batch of the odd width, against fp64:

# %%
# NBVAL_CHECK_OUTPUT
x = torch.randn(12, 973, device=normlab.DEVICE).to(torch.bfloat16)
w = (1 + 0.5 * torch.randn(973, device=normlab.DEVICE)).to(torch.bfloat16)
got, want = normlab.rms_norm(x, w), ref.rms_norm(x.double(), w.double(), 1e-6)
err = ((got.double() - want).norm() / want.norm()).item()
print(f"12 x 973 decode forward: {'ok' if err < 1e-2 else 'FAIL'} (relative error under 1e-2)")

# %% [markdown]
# Recorded on the H200: the rule off and on in one run (`NORMLAB_DECODE_WARPS=0/1`,
# [the note](../docs/notes/2026-12-04-short-calls-and-decode-warps.md)). It gains most where
# the rows are odd; the aligned rows move within the run-to-run spread of a 2 µs call.

# %%
off, on = (
    {(r.op, r.M, r.N): r.device_us
     for r in read_jsonl(root / "benchmarks" / "data" / f"decode_warps_{k}_e4d4e55_h200.jsonl")
     if r.direction == "fwd"}
    for k in (0, 1)
)
for M, N in ((12, 973), (14, 1022), (1, 1024), (8, 2048)):
    print(f"RMSNorm {M:>2} x {N:<5} {off['rms_norm', M, N]:.2f} -> {on['rms_norm', M, N]:.2f} µs")

# %% [markdown]
# ## Live measurement: eager ops vs `F.rms_norm` vs `torch.compile` vs fused
#
# On a CPU `torch.compile` is skipped (the sweep says why), and the timings are interpreter
# timings: they show the pipeline works, nothing more.

# %%
SHAPES = [(16, 256), (7, 1000)] if normlab.INTERPRET else [(8192, 1024), (1024, 8192), (4096, 4096), (32768, 8192)]
FAST = {"reps": 1, "warmup": 0} if normlab.INTERPRET else {}
live = bench.sweep("rms_norm", ["eager", "torch", "compile", "normlab"], SHAPES, ["bf16"], ["fwd"],
                   device=bench.device_info(), **FAST)
print(bench.format_table(live, live.skipped))

# %%
viz.gbps_vs_shape(live, source="live")

# %% [markdown]
# What was tried on the way here (the register-resident row, dropped predicates, the width as a
# compile-time constant, and the two speeds of one-warp kernels at 16384×1024 that make a single
# 20 µs ratio unreliable) is in the notes:
# [the looped row](../docs/notes/2026-11-30-rmsnorm-forward-looped-row.md),
# [the two speeds](../docs/notes/2026-11-30-rmsnorm-forward-1024-two-speeds.md),
# [warps and windows](../docs/notes/2026-11-29-norm-forward-warps-and-persistent-windows.md).
#
# [← 00-setup-and-roofline](00-setup-and-roofline.ipynb) · [all notebooks](../README.md#notebooks) · [02-backward-dgamma-reduction →](02-backward-dgamma-reduction.ipynb)
