# 07-options-and-the-fused-add: the source of notebooks/07-options-and-the-fused-add.ipynb (percent format, as jupytext
# reads it; `python scripts/make_notebooks.py` writes the notebook, scripts/execute_notebooks.py
# fills its outputs).

# %% [markdown]
# # 07 · What users reach for: the fused residual add, Gemma's offset, the loss options
#
# **Question.** Users of Liger-Kernel and Fast-LLM ask for more than a plain norm and a plain loss:
# the residual add fused into the norm, Gemma's `(1 + weight)` scale, and loss options (a
# temperature, a mask, forward KL, JSD, label smoothing, z-loss, softcap, an fp32 teacher). What
# does each one cost on top of the op it extends, and why that much?
#
# **Answer.** A memory-bound kernel's time follows whatever binds it. An option that adds neither
# bytes nor much arithmetic a logit costs next to nothing: z-loss adds one number a row. An option
# that adds bytes costs about its bytes: an fp32 teacher is read at 4 bytes a logit, not 2. An
# option that adds transcendental arithmetic to every logit can make the kernel arithmetic-bound:
# JSD takes a log and more exponentials a logit. The fused add goes the other way: it removes
# bytes, and saves about their time. Below, each option's recorded time over its base op's, with
# the bytes model's prediction as a black tick.

# %%
import normlab  # first: picks GPU or the Triton interpreter before any kernel is defined
import torch
from normlab import bench, ref, viz
from normlab.bench import devdata, traffic

meta, options = devdata.loss_options()  # a recorded H200 run of benchmarks/loss_options.py
viz.option_costs(meta, options)

# %%
# NBVAL_CHECK_OUTPUT
print(f"recorded: {meta['card']}, {meta['date']}, commit {meta['commit']}, torch {meta['torch']}, "
      f"triton {meta['triton']}")
print(f"  {meta['command']}")

# %% [markdown]
# > **Live vs recorded.** *Live* numbers are measured in this session on this machine. Without a GPU,
# > normlab runs its Triton kernels in the interpreter on CPU tensors: the live cells then check
# > correctness and exercise the pipeline on tiny shapes, and their timings say **nothing** about GPU
# > bandwidth. *Recorded* numbers were measured on an NVIDIA H200 and ship in `normlab/data/`; every
# > caption says which kind it shows, with the card, date and commit.
#
# ## The fused residual add
#
# A pre-norm transformer block adds its sublayer's output back into the residual stream and
# normalizes the sum for the next sublayer:
#
# $$
# h = x + r, \qquad y = \mathrm{norm}(h), \qquad
# \frac{\partial L}{\partial x} = \frac{\partial L}{\partial r}
#   = \underbrace{\frac{\partial L}{\partial h}}_{\text{from the stream}}
#   + \underbrace{\frac{\partial y}{\partial h}^{\!\top}\frac{\partial L}{\partial y}}_{\text{from the norm}} .
# $$
#
# `normlab.add_rms_norm(x, residual, weight)` returns `(y, h)` from one kernel. h is summed in
# fp32 and stored in x's dtype, and y is the norm of the stored h, so the result is what the two
# separate ops give. Its backward reads h, dy and the stream's dh once and writes one dx, the
# gradient of both inputs. In units of $M \cdot N \cdot e$ bytes (e = 2 for bf16), separately:
# the add moves 3 (read x and r, write h), the norm 5 (forward and backward), and autograd's sum of
# h's two gradients 3 more. The fused kernels move 8 (`normlab.bench.traffic`):

# %%
# NBVAL_CHECK_OUTPUT
M, N, dtype = 4096, 4096, "bf16"
unit = M * N * traffic.element_size(dtype)
separate = traffic.separate_add_bytes("add_rms_norm", "fwd+bwd", M, N, dtype)
fused = traffic.bytes_moved("add_rms_norm", "fwd+bwd", M, N, dtype)
print(f"{M}x{N} {dtype}, forward+backward: separate {separate / unit:.0f} units = "
      f"{separate / 1e6:.1f} MB, fused {fused / unit:.0f} units = {fused / 1e6:.1f} MB, "
      f"saved {(separate - fused) / 1e6:.1f} MB")

