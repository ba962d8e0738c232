"""Generate normlab's notebooks from this source (then run scripts/execute_notebooks.py to fill
outputs)."""
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

OUT = Path(__file__).resolve().parents[1] / "notebooks"
NAV = ["00-setup-and-roofline", "01-rmsnorm-forward", "02-backward-dgamma-reduction",
       "03-bounded-partials-and-wide-rows", "04-narrow-rows-block-row",
       "05-reverse-kl-fused-vs-split", "06-explorer"]


def md(s):
    return new_markdown_cell(s.strip("\n"))


def code(s):
    return new_code_cell(s.strip("\n"))


def nav(i):
    prev = f"[← {NAV[i-1]}]({NAV[i-1]}.ipynb)" if i > 0 else ""
    nxt = f"[{NAV[i+1]} →]({NAV[i+1]}.ipynb)" if i + 1 < len(NAV) else ""
    return md(" · ".join(filter(None, [prev, "[all notebooks](../README.md#notebooks)", nxt])))


SETUP = code('''
import normlab  # first: picks GPU or the Triton interpreter before any kernel is defined
import torch
from normlab import bench, ref, viz

device = bench.device_info()  # card, versions, and the copy bandwidth measured right now
recorded = bench.load_recorded(card="NVIDIA H200")  # shipped measurements ([] if none yet)
print("\\n".join(device.lines()))
print(f"recorded H200 records in this package: {len(recorded)}")
''')

MODE_NOTE = md('''
> **Live vs recorded.** *Live* numbers are measured in this session on this machine. Without a GPU,
> normlab runs its Triton kernels in the interpreter on CPU tensors: the live cells then check
> correctness and exercise the pipeline on tiny shapes, and their timings say **nothing** about GPU
> bandwidth. *Recorded* numbers were measured on an NVIDIA H200 and ship in `normlab/data/`; every
> plot title says which kind it shows, with the card and date.
''')

nbs = {}

# ------------------------------------------------------------------------------------------------
nbs[0] = [
    md('''
# 00 · Setup and the roofline

What you will learn:
- which machine and mode normlab runs in, and how to read *live* vs *recorded* numbers;
- **effective bandwidth** and the **memory roofline** that every plot in this lab is drawn against;
- the **bytes models**: what each op must move, written down before anything is timed;
- **device time vs wall time**: why a kernel that takes 10 µs can cost 100 µs of your step.
'''),
    MODE_NOTE,
    SETUP,
    md(r'''
## Effective bandwidth and the roofline

The ops in this lab (RMSNorm, LayerNorm, the KL and cross-entropy losses) do a handful of
floating-point operations per element they load: an RMSNorm forward is a square, a sum, a
reciprocal square root and two multiplies for every 4 bytes (bf16 read + write). A GPU
sustains hundreds of FLOPs per byte of HBM traffic, so these ops are **memory-bound**:
their time is set by bytes, not arithmetic. The figure of merit is the effective bandwidth

$$
\text{GB/s} = \frac{\text{bytes the op must move}}{\text{device time}}
$$

and its ceiling (the *roofline*) is the best rate the card can move bytes at all. normlab measures that
ceiling rather than trusting the datasheet: a device-to-device `copy_` of a buffer far larger than
L2, counting bytes read + written. A kernel at 90% of copy is near the speed of light for its traffic.
'''),  # noqa: E501
    md('''
## The bytes models

`normlab.bench.traffic` writes down the bytes each (op, direction) must move. The **minimal** model
counts only the activations (so its GB/s never flatters a kernel); the **full** model adds weights,
row statistics and the fp32 partial buffers of a two-stage reduction.
'''),
    code('''
# NBVAL_CHECK_OUTPUT
M, N = 4096, 4096
print(f"bytes moved for M×N = {M}×{N}, bf16 (MiB)")
print(f"{'op':<20}{'direction':<10}{'minimal':>10}{'full':>10}")
for op, direction in [("rms_norm", "fwd"), ("rms_norm", "bwd"), ("layer_norm", "fwd"),
                      ("layer_norm", "bwd"), ("reverse_kl", "fwd+bwd"), ("cross_entropy", "fwd+bwd")]:
    lo = bench.bytes_moved(op, direction, M, N, "bf16")
    hi = bench.bytes_moved(op, direction, M, N, "bf16", model="full", n_partials=264)
    print(f"{op:<20}{direction:<10}{lo / 2**20:>10.2f}{hi / 2**20:>10.2f}")
'''),  # noqa: E501
    md('''
## Measured copy bandwidth vs the datasheet

The copy measured above is this machine's roofline. On a CPU it is the host's memcpy rate and has
nothing to do with a GPU; the recorded H200 run stores its own copy measurement next to every record.
'''),  # noqa: E501
    code('''
print(f"live   ({device.card}, {device.mode} mode): measured copy {device.copy.gbps:,.0f} GB/s; "
      f"datasheet {device.datasheet_gbps or 'n/a (not a known GPU)'}")
copy_rec = viz.select(recorded, op="rms_norm")
if copy_rec:
    r = copy_rec[0]
    print(f"recorded ({r['card']}, {r['date'][:10]}): measured copy {r['roofline_gbps']:,.0f} GB/s; "
          f"datasheet {r['datasheet_gbps']:,.0f} GB/s ({100 * r['roofline_gbps'] / r['datasheet_gbps']:.0f}%)")
else:
    print("recorded: " + viz.NO_RECORDED_DATA)
'''),  # noqa: E501
    md('''
## Device time vs wall time

`bench.sweep` reports two times per call. **Device time** is the sum of the call's GPU kernel
durations from the profiler, with L2 flushed before each call (the training view: inputs come from
HBM). **Wall time** is measured around the call from the CPU and includes Python and launch overhead.
At small shapes the gap is large: the kernels finish long before the CPU is done launching them.
Under the interpreter both are the same CPU time.
'''),  # noqa: E501
    code('''
SHAPES = [(64, 256), (37, 1000)] if normlab.INTERPRET else [(1024, 1024), (8192, 1024), (4096, 4096), (32768, 8192)]
live = bench.sweep("rms_norm", ["normlab", "torch"], SHAPES, ["bf16"], ["fwd"], device=device)
print(bench.format_table(live, live.skipped))
'''),  # noqa: E501
    code('''
viz.records_table(live, ["impl", "M", "N", "device_us", "wall_us", "gbps", "frac_roofline"])
'''),
    code('''
viz.gbps_vs_shape(live, source="live")
'''),
    md('''
### Recorded on the H200

The same plot from the shipped H200 run: the dashed line is the measured copy bandwidth, the dotted
line the datasheet peak. Hover a point for device µs, wall µs and the percentage of copy.
'''),
    code('''
viz.gbps_vs_shape(viz.select(recorded, op="rms_norm", direction="fwd"), source="recorded")
'''),
    code('''
viz.roofline_bars(viz.select(recorded, op="rms_norm", direction="fwd"), source="recorded")
'''),
    nav(0),
]

