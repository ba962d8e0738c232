# 05-reverse-kl-fused-vs-split: the source of notebooks/05-reverse-kl-fused-vs-split.ipynb (percent format, as jupytext
# reads it; `python scripts/make_notebooks.py` writes the notebook, scripts/execute_notebooks.py
# fills its outputs).

# %% [markdown]
# # 05 · Reverse KL: fused vs split
#
# **Question.** A distillation loss compares two softmaxes over a vocabulary of 32K–152K entries per
# token. Fast-LLM's Triton kernel for it ran about 3× *slower* than `torch.compile` at V = 32K
# (ServiceNow/Fast-LLM#497). Why, and what runs fast?
#
# **Answer.** It held whole rows of both distributions in registers: about 2 programs per SM, no
# latency hiding. Streaming each row in **tiles** of 1024–2048 columns with an online softmax keeps
# programs small, and one kernel writes the loss *and* the gradient (`fused`), reading each row
# twice, the second time from L2. On the H200 normlab's default runs 3.4–5× faster than
# `torch.compile` (below, recorded).

# %%
import normlab  # first: picks GPU or the Triton interpreter before any kernel is defined
import torch
from normlab import bench, exercises, ref, viz

recorded = bench.load_recorded(card="NVIDIA H200")  # the shipped H200 measurements
kl = viz.select(recorded, op="reverse_kl", shape_set=None)
default = viz.select(kl, impl=["eager", "compile", "normlab"], strategy=[None, "auto", "split"])
viz.speedup_vs_best_peer(default, source="recorded", title="Reverse KL, loss and gradient: speed-up vs the best peer")

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
# ## The loss
#
# With $p = \mathrm{softmax}(x)$ (the student's logits) and $q = \mathrm{softmax}(t)$ (the teacher's),
#
# $$
# \mathrm{KL}(p \,\|\, q) = \sum_j p_j(\log p_j - \log q_j),\qquad
# \frac{\partial\,\mathrm{KL}}{\partial x_j} = p_j\big((\log p_j - \log q_j) - \mathrm{KL}\big).
# $$
#
# Both softmaxes need a row max and a row sum before anything else, so a row is read at least twice.
# normlab has three forms: `fused` (one kernel writes loss and gradient; the backward only
# rescales), `split` (a statistics kernel stores per-row max and sum, a backward kernel reloads
# them: the **tensor-parallel** path, where only the row statistics are all-reduced), and `chunked`
# (each row cut into chunks of a few tiles, one program per chunk, which meet at a per-row counter:
# the second read stays a short L2 round trip at the widest vocabularies).
#
# ## What `form="auto"` runs
#
# The tile cap (`block_cap`) can be set anywhere from 16 to 65536 columns for experiments; the
# planner (`normlab.losses.config.entropy_auto`) picks per vocabulary class. A call with fewer
# rows than the GPU has SMs takes the chunked form instead, with chunks as short as one tile, so
# that its rows spread over the SMs (`config.chunk_layout`).
#
# The fused form's second read finds its row in L2 only while the rows *in flight* fit there:
# one program a row keeps as many rows in flight as the registers let reside, for label
# cross-entropy at V = 32768 about 1000 rows of 64 KB, more than an H100's 50 MiB of L2. So
# label cross-entropy takes a grid of 4 programs per SM, which take the rows from a queue,
# where that grid's rows fill half to three quarters of the L2
# (`config.entropy_fused_programs`). At 4096 × 32768 that took it from 255 to 218 µs on an
# H100 and from 191 to 175 µs on an H200. Outside the band, and for the losses with a second
# input, the H200 ran the grid slower than one program a row
# ([the note](../docs/notes/2026-12-05-the-fused-grid-queue-and-l2-band.md)).

# %%
# NBVAL_CHECK_OUTPUT
from normlab.losses import config

for V in (32768, 50256, 50257, 65536, 131072, 151936):
    form, cap = config.entropy_auto("reverse_kl", V, distributed=False)
    print(f"V = {V:>6} ({config.entropy_vocab_class(V):>9}): form {form:<8} tile {cap}")