# %% [markdown]
# Checked against the fp64 reference, gradients included: M = 37 rows is ragged against every
# tile, N = 200 is not a power of two.

# %%
# NBVAL_CHECK_OUTPUT
torch.manual_seed(0)
M, N = 37, 200
for name, fn, ref_fn, bias in (("add_rms_norm", normlab.add_rms_norm, ref.add_rms_norm, False),
                               ("add_layer_norm", normlab.add_layer_norm, ref.add_layer_norm, True)):
    x = torch.randn(M, N, device=normlab.DEVICE, dtype=torch.bfloat16, requires_grad=True)
    r = torch.randn(M, N, device=normlab.DEVICE, dtype=torch.bfloat16, requires_grad=True)
    w = (1 + 0.1 * torch.randn(N, device=normlab.DEVICE)).requires_grad_()
    params = (w, (0.1 * torch.randn(N, device=normlab.DEVICE)).requires_grad_()) if bias else (w,)
    dy, dh = torch.randn(M, N, device=normlab.DEVICE), torch.randn(M, N, device=normlab.DEVICE)
    y, h = fn(x, r, *params)
    grads = torch.autograd.grad((y, h), (x, r, w), (dy.to(y.dtype), dh.to(h.dtype)))
    xd, rd = x.detach().double().requires_grad_(), r.detach().double().requires_grad_()
    wd = w.detach().double().requires_grad_()
    pd = (wd, params[1].detach().double()) if bias else (wd,)
    y_ref, h_ref = ref_fn(xd, rd, *pd)
    want = torch.autograd.grad((y_ref, h_ref), (xd, rd, wd), (dy.double(), dh.double()))
    print(f"{name:<15}", viz.verdict("h", h, h_ref), "|", viz.verdict("y", y, y_ref), "|",
          viz.verdict("dx", grads[0], want[0]), "|", viz.verdict("dr", grads[1], want[1]), "|",
          viz.verdict("dγ", grads[2], want[2], dtype=torch.bfloat16, reduce_len=M))

# %% [markdown]
# Recorded on the H200: the fused kernels against `rms_norm` on a separately computed sum, and
# Liger-Kernel's fused add. The dashed line is the bytes model's prediction for the fused op: the
# separate path's measured time less the bytes it moves and the fused one does not, at the
# card's measured copy bandwidth.

# %%
viz.fused_add_costs(meta, options)

# %% [markdown]
# `normlab.patch(model, fused_add=True)` moves a Llama-style decoder layer's mid-block residual
# add into its `post_attention_layernorm`'s kernel.
#
# ## Gemma's offset
#
# Gemma stores its norm weights centred on zero and scales by $1 + w$; TransformerEngine calls
# this "zero-centred gamma". With `offset=1.0`, $y = \hat x \odot (\text{offset} + w)$. The
# weight's gradient is unchanged, $\partial L / \partial w = \sum_{\text{rows}} \hat x \odot dy$,
# and `normlab.RMSNorm(n, offset=1.0)` starts its weight at zeros, so that its scale starts at
# one, as torch's weight of ones does.

# %%
# NBVAL_CHECK_OUTPUT
torch.manual_seed(1)
x = torch.randn(5, 96, device=normlab.DEVICE, requires_grad=True)
w = (0.1 * torch.randn(96, device=normlab.DEVICE)).requires_grad_()
dy = torch.randn(5, 96, device=normlab.DEVICE)
y = normlab.rms_norm(x, w, offset=1.0)
dx, dw = torch.autograd.grad(y, (x, w), dy)
xd, wd = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
y_ref = ref.rms_norm(xd, 1.0 + wd)  # the same as ref.rms_norm(xd, wd, offset=1.0)
dx_ref, dw_ref = torch.autograd.grad(y_ref, (xd, wd), dy.double())
print(viz.verdict("y", y, y_ref), "|", viz.verdict("dx", dx, dx_ref), "|",
      viz.verdict("dγ", dw, dw_ref, reduce_len=5))
gemma = normlab.RMSNorm(96, offset=1.0)
print(f"RMSNorm(96, offset=1.0): weight starts at {gemma.weight.detach().unique().tolist()}, "
      f"scale (offset + weight) at {(gemma.offset + gemma.weight).detach().unique().tolist()}")