# ------------------------------------------------------------------------------------------------
nbs[1] = [
    md(r'''
# 01 · Fused RMSNorm forward

RMSNorm normalizes each row by its root-mean-square and scales it by a learned vector $\gamma$:

$$
y_{ij} = \frac{x_{ij}}{\sqrt{\tfrac{1}{N}\sum_k x_{ik}^2 + \varepsilon}}\;\gamma_j .
$$

Arithmetically that is almost nothing. Written as separate PyTorch ops, each step reads its input
from HBM and writes its output back: in fp32, `x.float()`, `pow`, `mean`, `* rstd`, `* w` and the
cast back move about 38 bytes per element, against 4 bytes (read 2, write 2 in bf16) for a single
**fused** kernel that keeps the row in registers. Seed 002 measured exactly this story on a T4: eager
near 62 GB/s, the fused kernel near 240 GB/s, level with `torch.compile`. Here is the same story on
the H200.

normlab's forward runs one program per row (`_norm_fwd_kernel`), accumulates in fp32 whatever the
input dtype, and writes `rstd` for the backward. "Keeps the row in registers" is the obvious design,
and up to 16384 columns it is what normlab did. It is not the fastest one. torch.compile's kernel
for this op at 8192 columns (read from its generated code, profiled with Nsight Compute) reads the row
**twice**: pass 1 loops over it in chunks of one 16-byte vector per thread and sums the squares,
marking the loads *evict-last*; pass 2 re-reads the row, now from L2 (*evict-first*), and writes
$y$. The extra pass costs no HBM traffic, and each thread holds 8 values instead of 32, so the
kernel needs 32 registers instead of 54, and twice as many warps fit on each SM (93% achieved
occupancy against 47%). More warps mean more loads in flight, which is what a memory-bound kernel
needs. normlab's RMSNorm forward now does the same at 1024–16384 columns
(`configs.NORM_FWD_RMS_LOOPED` keeps the chunk and warp count per width, with the measurements),
except at 1024 columns up to 6144 rows, where two rows per program at 4 warps measured faster
(`configs.NORM_FWD_BLOCK_ROW`).
After the correctness check, a cell prints the launch config of a few widths. LayerNorm measured
no faster looped and keeps the register-resident row, plus a persistent grid in the windows of
`configs.NORM_FWD_BLOCK_ROW`. (The recorded `normlab[row]` series is `layout="row"`: for RMSNorm
the same kernel as the default outside that 1024-column window, so there the two differ only by
run-to-run noise.)

One more thing the compiler gets from knowing the shape: torch.compile builds a kernel per shape,
so where the chunks tile the row exactly its loads and stores carry no predicates, and its row
offsets are 32-bit. normlab's kernel gets the same code from two compile-time flags
(`triton.heuristics` on `_norm_fwd_kernel`: `EVEN_COLS` when `n_cols` is a multiple of the chunk,
`INT64_ROWS` only when rows × row stride passes $2^{31}$). At the roofline that is worth 2%: on
the H200, RMSNorm 32768×8192 took 250.4 µs against 254.4 with predicates and 64-bit offsets,
torch.compile 249.6 in the same rounds (run `614e101+ab` in
`benchmarks/data/dev/sweep_launch_configs_h200.json`). LayerNorm's 8192-wide register block gained
most: 284.8 → 258.2 µs in the records (of `b9e2e8c` and `e0cba32`), 89% → 98% of copy. The last
step takes the width itself as a compile-time constant (`n_cols: tl.constexpr`: one compiled
kernel per width, static loop bounds), as torch.compile does: 251.6 → 250.2 µs at 32768×8192
(torch.compile 250.0) and 9.7 → 9.0 µs at 1024×8192 in one run (`02c77ac+ab`,
"fwd_static_cols").

**A measurement lesson at 16384×1024.** There torch.compile's kernel holds one row per warp in
registers, and its time has two modes: 17.4–18.1 µs or 18.8–19.5. So does Inductor's own kernel
launched on normlab's buffers, a plain transcription of it, and normlab's kernel run as one
1024-wide row per warp, with the same code on the same buffers. Which mode you get depends on what
ran just before. Timed right after another timing of the same shape, they are fast. Timed after
fresh buffers, after 20 ms of matrix products, or after the GPU idled, they are slow. The SM clock
read the same in both. normlab's looped row (2 warps) stays at 18.2–18.7 µs in every state, so it
stays the default. After matrix products, the state a norm meets in a transformer layer, it is
2–7% ahead; against the one-warp kernels' fast mode it trails by up to 5% (runs `041c83b`,
`25c84e8` and `fd6ed74` in `benchmarks/data/dev/sweep_launch_configs_h200.json`). A ratio from one
run of a 20 µs kernel can be a ratio of two GPU states, not of two kernels.
'''),  # noqa: E501
    MODE_NOTE,
    SETUP,
    md('''
## Correctness against the fp64 reference

`ref.rms_norm` is the one reference every test, benchmark and notebook uses. Shapes are
awkward on purpose: a ragged width (1000), a single row, and a NaN that must stay in its row.
'''),
    code('''
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
'''),  # noqa: E501
    code('''
# NBVAL_CHECK_OUTPUT
from normlab.norms import config as configs

for n in (512, 1000, 4096, 8192, 16384, 32768):
    cfg = configs.norm_fwd_config(n, is_rms=True)
    kind = "register-resident row" if cfg.block_size >= n else f"looped, {-(-n // cfg.block_size)} chunks per pass"
    print(f"N = {n:>5}: chunk {cfg.block_size:>5}, {cfg.num_warps:>2} warps, "
          f"{cfg.block_size // (32 * cfg.num_warps):>2} values per thread: {kind}")
'''),  # noqa: E501
    md('''
## Live measurement: eager ops vs `F.rms_norm` vs `torch.compile` vs fused

`eager` is RMSNorm as separate fp32 PyTorch ops (the `eager_ops` column of the peer table). On a CPU
`torch.compile` is skipped (the sweep says why), and the timings are interpreter timings.
'''),
    code('''
SHAPES = [(64, 256), (37, 1000)] if normlab.INTERPRET else [(8192, 1024), (1024, 8192), (4096, 4096), (32768, 8192)]
live = bench.sweep("rms_norm", ["eager", "torch", "compile", "normlab"], SHAPES, ["bf16"], ["fwd"], device=device)
print(bench.format_table(live, live.skipped))
'''),  # noqa: E501
    code('''
viz.gbps_vs_shape(live, source="live")
'''),
    md('''
## Recorded on the H200

GB/s per shape against the copy roofline, the fraction of copy each implementation reaches, and
normlab's speed-up over the fastest peer at each shape (device time; above 1× is faster).
'''),
    code('''
fwd = viz.select(recorded, op="rms_norm", direction="fwd")
viz.gbps_vs_shape(fwd, source="recorded")
'''),
    code('''
viz.roofline_bars(fwd, source="recorded")
'''),
    code('''
viz.speedup_vs_best_peer(fwd, source="recorded")
'''),
    code('''
viz.records_table(fwd, empty=viz.NO_RECORDED_DATA)
'''),
    nav(1),
]