# %% [markdown]
# Inside `torch.compile` the answer changes. The fused and chunked forms save the gradient their
# forward wrote, and an eager backward scales it in place (a no-op for `loss.backward()`). A
# compiled backward cannot: the graph may run it again, so it scales out of place, reading and
# writing the whole gradient once more. For label cross-entropy that makes four passes over the
# logits' size against the split form's three (statistics; then read and write), so a compiled
# call that needs the gradient takes the split form from one row an SM. Reverse KL reads its
# target too, five passes either way; it takes the split form from 4 rows an SM, below which the
# split form's one program per row leaves SMs idle. On the H200 the 1B Llama's label
# cross-entropy (8192 × 128256) went from 2244 µs to 1574 µs compiled
# ([the note](../docs/notes/2026-12-03-compiled-losses-take-the-split-form.md)).
#
# In the compiled graph the kernels are launched by Inductor itself: the losses are Triton ops
# (`torch.library.triton_op`), so torch.compile traces the form's launchers once and none of
# normlab's Python runs per step. A ragged vocabulary (50257) is the exception: its rows are
# read in 16-byte frames found from their addresses, which a traced tensor does not have, so
# it keeps an opaque op ([the note](../docs/notes/2026-12-04-losses-as-triton-ops.md)).

# %%
# NBVAL_CHECK_OUTPUT
SMS = 132  # an H200's SMs: the rule's rows are counted per SM
for rows in (132, 527, 528, 8192):
    eager_form, _ = config.entropy_auto("reverse_kl", 131072, False, rows, SMS, 4 * 131072)
    compiled_form, _ = config.entropy_auto("reverse_kl", 131072, False, rows, SMS, 4 * 131072,
                                           compiled_grad=True)
    print(f"{rows:>5} rows x 131072: eager {eager_form:<8} compiled with a gradient {compiled_form}")

# %% [markdown]
# ## Correctness: every form, several tile caps, loss and gradient
#
# V = 1000 with caps of 256 and 1024 gives several tiles per row, and one.

# %%
# NBVAL_CHECK_OUTPUT
torch.manual_seed(0)
M, V = 3, 1000
logits = torch.randn(M, V, device=normlab.DEVICE, requires_grad=True)
target = torch.randn(M, V, device=normlab.DEVICE)
ref_loss = ref.reverse_kl_ref(logits.double(), target.double())
ref_grad, = torch.autograd.grad(ref.reverse_kl_ref(logits.double(), target.double()), logits)
for form in ("fused", "chunked", "split"):
    for cap in (256, 1024):
        loss = normlab.reverse_kl(logits, target, form=form, block_cap=cap)
        grad, = torch.autograd.grad(loss, logits)
        print(f"reverse_kl {form:<7} cap={cap:<5}", viz.verdict("loss", loss, ref_loss, reduce_len=M),
              "|", viz.verdict("dlogits", grad, ref_grad))

# %% [markdown]
# ## Registers and programs per SM
#
# The chunked form is latency-bound: each program waits on the others of its row, so it wins only
# with enough programs resident per SM to hide the waits. Its 2048-wide tile compiles to more than
# 64 registers per thread; capped at 64 (`config.ENTROPY_CHUNKED_MAXNREG`), 8 programs of 4 warps fit
# on an SM instead of 7, and it became the default from V = 65536 up.
#
# ### Exercise: programs per SM from registers
#
# An H200 SM (compute capability 9.0) has 65536 32-bit registers, holds at most 64 warps and 32
# programs, and gives each warp its registers in units of 256. How many programs of `num_warps`
# warps at `n_regs` registers per thread fit on one SM?

# %%
def programs_per_sm(n_regs: int, num_warps: int) -> int:
    """Programs resident on one H200 SM, limited by registers, warps and programs."""
    # ▶ YOUR ANSWER: replace this line with your own code
    return exercises.solution("programs_per_sm")(n_regs, num_warps)


# %%
# NBVAL_CHECK_OUTPUT
exercises.check("programs_per_sm", programs_per_sm)

# %% [markdown]
# ## Live measurement: forms against the fp32 PyTorch loss
#
# One tile cap under the interpreter (tiny shapes; the timings only show the pipeline works); on a
# GPU the loss shapes with the caps the planner uses and the widest ones.