# %% [markdown]
# ## The loss options
#
# With $p = \mathrm{softmax}(x / T)$ for the student's logits and
# $q = \mathrm{softmax}(t / T)$ for the teacher's (T = `temperature`, 1 by default, no $T^2$
# factor):
#
# | call | per row |
# |---|---|
# | `reverse_kl(x, t)` | $\mathrm{KL}(p \,\|\, q) = \sum_j p_j (\log p_j - \log q_j)$ |
# | `forward_kl(x, t)` | $\mathrm{KL}(q \,\|\, p) = \sum_j q_j (\log q_j - \log p_j)$ |
# | `jsd(x, t, beta=β)` | $\beta\,\mathrm{KL}(q \,\|\, m) + (1 - \beta)\,\mathrm{KL}(p \,\|\, m)$, $m = \beta q + (1 - \beta) p$ |
# | `soft_cross_entropy(x, t)` | $-\sum_j q_j \log p_j$ |
# | `cross_entropy(x, y, label_smoothing=ε)` | $(1 - \varepsilon)(-\log p_y) + \varepsilon \cdot \frac{1}{V}\sum_j (-\log p_j)$ (`F.cross_entropy`'s definition) |
# | `cross_entropy(x, y, z_loss=z)` | $-\log p_y + z \cdot (\operatorname{logsumexp} x)^2$ (PaLM) |
# | `cross_entropy(x, y, softcap=c)` | the same on $c \tanh(x / c)$ in place of $x$ (Gemma 2) |
#
# `loss_mask` (a bool per row) zeroes a row's loss and gradient, and "mean" divides by the
# unmasked rows. The target logits may come in another float dtype than the student's (an fp32
# teacher beside bf16 logits), read as they are, with no cast copy. Every option runs in every
# form (fused, chunked, split) and under `group=` for a vocabulary split over ranks. Each against
# its fp64 reference, loss and gradient, at V = 1000 (not a multiple of any tile):

# %%
# NBVAL_CHECK_OUTPUT
torch.manual_seed(2)
M, V = 6, 1000
x = torch.randn(M, V, device=normlab.DEVICE, requires_grad=True)
t = torch.randn(M, V, device=normlab.DEVICE)
labels = torch.randint(0, V, (M,), device=normlab.DEVICE)
mask = torch.tensor([True, False, True, True, False, True], device=normlab.DEVICE)
cases = {
    "reverse_kl T=2": (lambda a: normlab.reverse_kl(a, t, temperature=2.0),
                       lambda a: ref.reverse_kl_ref(a, t.double(), temperature=2.0)),
    "reverse_kl loss_mask": (lambda a: normlab.reverse_kl(a, t, loss_mask=mask),
                             lambda a: ref.reverse_kl_ref(a, t.double(), loss_mask=mask)),
    "reverse_kl fp16 teacher": (lambda a: normlab.reverse_kl(a, t.half()),
                                lambda a: ref.reverse_kl_ref(a, t.half().double())),
    "forward_kl": (lambda a: normlab.forward_kl(a, t), lambda a: ref.forward_kl_ref(a, t.double())),
    "jsd beta=0.3": (lambda a: normlab.jsd(a, t, beta=0.3), lambda a: ref.jsd_ref(a, t.double(), beta=0.3)),
    "cross_entropy label_smoothing": (lambda a: normlab.cross_entropy(a, labels, label_smoothing=0.1),
                                      lambda a: ref.cross_entropy_ref(a, labels, label_smoothing=0.1)),
    "cross_entropy z_loss": (lambda a: normlab.cross_entropy(a, labels, z_loss=1e-2),
                             lambda a: ref.cross_entropy_ref(a, labels, z_loss=1e-2)),
    "cross_entropy softcap": (lambda a: normlab.cross_entropy(a, labels, softcap=2.0),
                              lambda a: ref.cross_entropy_ref(a, labels, softcap=2.0)),
}
for name, (ours, theirs) in cases.items():
    loss = ours(x)
    grad, = torch.autograd.grad(loss, x)
    xd = x.detach().double().requires_grad_()
    loss_ref = theirs(xd)
    grad_ref, = torch.autograd.grad(loss_ref, xd)
    print(f"{name:<30}", viz.verdict("loss", loss, loss_ref, reduce_len=V), "|",
          viz.verdict("dlogits", grad, grad_ref))

