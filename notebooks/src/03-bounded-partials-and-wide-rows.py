# 03-bounded-partials-and-wide-rows: the source of notebooks/03-bounded-partials-and-wide-rows.ipynb (percent format, as jupytext
# reads it; `python scripts/make_notebooks.py` writes the notebook, scripts/execute_notebooks.py
# fills its outputs).

# %% [markdown]
# # 03 · Bounded partials and wide rows
#
# Fast-LLM's normalization backward rewrite (ServiceNow/Fast-LLM#546) makes two changes to the backward:
#
# 1. **Bound the partial-reduction work.** One partial row per block of rows makes the second kernel's
#    input grow with M (at 32768×1024 it ran at ~10% of bandwidth). A persistent grid of
#    `programs_per_sm × SMs` programs folds many row tiles into one fp32 partial each, so the buffer is
#    independent of M. Fast-LLM's rewrite (ServiceNow/Fast-LLM#546) found **two programs per SM** to be the knee: one starves latency
#    hiding, more re-inflate the reduce kernel.
# 2. **Decouple the tile from the row width.** Rows wider than one register tile take a **two-pass**
#    scheme: pass 1 reduces the per-row corrections over column chunks, pass 2 re-reads $x$, $dy$ to write
#    $dx$ and the partials. Narrow rows stay single-pass with no re-read.
#
# It also warns about a **measurement confound**: timing the backward as `fwd_bwd − fwd` leaves the
# forward's output warm in L2 and flatters the backward. normlab's bench flushes L2 before every call.
#
# From 1024 to 8192 columns the single-pass kernel has a twin that takes the row width as a
# compile-time constant and sums LayerNorm's two row sums in one reduction (one cross-warp exchange
# per row tile instead of two): at 32768×8192, RMSNorm 420.3 → 405.2 µs and LayerNorm 514.6 →
# 501.7 in the records. At 16384 columns the same change cost up to 165%. The one-row tile there
# already spills registers (60 per thread for LayerNorm), and the change made it spill 152.
# Registers decide a change's sign, so `configs.NORM_BWD_STATIC_COLS` keeps it where it was measured
# faster.

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
# ## Correctness: program counts and single vs two-pass
#
# The launcher `normlab.norms.row.norm_backward` takes `programs_per_sm` and `two_pass` directly;
# a small `block_cols` forces the two-pass path on a small row.

# %%
# NBVAL_CHECK_OUTPUT
from normlab.norms.row import norm_backward, norm_forward

torch.manual_seed(0)
M, N = 257, 300
x = torch.randn(M, N, device=normlab.DEVICE)
w = 1 + 0.1 * torch.randn(N, device=normlab.DEVICE)
dy = torch.randn(M, N, device=normlab.DEVICE)
_, mean, rstd = norm_forward(x, w, None, 1e-6, True)
ref_dx, ref_dw, _ = ref.norm_backward(dy.double(), x.double(), w.double(), eps=1e-6)
for two_pass, block_cols in ((False, None), (True, 128)):
    for pps in (1, 2, 4, 8):
        dx, dw, _ = norm_backward(dy, x, w, None, mean, rstd, True, strategy="persistent",
                                  programs_per_sm=pps, two_pass=two_pass, block_cols=block_cols)
        tag = f"{'two-pass' if two_pass else 'single-pass'} {pps}×SMs"
        print(viz.verdict(f"{tag:<18} dx", dx, ref_dx), "|", viz.verdict("dγ", dw, ref_dw, reduce_len=M))

# %% [markdown]
# ## How the buffer scales: programs per SM and M
#
# Partial rows the reduce kernel must read (fp32, N = 1024, 132 SMs), from `viz.contention_model`.
# Two-stage grows with M; persistent is fixed by the program count.

# %%
# NBVAL_CHECK_OUTPUT
print(f"{'M':>7} {'two_stage rows':>15} " + " ".join(f"{f'persist ×{p}':>11}" for p in (1, 2, 4, 8)))
for M in (2048, 8192, 32768, 131072):
    two = viz.contention_model(M, 1024, n_sm=132, two_stage_rows=32)["two_stage"]["partial_rows"]
    per = [viz.contention_model(M, 1024, n_sm=132, programs_per_sm=p)["persistent"]["partial_rows"] for p in (1, 2, 4, 8)]
    print(f"{M:>7} {two:>15} " + " ".join(f"{r:>11}" for r in per))

