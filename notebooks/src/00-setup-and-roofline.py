# 00-setup-and-roofline: the source of notebooks/00-setup-and-roofline.ipynb (percent format, as jupytext
# reads it; `python scripts/make_notebooks.py` writes the notebook, scripts/execute_notebooks.py
# fills its outputs).

# %% [markdown]
# # 00 · Setup and the roofline
#
# **Question.** A norm or a loss does a few flops per byte it moves. How fast can it possibly run on
# an H200, and how do we say how close a kernel gets?
#
# **Answer.** Its time is set by bytes, not arithmetic: the ceiling is the card's measured copy
# bandwidth, and every kernel is judged by the fraction of it that it reaches. The figure below is
# RMSNorm's forward on the H200 (recorded; the caption names card, date and commit): most shapes sit
# at 80–100% of copy, and the few below it are the small, short ones where a kernel's launch and
# its first loads are a large share of its time.

# %%
import normlab  # first: picks GPU or the Triton interpreter before any kernel is defined
from normlab import bench, exercises, viz

recorded = bench.load_recorded(card="NVIDIA H200")  # the shipped H200 measurements
standard = viz.select(recorded, shape_set=None)  # the benchmark shape sets (populations aside)
fwd = viz.select(standard, op="rms_norm", direction="fwd", impl=["torch", "compile", "normlab"],
                 layout=[None, "auto"])
viz.roofline_bars(fwd, source="recorded", title="RMSNorm forward: fraction of the measured copy")

# %%
# NBVAL_CHECK_OUTPUT
print(viz.recorded_summary(recorded))

# %% [markdown]
# > **Live vs recorded.** *Live* numbers are measured in this session on this machine. Without a GPU,
# > normlab runs its Triton kernels in the interpreter on CPU tensors: the live cells then check
# > correctness and exercise the pipeline on tiny shapes, and their timings say **nothing** about GPU
# > bandwidth. *Recorded* numbers were measured on an NVIDIA H200 and ship in `normlab/data/`; every
# > caption says which kind it shows, with the card, date and commit.

# %%
device = bench.device_info()  # card, versions, and the copy bandwidth measured right now
print("\n".join(device.lines()))

# %% [markdown]
# ## Effective bandwidth and the roofline
#
# An RMSNorm forward is a square, a sum, a reciprocal square root and two multiplies for every
# 4 bytes (bf16 read + write). A GPU sustains hundreds of flops per byte of HBM traffic, so these
# ops are **memory-bound** and the figure of merit is
#
# $$
# \text{GB/s} = \frac{\text{bytes the op must move}}{\text{device time}} .
# $$
#
# Its ceiling (the *roofline*) is the best rate the card moves bytes at all. normlab measures it
# rather than trusting the datasheet: a device-to-device `copy_` of a buffer far larger than L2,
# bytes read + written. Every record stores the copy measured in its own run:

# %%
# NBVAL_CHECK_OUTPUT
r = viz.one(fwd, impl="normlab", M=32768, N=8192)
print(f"recorded ({r['card']}, commit {r['commit']}): measured copy {r['roofline_gbps']:,.0f} GB/s, "
      f"datasheet {r['datasheet_gbps']:,.0f} GB/s: copy reaches "
      f"{100 * r['roofline_gbps'] / r['datasheet_gbps']:.0f}% of the datasheet")
print(f"live ({device.card}, {device.mode} mode): measured copy {device.copy.gbps:,.0f} GB/s")

# %% [markdown]
# ## The bytes models
#
# `normlab.bench.traffic` writes down what each (op, direction) must move. The **minimal** model
# counts only the activations, so its GB/s never flatters a kernel; the **full** model adds the
# weights, the fp32 row statistics and the fp32 partial rows of a two-stage reduction.

# %%
# NBVAL_CHECK_OUTPUT
M, N = 4096, 4096
print(f"bytes moved for M×N = {M}×{N}, bf16 (MiB)")
print(f"{'op':<20}{'direction':<10}{'minimal':>10}{'full':>10}")
for op, direction in [("rms_norm", "fwd"), ("rms_norm", "bwd"), ("layer_norm", "fwd"),
                      ("layer_norm", "bwd"), ("reverse_kl", "fwd+bwd"), ("cross_entropy", "fwd+bwd")]:
    lo = bench.bytes_moved(op, direction, M, N, "bf16")
    hi = bench.bytes_moved(op, direction, M, N, "bf16", model="full", n_partials=264)
    print(f"{op:<20}{direction:<10}{lo / 2**20:>10.2f}{hi / 2**20:>10.2f}")

# %% [markdown]
# ### Exercise: the bytes of RMSNorm
#
# Predict before you look at the table's code: how many bytes must one RMSNorm call move, in each
# direction, for an M×N input of `elem_bytes`-byte elements (minimal model)? The backward gets
# $dy$ and needs $x$ to recompute $\hat x$; "fwd+bwd" is one call that runs the forward and then
# its backward.
#
# Replace the marked line with your own formula and run the check: it compares your function with
# `bench.bytes_moved` on 12 cases and explains the first wrong one. (Until you do, the shipped
# solution answers, and the check says so; `exercises.show_solution("rms_norm_bytes")` prints it.)