# ------------------------------------------------------------------------------------------------
nbs[2] = [
    md(r'''
# 02 · The backward pass and the dγ reduction

With $\hat x = x \cdot \mathrm{rstd}$ and $g = \gamma \odot dy$, the RMSNorm backward is

$$
dx = \mathrm{rstd}\,\Big(g - \hat x\,\tfrac{1}{N}\textstyle\sum_k \hat x_k g_k\Big),
\qquad
d\gamma_j = \sum_{i=1}^{M} dy_{ij}\,\hat x_{ij}.
$$

$dx$ is per row, like the forward. $d\gamma$ is a **column sum over all M rows**: every program
holds a piece of it, and the pieces must meet somewhere. Seed 002's fused backward added them with
`tl.atomic_add` straight into the one $N$-vector; under many programs the atomics contend on the same
addresses and serialize: *a queue of carts at a single loading dock*. normlab keeps that design and
two better ones side by side (`strategy=`):

| strategy | where partials go | second kernel | workspace |
|---|---|---|---|
| `atomic` | `tl.atomic_add` into one fp32 vector | none | $N$ fp32 |
| `two_stage` | one fp32 partial row per block of rows (TorchInductor's way) | reduce | grows with $M$ |
| `persistent` | $\approx$ programs/SM × SMs programs grid-stride the rows, fold them in registers | reduce | bounded, independent of $M$ |
'''),  # noqa: E501
    MODE_NOTE,
    SETUP,
    md('''
## Correctness: every strategy against the fp64 reference

The parameter gradient sums M terms, so its tolerance grows like $\\sqrt{M}$ (`reduce_len=M`).
M = 300 is ragged and larger than the interpreter's persistent grid, so programs really grid-stride.
'''),
    code('''
# NBVAL_CHECK_OUTPUT
torch.manual_seed(0)
M, N = 300, 200
for op in ("rms_norm", "layer_norm"):
    x = torch.randn(M, N, device=normlab.DEVICE, requires_grad=True)
    w = (1 + 0.1 * torch.randn(N, device=normlab.DEVICE)).requires_grad_()
    b = (0.1 * torch.randn(N, device=normlab.DEVICE)).requires_grad_() if op == "layer_norm" else None
    dy = torch.randn(M, N, device=normlab.DEVICE)
    expected = ref.norm_backward(dy.double(), x.double(), w.double(), None if b is None else b.double(),
                                 eps=1e-6 if op == "rms_norm" else 1e-5, is_rms=op == "rms_norm")
    for strategy in ("atomic", "two_stage", "persistent"):
        if op == "rms_norm":
            y = normlab.rms_norm(x, w, strategy=strategy)
        else:
            y = normlab.layer_norm(x, w, b, strategy=strategy)
        grads = torch.autograd.grad(y, [t for t in (x, w, b) if t is not None], dy)
        for name, got, want, red in zip(("dx", "dγ", "dβ"), grads, expected, (None, M, M)):
            print(viz.verdict(f"{op:<10} {strategy:<10} {name} {M}×{N}", got, want, reduce_len=red))
'''),  # noqa: E501
    md('''
## The contention picture

Each square is a program carrying its partial $d\\gamma$ (a cart); grey squares are where partials are
delivered (docks). `atomic` queues every program at the one dγ vector; `two_stage` gives each block
of rows its own workspace row and pays a reduce kernel that reads them all; `persistent` bounds the
number of partial rows to programs/SM × SMs, whatever M. The numbers (programs, queue depth, partial
rows) come from `viz.contention_model`, with the kernels' own configuration. Drawn for the H200's 132 SMs.
'''),  # noqa: E501
    code('''
from normlab.norms import config as configs

N_SM = 132 if normlab.INTERPRET else normlab._runtime.sm_count()
viz.contention_figure(32768, 1024, n_sm=N_SM,
                      programs_per_sm=configs.norm_bwd_config("persistent", 32768, 1024).programs_per_sm,
                      two_stage_rows=configs.norm_bwd_config("two_stage", 32768, 1024).rows_per_program)
'''),  # noqa: E501
    code('''
# NBVAL_CHECK_OUTPUT
for M in (4096, 32768, 262144):
    m = viz.contention_model(M, 1024, n_sm=132, programs_per_sm=2,
                             two_stage_rows=configs.NORM_BWD_TWO_STAGE_ROWS_PER_PROGRAM)
    print(f"M={M:>6}: atomic queue depth {m['atomic']['queue_depth']:>6}; "
          f"two_stage partial rows {m['two_stage']['partial_rows']:>5}; "
          f"persistent partial rows {m['persistent']['partial_rows']}")
'''),
    md('''
Move the sliders to see the queue grow with M for `atomic` and the workspace grow for `two_stage`,
while `persistent` stays bounded (the widget needs a live kernel in JupyterLab):
'''),
    code('''
viz.widgets.contention_explorer(n_sm=N_SM)
'''),
    md('''
## Live measurement: the three strategies against `F.rms_norm`
'''),
    code('''
SHAPES = [(64, 256), (37, 1000)] if normlab.INTERPRET else [(8192, 1024), (1024, 8192), (4096, 4096), (32768, 8192)]
live = bench.sweep("rms_norm", ["torch", "normlab"], SHAPES, ["bf16"], ["bwd"], device=device,
                   options={"strategy": ["atomic", "two_stage", "persistent"]})
print(bench.format_table(live, live.skipped))
'''),  # noqa: E501
    code('''
viz.gbps_vs_shape(live, source="live")
'''),
    code('''
viz.kernel_breakdown(viz.select(live, impl="normlab"), source="live")
'''),
    md('''
## Recorded on the H200

The per-kernel breakdown separates the main kernel (dx and the partials) from the reduce kernel;
for `atomic` there is no reduce kernel, the waiting happens inside the main one.

Device time counts every kernel the call launches, including ones nobody wrote on purpose. Until
commit `5cfd85b`, autograd zero-filled a gradient for each statistic the forward op returns (mean,
rstd) before every backward: 0.7–1.8 µs per call on these shapes, 7–15 µs at 7.9 million rows.
`ctx.set_materialize_grads(False)` removed them. The fill kernels still in the breakdown at
N ≤ 2048 zero the workspace rows that programs share in pairs.
'''),
    code('''
bwd = viz.select(recorded, op="rms_norm", direction="bwd")
viz.gbps_vs_shape(bwd, source="recorded")
'''),
    code('''
viz.kernel_breakdown(viz.select(bwd, impl="normlab"), source="recorded")
'''),
    code('''
viz.speedup_vs_best_peer(bwd, source="recorded")
'''),
    nav(2),
]