# %%
SHAPES = [(2, 1000)] if normlab.INTERPRET else bench.SHAPES["losses"][:3]
CAPS = [1024] if normlab.INTERPRET else [1024, 2048, 4096, 32768]
FAST = {"reps": 1, "warmup": 0} if normlab.INTERPRET else {}
live = bench.sweep("reverse_kl", ["eager", "compile", "normlab"], SHAPES, ["bf16"], ["fwd+bwd"],
                   device=bench.device_info(), options={"form": ["fused", "chunked", "split"], "block_cap": CAPS},
                   **FAST)
print(bench.format_table(live, live.skipped))

# %%
viz.gbps_vs_shape(live, source="live")

# %% [markdown]
# ## Recorded on the H200: speed and memory
#
# Every form and cap recorded at each vocabulary; `Δpeak` is the extra memory one call allocates (the
# fused form writes no intermediate softmax).

# %%
viz.gbps_vs_shape(viz.select(kl, impl="normlab"), source="recorded",
                  title="Reverse KL: every recorded form and tile cap")

# %%
viz.records_table(default, ["impl", "strategy", "M", "N", "device_us", "gbps", "frac_roofline",
                            "peak_extra_bytes"], empty=viz.NO_RECORDED_DATA)

# %% [markdown]
# ## Ragged vocabularies: where each row starts
#
# A row of V bf16 logits is 2·V bytes, so row r starts 2·V·r bytes into the tensor. A 16-byte vector
# load needs that address to be a multiple of 16. At V = 50256 it always is; at V = 50257 it almost
# never is, and Triton, which cannot prove it for any row, falls back to 2-byte loads everywhere. The
# loss kernels therefore index each row from the 128-byte boundary before it and drop the
# neighbouring rows' lanes in registers (`row_frames` in `normlab/losses/online.py`).

# %%
# NBVAL_CHECK_OUTPUT
for V in (50256, 50257):
    starts = [2 * V * r % 16 for r in range(8)]
    print(f"V = {V}: rows 0-7 start {starts} bytes past a 16-byte boundary -> {config.entropy_vocab_class(V)}")

# %% [markdown]
# The frames must not change a single value: fp32, V = 1003 (row r starts 12·r mod 16 bytes past a
# boundary), every form, and a 256-wide tile so each row has a first, middle and last tile.

# %%
# NBVAL_CHECK_OUTPUT
torch.manual_seed(0)
M, V = 3, 1003
logits = torch.randn(M, V, device=normlab.DEVICE, requires_grad=True)
target = torch.randn(M, V, device=normlab.DEVICE)
ref_loss = ref.reverse_kl_ref(logits.double(), target.double(), reduction="sum")
ref_grad, = torch.autograd.grad(ref_loss, logits)
for form in ("fused", "chunked", "split"):
    loss = normlab.reverse_kl(logits, target, form=form, block_cap=256, reduction="sum")
    grad, = torch.autograd.grad(loss, logits)
    print(f"reverse_kl {form:<7} V={V}", viz.verdict("loss", loss, ref_loss, reduce_len=M * V),
          "|", viz.verdict("dlogits", grad, ref_grad))

# %% [markdown]
# Recorded at V = 50257, every form and cap (`auto` picks among them by `entropy_vocab_class`):

# %%
viz.records_table(viz.select(kl, N=50257), ["impl", "strategy", "block_cap", "device_us", "gbps",
                                            "frac_roofline"], empty=viz.NO_RECORDED_DATA)

# %% [markdown]
# How the default got here (tile caps, lane statistics, the register cap, aligned frames, and the
# statistics-in-the-gradient variant that had a race and was dropped) is in the notes:
# [lanes, chunks and frames](../docs/notes/2026-11-30-loss-lanes-chunks-frames.md),
# [memory and the race](../docs/notes/2026-11-30-loss-memory-stats-in-grad.md),
# [the vocab-parallel split form](../docs/notes/2026-11-29-vocab-parallel-reverse-kl.md).
#
# [← 04-narrow-rows-block-row](04-narrow-rows-block-row.ipynb) · [all notebooks](../README.md#notebooks) · [06-explorer →](06-explorer.ipynb)