# %%
def rms_norm_bytes(direction: str, M: int, N: int, elem_bytes: int) -> int:
    """Bytes one RMSNorm call moves to or from HBM (direction: "fwd", "bwd" or "fwd+bwd")."""
    # ▶ YOUR ANSWER: replace this line with your own code
    return exercises.solution("rms_norm_bytes")(direction, M, N, elem_bytes)


# %%
# NBVAL_CHECK_OUTPUT
exercises.check("rms_norm_bytes", rms_norm_bytes)

# %% [markdown]
# ## Device time vs wall time
#
# `bench.sweep` reports two times per call. **Device time** is the sum of the call's GPU kernel
# durations from the profiler, with L2 flushed before each call (inputs come from HBM, as in
# training). **Wall time** is one isolated call from an idle GPU to its last kernel's end, so it
# includes Python, argument checks, autograd and launches. At small shapes the kernels finish long
# before the CPU is done launching them, and the wall time is the host's.
#
# Recorded on the H200 (each line is one record; same run for each shape):

# %%
# NBVAL_CHECK_OUTPUT
print(f"{'impl':<9}{'M×N':>12}{'device':>10}{'wall':>10}   (µs, recorded)")
for M, N in ((8192, 1024), (32768, 8192)):
    for impl in ("torch", "compile", "normlab"):
        r = viz.one(fwd, impl=impl, M=M, N=N)
        print(f"{impl:<9}{f'{M}×{N}':>12}{r['device_us']:>10.1f}{r['wall_us']:>10.1f}")
print(f"(RMSNorm forward, {r['card']}, commit {r['commit']})")

# %% [markdown]
# Those wall times were recorded before normlab's host path was trimmed. The host overhead is
# measured on its own (`benchmarks/host_profile.py`): a tiny input (4×1024), so the GPU is never
# the bottleneck; `host` is CPU µs per call in a launch-bound loop, `wall` the median isolated
# call. The same measurement runs live here on this machine's tiny input, in the interpreter (it
# measures how slow the interpreter is, nothing about a GPU's host path):

# %%
from normlab.bench import devdata, overhead

live_host = overhead.measure_overhead(ops=("rms_norm",), impls=("normlab", "torch"), directions=("fwd",))
print(f"live, {normlab.DEVICE} ({'interpreter' if normlab.INTERPRET else 'GPU'}):")
print(overhead.format_overhead(live_host))
host = devdata.host_overhead()
if host is None:
    print("recorded: not in this installation's normlab/data/")
else:
    meta, costs = host
    print(f"\nrecorded: {meta['card']}, {meta['date']}, commit {meta['commit']}:")
    print(overhead.format_overhead([c for c in costs if c.op == "rms_norm"]))

# %% [markdown]
# On the H200 a 4×1024 RMSNorm kernel takes a few µs of device time, and the call costs tens of µs
# of CPU: a step made of small calls is bound by the host, and only device time says anything
# about the kernel.
#
# normlab checks and plans a signature's first call and replays its recorded launches after
# that. A norm call that needs a gradient replays them from a small C++ autograd node
# (`normlab/_native.cpp`): a Python `autograd.Function` alone, launching nothing, cost 0.6× torch's
# whole RMSNorm forward+backward on an H200's host. With the node, normlab's forward+backward cost
# 0.98–1.11× torch's own op on an H100's host
# (`docs/notes/2026-12-07-the-norms-autograd-node-in-cpp.md`).
#
# **CUDA graphs** remove that host cost: `torch.cuda.graph` records the kernels one call
# launches, and `graph.replay()` launches them again with no Python, no argument checks and no
# Triton launcher (`torch.compile(mode="reduce-overhead")` does this for you). Each normlab op
# captures and replays (its GPU checks compare the replay with eager). Live, on a GPU only:

# %%
graph = overhead.graph_replay("rms_norm")
if graph is None:
    print("live: CUDA graphs need a GPU (this machine runs the interpreter); the H200 copy of this "
          "notebook (docs/h200-notebooks/) shows the measurement")
else:
    eager_us, replay_us = graph
    print(f"live, {device.card}: RMSNorm forward 4×1024, wall µs per call in a loop: eager "
          f"{eager_us:.1f}, CUDA-graph replay {replay_us:.1f} ({eager_us / replay_us:.1f}× less)")
#
# ## Live: the harness end to end
#
# The same sweep every figure is drawn from, on this machine (tiny shapes under the interpreter):

# %%
SHAPES = [(16, 256), (7, 1000)] if normlab.INTERPRET else [(1024, 1024), (8192, 1024), (4096, 4096), (32768, 8192)]
FAST = {"reps": 1, "warmup": 0} if normlab.INTERPRET else {}
live = bench.sweep("rms_norm", ["normlab", "torch"], SHAPES, ["bf16"], ["fwd"], device=device, **FAST)
print(bench.format_table(live, live.skipped))

# %%
viz.gbps_vs_shape(live, source="live")

# %% [markdown]
# [all notebooks](../README.md#notebooks) · [01-rmsnorm-forward →](01-rmsnorm-forward.ipynb)