# ------------------------------------------------------------------------------------------------
nbs[3] = [
    md(r'''
# 03 · Bounded partials and wide rows

Seed 000 (Fast-LLM's normalization backward rewrite) makes two changes to the backward:

1. **Bound the partial-reduction work.** One partial row per block of rows makes the second kernel's
   input grow with M (at 32768×1024 it ran at ~10% of bandwidth). A persistent grid of
   `programs_per_sm × SMs` programs folds many row tiles into one fp32 partial each, so the buffer is
   independent of M. Fast-LLM's rewrite (ServiceNow/Fast-LLM#546) found **two programs per SM** to be the knee: one starves latency
   hiding, more re-inflate the reduce kernel.
2. **Decouple the tile from the row width.** Rows wider than one register tile take a **two-pass**
   scheme: pass 1 reduces the per-row corrections over column chunks, pass 2 re-reads $x$, $dy$ to write
   $dx$ and the partials. Narrow rows stay single-pass with no re-read.

It also warns about a **measurement confound**: timing the backward as `fwd_bwd − fwd` leaves the
forward's output warm in L2 and flatters the backward. normlab's bench flushes L2 before every call.

From 1024 to 8192 columns the single-pass kernel has a twin that takes the row width as a
compile-time constant and sums LayerNorm's two row sums in one reduction (one cross-warp exchange
per row tile instead of two): at 32768×8192, RMSNorm 420.3 → 405.2 µs and LayerNorm 514.6 →
501.7 in the records. At 16384 columns the same change cost up to 165%. The one-row tile there
already spills registers (60 per thread for LayerNorm), and the change made it spill 152.
Registers decide a change's sign, so `configs.NORM_BWD_STATIC_COLS` keeps it where it was measured
faster.
'''),  # noqa: E501
    MODE_NOTE,
    SETUP,
    md('''
## Correctness: program counts and single vs two-pass

The launcher `normlab.norms.row.norm_backward` takes `programs_per_sm` and `two_pass` directly;
a small `block_cols` forces the two-pass path on a small row.
'''),
    code('''
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
'''),  # noqa: E501
    md('''
## How the buffer scales: programs per SM and M

Partial rows the reduce kernel must read (fp32, N = 1024, 132 SMs), from `viz.contention_model`.
Two-stage grows with M; persistent is fixed by the program count.
'''),
    code('''
# NBVAL_CHECK_OUTPUT
print(f"{'M':>7} {'two_stage rows':>15} " + " ".join(f"{f'persist ×{p}':>11}" for p in (1, 2, 4, 8)))
for M in (2048, 8192, 32768, 131072):
    two = viz.contention_model(M, 1024, n_sm=132, two_stage_rows=32)["two_stage"]["partial_rows"]
    per = [viz.contention_model(M, 1024, n_sm=132, programs_per_sm=p)["persistent"]["partial_rows"] for p in (1, 2, 4, 8)]
    print(f"{M:>7} {two:>15} " + " ".join(f"{r:>11}" for r in per))
'''),  # noqa: E501
    md('''
## Live: sweep the program count and find the knee

On the H200 the knee sits at **four** programs per SM for rows up to 2048 columns, not two; but
four partial rows per SM would double the buffer. normlab keeps the buffer at 2 × SMs rows by
letting programs 2k and 2k + 1 `atomic_add` into one zeroed partial row ("paired rows"). That is
still bitwise deterministic: with exactly two addends into 0, $(0 + a) + b = (0 + b) + a$ in
floating point, whichever program comes first. The price is a memset of the buffer and the atomics
(`docs/notes/2026-11-29-norm-backward-persistent.md` has the measured cost).

Each call is measured by `bench.measure` (device time with a cold L2 on a GPU, CPU time under the
interpreter, divided into the bytes model) into a record the plots can draw. On the GPU the shape
is Fast-LLM's 32768×1024 (ServiceNow/Fast-LLM#546); on a CPU a tiny one, where the timings only show the pipeline works.
'''),  # noqa: E501
    code('''
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
'''),
    code('''
viz.roofline_bars(knee, source="live", title="Programs per SM: fraction of copy")
'''),
    code('''
viz.kernel_breakdown(knee, source="live", title="Programs per SM: main vs reduce kernel")
'''),
    md('''
## Cold vs warm L2

The confound in numbers: the same backward timed right after its forward (inputs still in L2) vs
after the bench's L2 flush. On the H200 (60 MB L2) a 4096×4096 bf16 tensor is 32 MiB, so a warm
backward reads part of its inputs from cache and looks faster than training will ever see it.
'''),
    code('''
M, N = (64, 256) if normlab.INTERPRET else (4096, 4096)
x = torch.randn(M, N, dtype=torch.bfloat16, device=normlab.DEVICE, requires_grad=True)
w = torch.ones(N, dtype=torch.bfloat16, device=normlab.DEVICE, requires_grad=True)
dy = torch.randn(M, N, dtype=torch.bfloat16, device=normlab.DEVICE)
cold = bench.time_call(lambda: torch.autograd.grad(normlab.rms_norm(x, w), (x, w), dy), reps=5)
fwd = bench.time_call(lambda: normlab.rms_norm(x, w), reps=5)
print(f"fwd+bwd with a cold L2: {cold.device_us:.1f} µs; fwd alone: {fwd.device_us:.1f} µs; "
      f"'bwd = fwd_bwd - fwd': {cold.device_us - fwd.device_us:.1f} µs")
print("compare with the isolated cold-L2 backward of the sweep below (bench flushes before each call)")
'''),  # noqa: E501
    code('''
live = bench.sweep("rms_norm", ["normlab"], [(M, N)], ["bf16"], ["bwd"], device=device)
print(bench.format_table(live, live.skipped))
'''),
    md('''
## Recorded on the H200: reduce-kernel cost vs M
'''),
    code('''
bwd = viz.select(recorded, op="rms_norm", direction="bwd", impl="normlab")
viz.kernel_breakdown(bwd, source="recorded")
'''),
    code('''
viz.gbps_vs_shape(viz.select(recorded, op="rms_norm", direction="bwd"), source="recorded")
'''),
    nav(3),
]