# %% [markdown]
# ## What each option costs, and why
#
# The recorded run times forward+backward at 4096 × 131072 (bf16), each option beside its base op
# in the same process, and Liger-Kernel's equivalent where it has one. "× bytes" is what the
# bytes model alone predicts; the options that match it are bound by their bytes.

# %%
# NBVAL_CHECK_OUTPUT
print(f"{'option':<30} {'µs':>8} {'× base':>8} {'× bytes':>8} {'Liger × base':>13}")
for row in viz.option_cost_table(options):
    liger = f"{row['liger_ratio']:.2f}" if row["liger_ratio"] is not None else "–"
    print(f"{row['variant']:<30} {row['device_us']:>8.1f} {row['ratio']:>8.3f} "
          f"{row['bytes_ratio']:>8.3f} {liger:>13}")

# %% [markdown]
# ### Exercise: predict an fp32 teacher's bytes
#
# A distillation loss reads the student's logits and the teacher's, and writes the gradient of
# the student's logits. Write its forward+backward bytes for M rows of V logits, the logits at
# `logit_bytes` a value and the teacher at `teacher_bytes`. Then check it against normlab's
# bytes model: its ratio to the all-bf16 case is the black tick of the fp32 teacher above.

# %%
from normlab import exercises


def teacher_bytes(M: int, V: int, logit_bytes: int, teacher_bytes: int) -> int:
    """Minimal HBM bytes of reverse KL's forward+backward with a teacher in its own dtype."""
    # ▶ YOUR ANSWER: replace this line with your own code
    return exercises.solution("teacher_bytes")(M, V, logit_bytes, teacher_bytes)


# %%
# NBVAL_CHECK_OUTPUT
exercises.check("teacher_bytes", teacher_bytes)

# %% [markdown]
# Read the table by what each option adds a logit:
#
# - **Bytes.** An fp32 teacher moves 8 bytes a logit against 6: the bytes model says 1.33×, and
#   the measured ratio sits close to it. No kernel change removes those bytes.
# - **Fewer bytes.** A mask that drops a quarter of the rows skips their reads, and the call gets
#   faster than the base op.
# - **Per-row arithmetic.** z-loss squares one log-sum-exp a row: level with the base op.
# - **Per-logit arithmetic.** A temperature multiplies each logit; label smoothing adds a row sum
#   of the logits; softcap runs a `tanh` a logit in each of the kernel's two passes, on the same
#   special-function unit as the exponentials. Each costs a few percent. JSD needs the mixture's
#   log on top of two exponentials a logit, which makes it arithmetic-bound: its instruction
#   count, not its bytes, sets its time.
#
# The SASS counts behind these readings (instructions and special-function operations a logit,
# per loop) are in the notes on
# [the shorter loss loops](../docs/notes/2026-12-05-shorter-loss-loops-timed.md) and on
# [JSD's one log1p a logit](../docs/notes/2026-12-03-jsd-one-log1p-and-the-fused-add-registers.md).
#
# ### Three floors under a loss kernel
#
# A kernel cannot finish before its bytes have moved at copy speed. It also cannot finish before
# the SMs have issued its instructions, or before the special-function unit (MUFU: `ex2`, `lg2`,
# `tanh`) has returned its results. For $n$ logits, counts of $I$ instructions and $U$ MUFU
# operations a logit, $S$ SMs at clock $f$:
#
# $$
# t \;\ge\; \max\Big(\frac{\text{bytes}}{B_\text{copy}},\;
#   \frac{I\,n}{128\,S f},\; \frac{U\,n}{16\,S f}\Big),
# $$
#
# 128 thread instructions and 16 MUFU results a clock an SM on an H100 or H200
# (`normlab.bench.pipes`). $I$ and $U$ come from the kernel's SASS, compiled for sm_90 without a
# GPU (`benchmarks/kernel_loops.py`, shipped as `normlab/data/sm90-loss-loops.json`). Those are
# counts, not measurements. The counts at `6afadb7` are of the loss kernels the recorded run timed
# (`eb932e5`; between the two, only a switch that was off by default was removed). Label CE at
# this shape runs its chunked kernel at tile 4096, and those are the counts shown:

