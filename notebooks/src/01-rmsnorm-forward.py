# 01-rmsnorm-forward: the source of notebooks/01-rmsnorm-forward.ipynb (percent format, as jupytext
# reads it; `python scripts/make_notebooks.py` writes the notebook, scripts/execute_notebooks.py
# fills its outputs).

# %% [markdown]
# # 01 · Fused RMSNorm forward
#
# RMSNorm normalizes each row by its root-mean-square and scales it by a learned vector $\gamma$:
#
# $$
# y_{ij} = \frac{x_{ij}}{\sqrt{\tfrac{1}{N}\sum_k x_{ik}^2 + \varepsilon}}\;\gamma_j .
# $$
#
# Arithmetically that is almost nothing. Written as separate PyTorch ops, each step reads its input
# from HBM and writes its output back: in fp32, `x.float()`, `pow`, `mean`, `* rstd`, `* w` and the
# cast back move about 38 bytes per element, against 4 bytes (read 2, write 2 in bf16) for a single
# **fused** kernel that keeps the row in registers. The Fused RMSNorm write-up measured exactly this story on a T4: eager
# near 62 GB/s, the fused kernel near 240 GB/s, level with `torch.compile`. Here is the same story on
# the H200.
#
# normlab's forward runs one program per row (`_norm_fwd_kernel`), accumulates in fp32 whatever the
# input dtype, and writes `rstd` for the backward. "Keeps the row in registers" is the obvious design,
# and up to 16384 columns it is what normlab did. It is not the fastest one. torch.compile's kernel
# for this op at 8192 columns (read from its generated code, profiled with Nsight Compute) reads the row
# **twice**: pass 1 loops over it in chunks of one 16-byte vector per thread and sums the squares,
# marking the loads *evict-last*; pass 2 re-reads the row, now from L2 (*evict-first*), and writes
# $y$. The extra pass costs no HBM traffic, and each thread holds 8 values instead of 32, so the
# kernel needs 32 registers instead of 54, and twice as many warps fit on each SM (93% achieved
# occupancy against 47%). More warps mean more loads in flight, which is what a memory-bound kernel
# needs. normlab's RMSNorm forward now does the same at 1024–16384 columns
# (`configs.NORM_FWD_RMS_LOOPED` keeps the chunk and warp count per width, with the measurements),
# except at 1024 columns up to 6144 rows, where two rows per program at 4 warps measured faster
# (`configs.NORM_FWD_BLOCK_ROW`).
# After the correctness check, a cell prints the launch config of a few widths. LayerNorm measured
# no faster looped and keeps the register-resident row, plus a persistent grid in the windows of
# `configs.NORM_FWD_BLOCK_ROW`. (The recorded `normlab[row]` series is `layout="row"`: for RMSNorm
# the same kernel as the default outside that 1024-column window, so there the two differ only by
# run-to-run noise.)
#
# One more thing the compiler gets from knowing the shape: torch.compile builds a kernel per shape,
# so where the chunks tile the row exactly its loads and stores carry no predicates, and its row
# offsets are 32-bit. normlab's kernel gets the same code from two compile-time flags
# (`triton.heuristics` on `_norm_fwd_kernel`: `EVEN_COLS` when `n_cols` is a multiple of the chunk,
# `INT64_ROWS` only when rows × row stride passes $2^{31}$). At the roofline that is worth 2%: on
# the H200, RMSNorm 32768×8192 took 250.4 µs against 254.4 with predicates and 64-bit offsets,
# torch.compile 249.6 in the same rounds (run `614e101+ab` in
# `benchmarks/data/dev/sweep_launch_configs_h200.json`). LayerNorm's 8192-wide register block gained
# most: 284.8 → 258.2 µs in the records (of `b9e2e8c` and `e0cba32`), 89% → 98% of copy. The last
# step takes the width itself as a compile-time constant (`n_cols: tl.constexpr`: one compiled
# kernel per width, static loop bounds), as torch.compile does: 251.6 → 250.2 µs at 32768×8192
# (torch.compile 250.0) and 9.7 → 9.0 µs at 1024×8192 in one run (`02c77ac+ab`,
# "fwd_static_cols").
#
# **A measurement lesson at 16384×1024.** There torch.compile's kernel holds one row per warp in
# registers, and its time has two modes: 17.4–18.1 µs or 18.8–19.5. So does Inductor's own kernel
# launched on normlab's buffers, a plain transcription of it, and normlab's kernel run as one
# 1024-wide row per warp, with the same code on the same buffers. Which mode you get depends on what
# ran just before. Timed right after another timing of the same shape, they are fast. Timed after
# fresh buffers, after 20 ms of matrix products, or after the GPU idled, they are slow. The SM clock
# read the same in both. normlab's looped row (2 warps) stays at 18.2–18.7 µs in every state, so it
# stays the default. After matrix products, the state a norm meets in a transformer layer, it is
# 2–7% ahead; against the one-warp kernels' fast mode it trails by up to 5% (runs `041c83b`,
# `25c84e8` and `fd6ed74` in `benchmarks/data/dev/sweep_launch_configs_h200.json`). A ratio from one
# run of a 20 µs kernel can be a ratio of two GPU states, not of two kernels.

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
# ## Correctness against the fp64 reference
#
# `ref.rms_norm` is the one reference every test, benchmark and notebook uses. Shapes are
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

# %%
# NBVAL_CHECK_OUTPUT
from normlab.norms import config as configs

for n in (512, 1000, 4096, 8192, 16384, 32768):
    cfg = configs.norm_fwd_config(n, is_rms=True)
    kind = "register-resident row" if cfg.block_size >= n else f"looped, {-(-n // cfg.block_size)} chunks per pass"
    print(f"N = {n:>5}: chunk {cfg.block_size:>5}, {cfg.num_warps:>2} warps, "
          f"{cfg.block_size // (32 * cfg.num_warps):>2} values per thread: {kind}")

# %% [markdown]
# ## Live measurement: eager ops vs `F.rms_norm` vs `torch.compile` vs fused
#
# `eager` is RMSNorm as separate fp32 PyTorch ops (the `eager_ops` column of the peer table). On a CPU
# `torch.compile` is skipped (the sweep says why), and the timings are interpreter timings.

# %%
SHAPES = [(64, 256), (37, 1000)] if normlab.INTERPRET else [(8192, 1024), (1024, 8192), (4096, 4096), (32768, 8192)]
live = bench.sweep("rms_norm", ["eager", "torch", "compile", "normlab"], SHAPES, ["bf16"], ["fwd"], device=device)
print(bench.format_table(live, live.skipped))

# %%
viz.gbps_vs_shape(live, source="live")

# %% [markdown]
# ## Recorded on the H200
#
# GB/s per shape against the copy roofline, the fraction of copy each implementation reaches, and
# normlab's speed-up over the fastest peer at each shape (device time; above 1× is faster).

# %%
fwd = viz.select(recorded, op="rms_norm", direction="fwd")
viz.gbps_vs_shape(fwd, source="recorded")

# %%
viz.roofline_bars(fwd, source="recorded")

# %%
viz.speedup_vs_best_peer(fwd, source="recorded")

# %%
viz.records_table(fwd, empty=viz.NO_RECORDED_DATA)

# %% [markdown]
# [← 00-setup-and-roofline](00-setup-and-roofline.ipynb) · [all notebooks](../README.md#notebooks) · [02-backward-dgamma-reduction →](02-backward-dgamma-reduction.ipynb)