# %% [markdown]
# ## Live: sweep the program count and find the knee
#
# On the H200 the knee sits at **four** programs per SM for rows up to 2048 columns, not two; but
# four partial rows per SM would double the buffer. normlab keeps the buffer at 2 × SMs rows by
# letting programs 2k and 2k + 1 `atomic_add` into one zeroed partial row ("paired rows"). That is
# still bitwise deterministic: with exactly two addends into 0, $(0 + a) + b = (0 + b) + a$ in
# floating point, whichever program comes first. The price is a memset of the buffer and the atomics
# (`docs/notes/2026-11-29-norm-backward-persistent.md` has the measured cost).
#
# Each call is measured by `bench.measure` (device time with a cold L2 on a GPU, CPU time under the
# interpreter, divided into the bytes model) into a record the plots can draw. On the GPU the shape
# is Fast-LLM's 32768×1024 (ServiceNow/Fast-LLM#546); on a CPU a tiny one, where the timings only show the pipeline works.

# %%
M, N = (256, 256) if normlab.INTERPRET else (32768, 1024)
x = torch.randn(M, N, dtype=torch.bfloat16, device=normlab.DEVICE)
w = torch.ones(N, dtype=torch.bfloat16, device=normlab.DEVICE)
dy = torch.randn_like(x)
_, mean, rstd = norm_forward(x, w, None, 1e-6, True)

knee = [
    bench.measure(lambda: norm_backward(dy, x, w, None, mean, rstd, True, strategy="persistent",
                                        programs_per_sm=pps, paired_partials=paired),
                  "rms_norm", "normlab", M, N, "bf16", "bwd", device=device,
                  strategy=f"persistent {pps}/SM" + (", paired rows" if paired else ""),
                  reps=5 if normlab.INTERPRET else 30)
    for pps, paired in ((1, False), (2, False), (4, False), (4, True), (8, False))
]
viz.records_table(knee, ["strategy", "M", "N", "device_us", "wall_us", "gbps"])

# %%
viz.roofline_bars(knee, source="live", title="Programs per SM: fraction of copy")

# %%
viz.kernel_breakdown(knee, source="live", title="Programs per SM: main vs reduce kernel")

# %% [markdown]
# ## Cold vs warm L2
#
# The confound in numbers: the same backward timed right after its forward (inputs still in L2) vs
# after the bench's L2 flush. On the H200 (60 MB L2) a 4096×4096 bf16 tensor is 32 MiB, so a warm
# backward reads part of its inputs from cache and looks faster than training will ever see it.

# %%
M, N = (64, 256) if normlab.INTERPRET else (4096, 4096)
x = torch.randn(M, N, dtype=torch.bfloat16, device=normlab.DEVICE, requires_grad=True)
w = torch.ones(N, dtype=torch.bfloat16, device=normlab.DEVICE, requires_grad=True)
dy = torch.randn(M, N, dtype=torch.bfloat16, device=normlab.DEVICE)
cold = bench.time_call(lambda: torch.autograd.grad(normlab.rms_norm(x, w), (x, w), dy), reps=5)
fwd = bench.time_call(lambda: normlab.rms_norm(x, w), reps=5)
print(f"fwd+bwd with a cold L2: {cold.device_us:.1f} µs; fwd alone: {fwd.device_us:.1f} µs; "
      f"'bwd = fwd_bwd - fwd': {cold.device_us - fwd.device_us:.1f} µs")
print("compare with the isolated cold-L2 backward of the sweep below (bench flushes before each call)")

# %%
live = bench.sweep("rms_norm", ["normlab"], [(M, N)], ["bf16"], ["bwd"], device=device)
print(bench.format_table(live, live.skipped))

# %% [markdown]
# ## Recorded on the H200: reduce-kernel cost vs M

# %%
bwd = viz.select(recorded, op="rms_norm", direction="bwd", impl="normlab")
viz.kernel_breakdown(bwd, source="recorded")

# %%
viz.gbps_vs_shape(viz.select(recorded, op="rms_norm", direction="bwd"), source="recorded")

# %% [markdown]
# [← 02-backward-dgamma-reduction](02-backward-dgamma-reduction.ipynb) · [all notebooks](../README.md#notebooks) · [04-narrow-rows-block-row →](04-narrow-rows-block-row.ipynb)