# ------------------------------------------------------------------------------------------------
nbs[4] = [
    md(r'''
# 04 · Narrow rows: block-row vs one row per program

Seed 003 (a Liger-Kernel PR) trains tiny networks with 16–256 features and ~7.9 million rows. One
program per row then moves 16 × 2 bytes per program: far less than a warp can load in one
instruction, so most lanes idle and the launch grid (7.9 M programs) is mostly scheduling overhead.
**Block-row** kernels pack many rows into one 2-D tile (`BLOCK_ROWS × next_pow2(N)`, 1024–8192
elements, measured per norm and width) so every program does a full tile of work, and the backward
runs a persistent grid.

normlab picks the layout with `layout="auto"` (`configs.use_block_row`: N ≤ 256 and M ≥ 16384) or
you force it with `layout="row"` / `layout="block_row"`.
'''),
    MODE_NOTE,
    SETUP,
    md('''
## The occupancy intuition, in numbers

Elements per program and programs launched for the 7,864,320 rows of Liger-Kernel's block-row pull request (#1620), from the kernels' own
launch configuration (`configs.block_row_fwd_config`, LayerNorm's forward tiles; RMSNorm's differ
at 16, 128 and 256 columns, `configs.BLOCK_ROW_FWD_TILES`):
'''),  # noqa: E501
    code('''
# NBVAL_CHECK_OUTPUT
from normlab.norms import config as configs

ROWS = 7_864_320
print(f"{'N':>5} {'row: elems/program':>19} {'row: programs':>14} {'block-row: rows/tile':>21} "
      f"{'elems/program':>14} {'programs':>10}")
for N in (16, 32, 64, 128, 256, 512):
    cfg = configs.block_row_fwd_config(N, is_rms=False)
    print(f"{N:>5} {N:>19} {ROWS:>14,} {cfg.block_rows:>21} {cfg.block_rows * N:>14} "
          f"{-(-ROWS // cfg.block_rows):>10,}")
'''),
    md('''
## Save or recompute the row statistics

The backward needs each row's mean and rstd. Stored by the forward, they cost 4 (RMSNorm) or 8
(LayerNorm) bytes a row, against 64 bytes of x and y at 16 bf16 columns: a tenth of the forward's
traffic. The block-row backward reads the row's x anyway, so it can recompute them in registers
with the forward's fp32 arithmetic instead. On the H200 that took LayerNorm's forward at 16 columns
from 136.6 to 119.7 µs. The price is two more row reductions in the backward (the mean, then the
variance). For RMSNorm they cost nothing measurable. For LayerNorm up to 64 columns they cost
less than the stores save (at 16 and 32 columns, with tiles of their own, the backward even got
faster); at 128 and 256 columns they cost more, so the stores stay there
(`configs.block_row_recompute_stats`; the measurements are in `docs/notes/2026-11-30-narrow-rows-block-row.md`):
'''),  # noqa: E501
    code('''
# NBVAL_CHECK_OUTPUT
print(f"{'N':>5} {'RMSNorm':>11} {'LayerNorm':>11}   stores' share of a storing forward's bytes (RMS / LN)")
for N in (16, 32, 64, 128, 256):
    kind = ["recomputed" if configs.block_row_recompute_stats(N, is_rms) else "stored" for is_rms in (True, False)]
    share = [stat / (2 * N * 2 + stat) for stat in (4, 8)]
    print(f"{N:>5} {kind[0]:>11} {kind[1]:>11}   {share[0]:.1%} / {share[1]:.1%}")
'''),  # noqa: E501
    md('''
## Correctness: both layouts, both norms, forward and backward

M = 333 is not a multiple of any tile height, so the last tile is ragged. At N = 16 and 48 the
block-row backward recomputes the statistics; at N = 256 LayerNorm's reads them.
'''),
    code('''
# NBVAL_CHECK_OUTPUT
torch.manual_seed(0)
M = 333
for N in (16, 48, 256):
    for layout in ("row", "block_row"):
        x = torch.randn(M, N, device=normlab.DEVICE, requires_grad=True)
        w = (1 + 0.1 * torch.randn(N, device=normlab.DEVICE)).requires_grad_()
        b = (0.1 * torch.randn(N, device=normlab.DEVICE)).requires_grad_()
        dy = torch.randn(M, N, device=normlab.DEVICE)
        y = normlab.layer_norm(x, w, b, layout=layout)
        dx, dw, db = torch.autograd.grad(y, (x, w, b), dy)
        ref_y = ref.layer_norm(x.double(), w.double(), b.double())
        want = ref.norm_backward(dy.double(), x.double(), w.double(), b.double(), eps=1e-5, is_rms=False)
        print(f"layer_norm {layout:<9} N={N:<3}", viz.verdict("y", y, ref_y), "|", viz.verdict("dx", dx, want[0]),
              "|", viz.verdict("dγ", dw, want[1], reduce_len=M), "|", viz.verdict("dβ", db, want[2], reduce_len=M))
        y = normlab.rms_norm(x, w, layout=layout)
        dx, dw = torch.autograd.grad(y, (x, w), dy)
        want = ref.norm_backward(dy.double(), x.double(), w.double(), eps=1e-6)
        print(f"rms_norm   {layout:<9} N={N:<3}", viz.verdict("y", y, ref.rms_norm(x.double(), w.double())),
              "|", viz.verdict("dx", dx, want[0]), "|", viz.verdict("dγ", dw, want[1], reduce_len=M))
'''),  # noqa: E501
    md('''
## Live measurement
'''),
    code('''
SHAPES = [(256, 16), (256, 64)] if normlab.INTERPRET else [(1_048_576, n) for n in (16, 64, 256, 512)]
live = bench.sweep("layer_norm", ["torch", "normlab"], SHAPES, ["bf16"], ["fwd", "bwd"], device=device,
                   options={"layout": ["row", "block_row"]})
print(bench.format_table(live, live.skipped))
'''),  # noqa: E501
    code('''
viz.gbps_vs_shape(viz.select(live, direction="fwd"), source="live")
'''),
    md('''
## Recorded on the H200: the block-row pull request's shapes

`normlab` is the default (`layout="auto"`). At 512 columns, above the block-row layout's limit, its
forward still packs rows: short tiles of 4 (RMSNorm) or 8 (LayerNorm) rows, one program each
(`configs.NORM_FWD_BLOCK_ROW`), 1.2× faster than one row per program there; its backward stays on
the row path.
'''),
    code('''
narrow = [r for r in recorded if r.M == 7_864_320]
viz.gbps_vs_shape(viz.select(narrow, op="layer_norm", direction="fwd"), source="recorded")
'''),
    code('''
viz.gbps_vs_shape(viz.select(narrow, op="layer_norm", direction="bwd"), source="recorded")
'''),
    md('''
Seed 003's "total": the forward and its backward in one call, as a training step runs them
(`direction="fwd+bwd"`, bytes 5·M·N·e).
'''),
    code('''
viz.gbps_vs_shape(viz.select(narrow, op="layer_norm", direction="fwd+bwd"), source="recorded")
'''),
    code('''
viz.speedup_vs_best_peer(viz.select(narrow, op="rms_norm"), source="recorded")
'''),
    nav(4),
]

