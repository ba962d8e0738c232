# 00-setup-and-roofline: the source of notebooks/00-setup-and-roofline.ipynb (percent format, as jupytext
# reads it; `python scripts/make_notebooks.py` writes the notebook, scripts/execute_notebooks.py
# fills its outputs).

# %% [markdown]
# # 00 · Setup and the roofline
#
# What you will learn:
# - which machine and mode normlab runs in, and how to read *live* vs *recorded* numbers;
# - **effective bandwidth** and the **memory roofline** that every plot in this lab is drawn against;
# - the **bytes models**: what each op must move, written down before anything is timed;
# - **device time vs wall time**: why a kernel that takes 10 µs can cost 100 µs of your step.

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
# ## Effective bandwidth and the roofline
#
# The ops in this lab (RMSNorm, LayerNorm, the KL and cross-entropy losses) do a handful of
# floating-point operations per element they load: an RMSNorm forward is a square, a sum, a
# reciprocal square root and two multiplies for every 4 bytes (bf16 read + write). A GPU
# sustains hundreds of FLOPs per byte of HBM traffic, so these ops are **memory-bound**:
# their time is set by bytes, not arithmetic. The figure of merit is the effective bandwidth
#
# $$
# \text{GB/s} = \frac{\text{bytes the op must move}}{\text{device time}}
# $$
#
# and its ceiling (the *roofline*) is the best rate the card can move bytes at all. normlab measures that
# ceiling rather than trusting the datasheet: a device-to-device `copy_` of a buffer far larger than
# L2, counting bytes read + written. A kernel at 90% of copy is near the speed of light for its traffic.

# %% [markdown]
# ## The bytes models
#
# `normlab.bench.traffic` writes down the bytes each (op, direction) must move. The **minimal** model
# counts only the activations (so its GB/s never flatters a kernel); the **full** model adds weights,
# row statistics and the fp32 partial buffers of a two-stage reduction.

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
# ## Measured copy bandwidth vs the datasheet
#
# The copy measured above is this machine's roofline. On a CPU it is the host's memcpy rate and has
# nothing to do with a GPU; the recorded H200 run stores its own copy measurement next to every record.

# %%
print(f"live   ({device.card}, {device.mode} mode): measured copy {device.copy.gbps:,.0f} GB/s; "
      f"datasheet {device.datasheet_gbps or 'n/a (not a known GPU)'}")
copy_rec = viz.select(recorded, op="rms_norm")
if copy_rec:
    r = copy_rec[0]
    print(f"recorded ({r['card']}, {r['date'][:10]}): measured copy {r['roofline_gbps']:,.0f} GB/s; "
          f"datasheet {r['datasheet_gbps']:,.0f} GB/s ({100 * r['roofline_gbps'] / r['datasheet_gbps']:.0f}%)")
else:
    print("recorded: " + viz.NO_RECORDED_DATA)

# %% [markdown]
# ## Device time vs wall time
#
# `bench.sweep` reports two times per call. **Device time** is the sum of the call's GPU kernel
# durations from the profiler, with L2 flushed before each call (the training view: inputs come from
# HBM). **Wall time** is measured around the call from the CPU and includes Python and launch overhead.
# At small shapes the gap is large: the kernels finish long before the CPU is done launching them.
# Under the interpreter both are the same CPU time.

# %%
SHAPES = [(64, 256), (37, 1000)] if normlab.INTERPRET else [(1024, 1024), (8192, 1024), (4096, 4096), (32768, 8192)]
live = bench.sweep("rms_norm", ["normlab", "torch"], SHAPES, ["bf16"], ["fwd"], device=device)
print(bench.format_table(live, live.skipped))

# %%
viz.records_table(live, ["impl", "M", "N", "device_us", "wall_us", "gbps", "frac_roofline"])

# %%
viz.gbps_vs_shape(live, source="live")

# %% [markdown]
# ### Recorded on the H200
#
# The same plot from the shipped H200 run: the dashed line is the measured copy bandwidth, the dotted
# line the datasheet peak. Hover a point for device µs, wall µs and the percentage of copy.

# %%
viz.gbps_vs_shape(viz.select(recorded, op="rms_norm", direction="fwd"), source="recorded")

# %%
viz.roofline_bars(viz.select(recorded, op="rms_norm", direction="fwd"), source="recorded")

# %% [markdown]
# [all notebooks](../README.md#notebooks) · [01-rmsnorm-forward →](01-rmsnorm-forward.ipynb)