# %%
loops_meta, loops = devdata.loss_loops()  # SASS counts (sm_90, Triton 3.6), not a measurement
viz.option_bounds(meta, options, loops_meta, loops)

# %%
# NBVAL_CHECK_OUTPUT
print(f"{'label CE':<44} {'measured':>9} {'bytes':>7} {'issue':>7} {'MUFU':>7}   (µs)")
for row in viz.option_bound_table(options, loops, loops_meta["model"]):
    name = row["variant"] + (", FMA-pipe exp (model only)" if row["poly_exp2"] else "")
    measured = f"{row['device_us']:.1f}" if row["device_us"] is not None else "–"
    print(f"{name:<44} {measured:>9} {row['bytes_us']:>7.0f} {row['issue_us']:>7.0f} "
          f"{row['mufu_us']:>7.0f}")

# %% [markdown]
# Read it row by row:
#
# - **Label CE** runs above all three floors. The bytes are the highest of them, and the time
#   sits well above that floor: latency, not a pipe.
# - **z-loss** adds one number a row and moves no floor.
# - **Softcap** adds two `tanh` a logit on the MUFU pipe. That lifts its MUFU floor to the level
#   of its bytes, and its time rises with it.
# - **Label smoothing** adds a sum of the logits: a few instructions a logit, still far under
#   every floor. Yet it costs about as much as softcap. The model does not explain that, so the
#   model is not the whole story. The SASS later showed what it misses: once a chunk, label
#   smoothing's last tile held a reduction across the warps, during which no warp of the program
#   issues a load. Summed within each thread instead, label smoothing came down to about its base
#   op's time on an H100 (timed after this recorded run:
#   [note](../docs/notes/2026-12-05-smoothing-edge-tiles-in-each-thread.md)).
# - **The last row is a prediction, not a measurement.** It computes softcap's gradient
#   exponential on the FMA pipe with a polynomial instead of on MUFU
#   (`NORMLAB_LOSS_POLY_EXP2=1`). That trades one MUFU operation a logit for about nine
#   instructions, and leaves both floors under the bytes. Timed on an H100, it was slower, so it
#   stays off; the H200 run is still to come
#   ([note](../docs/notes/2026-12-05-softcap-exp-on-the-fma-pipe.md)).
#
# ## Live measurement
#
# The fused add against the separate add, timed here. Tiny under the interpreter (the timings
# only show the pipeline works); the recorded run's shape on a GPU. Both records carry the fused
# op's bytes (8 units), so their GB/s is the *effective* bandwidth of the work done.

# %%
M, N = (64, 256) if normlab.INTERPRET else (4096, 4096)
FAST = {"reps": 1, "warmup": 0} if normlab.INTERPRET else {}
device = bench.device_info()
x = torch.randn(M, N, device=normlab.DEVICE, dtype=torch.bfloat16, requires_grad=True)
r = torch.randn(M, N, device=normlab.DEVICE, dtype=torch.bfloat16, requires_grad=True)
w = torch.ones(N, device=normlab.DEVICE, dtype=torch.bfloat16, requires_grad=True)
dy = torch.randn(M, N, device=normlab.DEVICE, dtype=torch.bfloat16)


def fused_call():
    y, h = normlab.add_rms_norm(x, r, w)
    return torch.autograd.grad((y, h), (x, r, w), (dy, dy))


def separate_call():
    h = x + r
    return torch.autograd.grad((normlab.rms_norm(h, w), h), (x, r, w), (dy, dy))


live = [bench.measure(fused_call, "add_rms_norm", "normlab", M, N, torch.bfloat16, "fwd+bwd",
                      device=device, **FAST),
        bench.measure(separate_call, "add_rms_norm", "normlab separate add", M, N, torch.bfloat16,
                      "fwd+bwd", device=device, **FAST)]
print(bench.format_table(live))

# %%
viz.roofline_bars(live, source="live", title="The fused add against a separate add (live)")

# %% [markdown]
# What was measured and tried for each option, run by run, is in the dated notes of
# [`docs/notes/`](../docs/notes/README.md); the benchmark is `benchmarks/loss_options.py`.
#
# [← 06-explorer](06-explorer.ipynb) · [all notebooks](../README.md#notebooks)