# ------------------------------------------------------------------------------------------------
nbs[5] = [
    md(r'''
# 05 · Reverse KL: fused vs split

Distillation losses compare two distributions over a vocabulary of $V$ entries per token. With
$p = \mathrm{softmax}(x)$ (the student's logits) and $q = \mathrm{softmax}(t)$ (the teacher's),

$$
\mathrm{KL}(p \,\|\, q) = \sum_j p_j(\log p_j - \log q_j),\qquad
\frac{\partial\,\mathrm{KL}}{\partial x_j} = p_j\big((\log p_j - \log q_j) - \mathrm{KL}\big).
$$

Both softmaxes need a row max and a row sum before anything else, so a row is read at least twice.
Seed 004 found Fast-LLM's Triton kernel ~2.9× *slower* than `torch.compile` at V = 32K: it held the
whole row (up to 32768 values) in registers for **both** distributions, which left ~2 blocks per SM and
no latency hiding. Its two fixes are both here:

- **block cap** (`block_cap=4096 … 32768`): stream the row in tiles with an online softmax, so
  occupancy no longer collapses as V grows.
- **form** `"fused"` (one kernel writes loss *and* gradient; the backward only rescales) vs `"split"`
  (a statistics kernel stores per-row max and sum, a backward kernel reloads them): the split form is
  exactly the **tensor-parallel** path, where each rank holds `V / tp` columns and only the row
  statistics are all-reduced (`group=`).

The fused kernel reads a row twice, and the second read is only cheap if the row is still in L2.
At V = 131072 a row of logits and target is 512 KiB, and the rows in flight together overflow the
H200's 60 MB L2: the gradient pass goes back to DRAM (five passes of traffic for a three-pass bytes
model). normlab's third form, `"chunked"`, cuts each row into chunks of a few tiles with one
program per chunk. Each program folds its chunk into raw statistics, the programs of a row meet at a
per-row counter, merge the statistics and write their chunk's gradient; the re-read is then a short
L2 round trip. Meeting costs a chain of round trips per program (ticket, loads, publish, wait,
merge), so the chunked form is latency-bound and wins only with enough programs resident per SM:
capped at 64 registers per thread (8 programs of 4 warps per SM instead of 7) it became the default
from V = 65536 up (the recorded table below shows where).

Ragged vocabularies teach one more thing. At V = 50257 a bf16 row is 100514 bytes, so most rows do
not start on a 16-byte boundary; Triton cannot prove the alignment of `row * stride` and compiles
every access to 2 bytes. The loss kernels therefore index each row from the 128-byte boundary before
it: whole tiles become vector loads and stores on whole 32-byte sectors, and the lanes that belong
to the neighbouring rows are dropped in registers (`row_frames` in `normlab/losses/online.py`;
the README gives the before and after).
'''),  # noqa: E501
    MODE_NOTE,
    SETUP,
    md('''
## Correctness: every form, several tile caps, loss and gradient

V = 1000 with caps down to 256 forces several tiles per row (caps below 4096 are for experiments).
'''),
    code('''
# NBVAL_CHECK_OUTPUT
torch.manual_seed(0)
M, V = 37, 1000
logits = torch.randn(M, V, device=normlab.DEVICE, requires_grad=True)
target = torch.randn(M, V, device=normlab.DEVICE)
ref_loss = ref.reverse_kl_ref(logits.double(), target.double())
ref_grad, = torch.autograd.grad(ref.reverse_kl_ref(logits.double(), target.double()), logits)
for form in ("fused", "chunked", "split"):
    for cap in (256, 1024, 4096):
        loss = normlab.reverse_kl(logits, target, form=form, block_cap=cap)
        grad, = torch.autograd.grad(loss, logits)
        print(f"reverse_kl {form:<7} cap={cap:<5}", viz.verdict("loss", loss, ref_loss, reduce_len=M),
              "|", viz.verdict("dlogits", grad, ref_grad))
'''),  # noqa: E501
    md('''
## Live measurement: forms and caps against the fp32 PyTorch loss

On a GPU the caps run from 1024 to 32768: up to 2048 the kernels keep lane statistics (below),
from 4096 one lane per tile, and 32768 is the occupancy cliff of Fast-LLM's reverse-KL issue (ServiceNow/Fast-LLM#497).
'''),  # noqa: E501
    code('''
SHAPES = [(16, 1000), (8, 4096)] if normlab.INTERPRET else bench.SHAPES["losses"][:3]
CAPS = [1024] if normlab.INTERPRET else [1024, 2048, 4096, 16384, 32768]
live = bench.sweep("reverse_kl", ["eager", "compile", "normlab"], SHAPES, ["bf16"], ["fwd+bwd"], device=device,
                   options={"form": ["fused", "chunked", "split"], "block_cap": CAPS})
print(bench.format_table(live, live.skipped))
'''),  # noqa: E501
    code('''
viz.gbps_vs_shape(live, source="live")
'''),
    md('''
## Recorded on the H200: speed and memory

`Δpeak` is the extra memory one call allocates (the fused form writes no intermediate softmax).
'''),
    code('''
kl = viz.select(recorded, op="reverse_kl")
viz.gbps_vs_shape(kl, source="recorded")
'''),
    code('''
viz.speedup_vs_best_peer(kl, source="recorded")
'''),
    code('''
viz.records_table(kl, ["impl", "strategy", "block_cap", "M", "N", "device_us", "gbps", "frac_roofline",
                       "peak_extra_bytes"], empty=viz.NO_RECORDED_DATA)
'''),  # noqa: E501
    md('''
## Ragged vocabularies: where each row starts

A row of V bf16 logits is 2·V bytes, so row r starts 2·V·r bytes into the tensor. A 16-byte vector
load (8 bf16 values per instruction) needs that address to be a multiple of 16. At V = 50256 it
always is; at V = 50257 it almost never is, and Triton, which cannot prove it for any row, falls
back to 2-byte loads and stores everywhere. The loss kernels therefore index each row from the
128-byte boundary before it (a cache line, so whole tiles also fall on whole 32-byte sectors), drop
the previous and next rows' lanes in registers, and store the partial vectors at a row's two ends
lane by lane. `normlab.losses.config.entropy_vocab_class` is what
`form="auto"` uses to tell the two cases apart.
'''),
    code('''
# NBVAL_CHECK_OUTPUT
from normlab.losses import config

for V in (50256, 50257):
    starts = [2 * V * r % 16 for r in range(8)]
    print(f"V = {V}: rows 0-7 start {starts} bytes past a 16-byte boundary -> {config.entropy_vocab_class(V)}")
'''),  # noqa: E501
    md('''
The frames must not change a single value: the same check as above on rows that start off the
boundary (fp32, V = 1003: row r starts 4012·r bytes in, so 12·r mod 16 bytes past a boundary), every
form, and a 256-wide tile so that each row has a first, middle and last tile. (fp32 keeps the
tolerance tight; bf16 rows go through the same frames with 8 columns per vector instead of 4.)
'''),
    code('''
# NBVAL_CHECK_OUTPUT
torch.manual_seed(0)
M, V = 9, 1003
logits = torch.randn(M, V, device=normlab.DEVICE, requires_grad=True)
target = torch.randn(M, V, device=normlab.DEVICE)
ref_loss = ref.reverse_kl_ref(logits.double(), target.double(), reduction="sum")
ref_grad, = torch.autograd.grad(ref_loss, logits)
for form in ("fused", "chunked", "split"):
    loss = normlab.reverse_kl(logits, target, form=form, block_cap=256, reduction="sum")
    grad, = torch.autograd.grad(loss, logits)
    print(f"reverse_kl {form:<7} V={V}", viz.verdict("loss", loss, ref_loss, reduce_len=M * V),
          "|", viz.verdict("dlogits", grad, ref_grad))
'''),
    md('''
Recorded at V = 50257 (every form and cap; `auto` picks among them by `entropy_vocab_class`):
'''),
    code('''
viz.records_table(viz.select(kl, N=50257), ["impl", "strategy", "block_cap", "device_us", "gbps",
                                            "frac_roofline"], empty=viz.NO_RECORDED_DATA)
'''),
    md('''
What a tile costs. The kernels are bound by latency per tile more than by bytes: at 49152 columns
(24 whole tiles of 2048) the chunked form took 487 µs, at 50256 (25 tiles, the last 54% full) 511
µs, so a ragged last tile cost as much as a whole one. Part of each tile's cost was its
reductions. The online softmax needs the tile's max and three sums over all 4 warps of a program;
a reduction across warps goes through shared memory and a barrier, and a warp waiting at a
barrier issues no loads. The loss kernels now keep a running max and sum-exp per **lane** of 8
columns (a 2048 tile is a 256 × 8 grid, two lanes per thread), reduce a tile within each thread,
and fold the lanes once per row or chunk (`online_tile`, `fold_stats`; `config.entropy_lane`).
On the H200 that took reverse KL at 32768 from 327 to 302 µs (fused, tile 2048) and at 131072
from 1267 to 1155 µs (chunked), and every recorded vocabulary past 2500 GB/s. Tiles wider than
2048 keep one lane per tile: at 4096, four lanes' state per thread cost more than the barriers.

At 50257 the chunked 2048 tile did not gain: its aligned-frame code needs more than the 64
registers per thread it is capped at, and it spilled. The 1024 tile needs 40 registers; in chunks
of 6 tiles it is the default there (483.6 µs, 2554 GB/s; the table above).

One idea was measured and dropped, and its story is worth knowing. The chunked form keeps 5 fp32
statistics per row and chunk in a workspace (0.4–1.9 MiB at 4096 rows), so its extra memory is a
third of torch.compile's plus 0.1–0.16%. Storing them inside the gradient's own first columns,
written over last, removes the workspace. The first version had a race: a chunk's first tile
was written before the other chunks of its row had read the statistics there. The CPU tests could
not show it (the interpreter runs one program at a time), and the GPU correctness checks of that
build passed by timing; a timing sweep that compared every result with the previous kernel's
caught it. It was also slower, and it was not kept (README, "Targets not met").
'''),
    nav(5),
]

