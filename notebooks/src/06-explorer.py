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
# under *recorded*.
#
# On a CPU, presets are cut to interpreter-sized shapes (the status line says so) and the live numbers
# only show that the pipeline works; the recorded panel is the one to read.

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
# The same pipeline without widgets, for scripts: choose records, then call the figure functions.

# %%
viz.gbps_vs_shape(viz.select(recorded, op="rms_norm", direction="bwd"), source="recorded")

# %% [markdown]
# [← 05-reverse-kl-fused-vs-split](05-reverse-kl-fused-vs-split.ipynb) · [all notebooks](../README.md#notebooks)
