# 06-explorer: the source of notebooks/06-explorer.ipynb (percent format, as jupytext
# reads it; `python scripts/make_notebooks.py` writes the notebook, scripts/execute_notebooks.py
# fills its outputs).

# %% [markdown]
# # 06 · Explorer
#
# Pick an op, several implementations at once, a strategy (norms) or form (losses), dtype, direction,
# and shapes (sliders, or a preset such as the peer shapes), then press **Run**. The progress bar follows
# `bench.sweep`; the live figures (GB/s vs shape against the copy roofline, fraction of copy, speed-up
# vs the best peer) appear under *live*, and the recorded H200 measurements for the same selection
# under *recorded* (with a cliff map of the shape population where one is recorded).
#
# On a CPU, presets are cut to interpreter-sized shapes (the status line says so) and the live numbers
# only show that the pipeline works; the recorded panel is the one to read.

# %% [markdown]
# > **Live vs recorded.** *Live* numbers are measured in this session on this machine. Without a GPU,
# > normlab runs its Triton kernels in the interpreter on CPU tensors: the live cells then check
# > correctness and exercise the pipeline on tiny shapes, and their timings say **nothing** about GPU
# > bandwidth. *Recorded* numbers were measured on an NVIDIA H200 and ship in `normlab/data/`; every
# > caption says which kind it shows, with the card, date and commit.

# %%
import normlab  # first: picks GPU or the Triton interpreter before any kernel is defined
from normlab import bench, viz
from normlab.bench import devdata

recorded = bench.load_recorded(card="NVIDIA H200")  # the shipped H200 measurements

# %%
# NBVAL_CHECK_OUTPUT
print(viz.recorded_summary(recorded))

# %%
# NBVAL_CHECK_OUTPUT
from normlab.viz import widgets

print("ops:", ", ".join(op for op in bench.REGISTRY if op != "copy"))
print("shape presets:")
for name, shapes in widgets.PRESETS.items():
    print(f"  {name}: {len(shapes)} shapes")

# %%
explorer = widgets.explorer(recorded=recorded)
explorer

# %% [markdown]
# ## Cliff maps of the shape population
#
# The explorer's recorded panel adds a cliff map when the selection has a recorded shape
# population. Here are all four norm maps at once: normlab's default ÷ the fastest peer measured
# in the same run (torch, torch.compile, Liger-Kernel), each point one shape on log axes. Blue:
# normlab faster; red: slower; hover for the shape, both times and the peer.

# %%
population = viz.select(recorded, shape_set="population")
for op in ("rms_norm", "layer_norm"):
    for direction in ("fwd", "bwd"):
        viz.cliff_map(population, op=op, direction=direction, dtype="bf16", source="recorded").show()

# %% [markdown]
# The same pipeline without widgets, for scripts: choose records, then call the figure functions.

# %%
viz.gbps_vs_shape(viz.select(recorded, op="rms_norm", direction="bwd", shape_set=None), source="recorded")

# %% [markdown]
# [← 05-reverse-kl-fused-vs-split](05-reverse-kl-fused-vs-split.ipynb) · [all notebooks](../README.md#notebooks) · [07-options-and-the-fused-add →](07-options-and-the-fused-add.ipynb)