# ------------------------------------------------------------------------------------------------
nbs[6] = [
    md('''
# 06 · Explorer

Pick an op, several implementations at once, a strategy (norms) or form (losses), dtype, direction,
and shapes (sliders, or a preset such as the peer shapes), then press **Run**. The progress bar follows
`bench.sweep`; the live figures (GB/s vs shape against the copy roofline, fraction of copy, speed-up
vs the best peer) appear under *live*, and the recorded H200 measurements for the same selection
under *recorded*.

On a CPU, presets are cut to interpreter-sized shapes (the status line says so) and the live numbers
only show that the pipeline works; the recorded panel is the one to read.
'''),  # noqa: E501
    MODE_NOTE,
    SETUP,
    code('''
# NBVAL_CHECK_OUTPUT
from normlab.viz import widgets

print("ops:", ", ".join(op for op in bench.REGISTRY if op != "copy"))
print("shape presets:")
for name, shapes in widgets.PRESETS.items():
    print(f"  {name}: {len(shapes)} shapes")
'''),
    code('''
explorer = widgets.explorer(recorded=recorded)
explorer
'''),
    md('''
The same pipeline without widgets, for scripts: choose records, then call the figure functions.
'''),
    code('''
viz.gbps_vs_shape(viz.select(recorded, op="rms_norm", direction="bwd"), source="recorded")
'''),
    nav(6),
]

def main(out: Path = OUT) -> None:
    for i, cells in nbs.items():
        nb = new_notebook(cells=cells, metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)",
                           "language": "python"},
            "language_info": {"name": "python"}})
        nbformat.write(nb, out / f"{NAV[i]}.ipynb")
        print("wrote", NAV[i])


if __name__ == "__main__":
    main()
