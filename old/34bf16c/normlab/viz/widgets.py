"""ipywidgets controls that only wire ``normlab.bench`` runs to the figures in ``plots``.

Nothing is computed here: a Run click asks ``normlab.bench.sweep`` for live records (an
``IntProgress`` bar is its ``progress`` callback) and shows the ``plots`` figures for them next
to the recorded ones. Figures are set as the ``outputs`` of ``Output`` widgets; a notebook
cell that builds the explorer shows only the widget, so nbval has nothing to compare.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Iterable

import ipywidgets as W
import plotly.io as pio
from IPython.display import display

from normlab import _runtime, bench
from normlab.bench.registry import DEFAULT_DIRECTIONS, LOSS_DIRECTIONS, NORM_DIRECTIONS
from normlab.bench.sweep import SHAPES
from normlab.bench.traffic import LABEL_LOSS_OPS, SOFT_LOSS_OPS
from normlab.losses import FORMS as LOSS_FORMS
from normlab.viz import plots

# Shape presets: the tables of the seeds and the peer measurements, (M rows, N columns).
PRESETS: dict[str, list[tuple[int, int]]] = {
    "custom (sliders)": [],
    "peer norm shapes (11)": list(SHAPES["peers"]),
    "narrow rows, 7,864,320 rows": list(SHAPES["narrow"]),
    "vocabularies, 4096 tokens": [(m, v) for m, v in SHAPES["losses"] if v & (v - 1) == 0],
    "CPU-sized (interpreter)": [(64, 256), (61, 1000), (128, 128)],
}
# The interpreter runs ~1 ms per program instance: presets are cut to this many rows/cols there.
INTERPRET_MAX_ROWS = 128
INTERPRET_MAX_COLS = 4096
_POW2 = [2**k for k in range(4, 24)]
LOSS_OPS = SOFT_LOSS_OPS + LABEL_LOSS_OPS
DIRECTIONS = {"norm": NORM_DIRECTIONS, "loss": LOSS_DIRECTIONS}


def fit_for_interpreter(shapes: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Shapes cut down so an interpreter run ends in seconds (duplicates removed, order kept)."""
    out = []
    for M, N in shapes:
        s = (min(M, INTERPRET_MAX_ROWS), min(N, INTERPRET_MAX_COLS))
        if s not in out:
            out.append(s)
    return out


def _registry_ops() -> dict[str, list[str]]:
    """op -> implementation names, from ``normlab.bench``'s registry (the copy op excluded)."""
    return {op: list(impls) for op, impls in bench.REGISTRY.items() if op != "copy"}


class Explorer:
    """Pick op, implementations, strategy, dtype, direction and shapes; Run; compare with records.

    ``sweep`` and ``recorded`` default to ``normlab.bench.sweep`` and
    ``normlab.bench.load_recorded()``; tests pass fakes. ``run()`` returns the figures it displayed.
    """

    def __init__(
        self,
        *,
        ops: dict[str, list[str]] | None = None,
        recorded: list | None = None,
        sweep: Callable | None = None,
        interpret: bool | None = None,
    ):
        self.interpret = _runtime.INTERPRET if interpret is None else interpret
        self._sweep = sweep
        self.ops = ops if ops is not None else _registry_ops()
        self.recorded = plots.as_dicts(recorded if recorded is not None else _load_recorded())
        self.live: list[dict] = []
        self.skipped: list = []
        self.figures: list = []

        first = next(iter(self.ops))
        self.op = W.Dropdown(options=list(self.ops), value=first, description="op")
        self.impls = W.SelectMultiple(options=self.ops[first], rows=5, description="impls")
        self.strategy = W.Dropdown(description="strategy")
        self.dtype = W.Dropdown(options=["bf16", "fp16", "fp32"], value="bf16", description="dtype")
        self.direction = W.Dropdown(description="direction")
        small = self.interpret
        self.M = W.SelectionSlider(options=[p for p in _POW2 if not small or p <= 4096],
                                   value=64 if small else 8192, description="M (rows)")
        self.N = W.SelectionSlider(options=[p for p in _POW2 if not small or p <= 16384],
                                   value=256 if small else 4096, description="N (cols)")
        self.preset = W.Dropdown(options=list(PRESETS), value="custom (sliders)",
                                 description="shapes")
        self.run_button = W.Button(description="Run", button_style="primary", icon="play")
        self.progress = W.IntProgress(value=0, min=0, max=1, description="progress")
        self.status = W.HTML()
        self.out_live = W.Output()
        self.out_recorded = W.Output()
        self._on_op({"new": first})

        self.op.observe(self._on_op, names="value")
        for w in (self.op, self.impls, self.dtype, self.direction, self.preset, self.M, self.N):
            w.observe(lambda _change: self.show_recorded(), names="value")
        self.run_button.on_click(lambda _b: self.run())

        # A fixed-width control column: JupyterLab otherwise squeezes it and clips the labels.
        controls = W.VBox([self.op, self.impls, self.strategy, self.dtype, self.direction],
                          layout=W.Layout(min_width="330px"))
        shapes = W.VBox([self.preset, self.M, self.N, W.HBox([self.run_button, self.progress]),
                         self.status])
        self.widget = W.VBox([
            W.HBox([controls, shapes]),
            W.HTML("<b>live</b> (this machine)"), self.out_live,
            W.HTML("<b>recorded</b> (shipped measurements)"), self.out_recorded,
        ])
        self.status.value = self._mode_note()

    # ---- wiring ------------------------------------------------------------------------------

    def _mode_note(self) -> str:
        if self.interpret:
            return ("Triton interpreter on CPU: live runs check the pipeline, their timings say "
                    "nothing about GPU bandwidth; shapes are capped at "
                    f"{INTERPRET_MAX_ROWS} rows × {INTERPRET_MAX_COLS} columns.")
        return "live runs on this GPU."

    def _on_op(self, change) -> None:
        op = change["new"]
        self.impls.options = self.ops[op]
        ours = [i for i in self.ops[op] if i.startswith(plots.OURS_PREFIX)]
        peers = [i for i in self.ops[op] if i not in ours]
        self.impls.value = tuple(ours[:1] + peers[:1])
        self.strategy.options = LOSS_FORMS if op in LOSS_OPS else ("auto", *plots.STRATEGIES)
        self.strategy.value = "auto"
        self.direction.options = DIRECTIONS["loss" if op in LOSS_OPS else "norm"]
        self.direction.value = DEFAULT_DIRECTIONS[op][-1]  # bwd for norms, fwd+bwd for losses

    def shapes(self) -> list[tuple[int, int]]:
        """The requested shapes (preset or sliders), as run on this machine."""
        shapes = PRESETS[self.preset.value] or [(self.M.value, self.N.value)]
        return fit_for_interpreter(shapes) if self.interpret else list(shapes)

    def _selection(self) -> dict:
        return {"op": self.op.value, "dtype": self.dtype.value, "direction": self.direction.value}

    def recorded_selection(self) -> list[dict]:
        """Recorded records for the chosen op/dtype/direction (and preset shapes, if any)."""
        rows = plots.select(self.recorded, **self._selection())
        preset = PRESETS[self.preset.value]
        if preset:
            rows = [r for r in rows if (r.get("M"), r.get("N")) in preset]
        return rows

    def show_recorded(self) -> list:
        """The recorded panel: GB/s and speed-up at the benchmark shapes of the selection, and a
        cliff map when a shape population of the selection is recorded (not with a preset)."""
        rows = self.recorded_selection()
        benchmark = [r for r in rows if not r.get("shape_set")]
        population = [r for r in rows if r.get("shape_set")]
        figs = []
        if benchmark:
            figs += [plots.gbps_vs_shape(benchmark, source="recorded"),
                     plots.speedup_vs_best_peer(benchmark, source="recorded")]
        sel = self._selection()
        if population and plots.cliff_ratios(population, **sel):
            figs.append(plots.cliff_map(population, **sel, source="recorded"))
        if not figs:
            figs = [plots.empty_figure(plots.NO_RECORDED_DATA if not self.recorded else
                                       "no recorded run matches this op, dtype, direction and "
                                       "shapes", "recorded")]
        _show(self.out_recorded, figs)
        return figs

    def _on_progress(self, done: int, total: int, label: str = "") -> None:
        """``normlab.bench.sweep``'s progress hook: moves the bar, names the running case."""
        self.progress.max = max(int(total), 1)
        self.progress.value = int(done)
        if label and done < total:
            self.status.value = f"running {html.escape(label)}…"

    def run(self) -> list:
        """Measure the selection live, then show live and recorded figures side by side."""
        if not self.impls.value:
            self.status.value = "pick at least one implementation"
            return []
        sweep = self._sweep or bench.sweep
        self.progress.value = 0
        self.status.value = "running…"
        options = {}
        if self.strategy.value != "auto":  # a normlab option: norms' strategy, losses' form
            options["form" if self.op.value in LOSS_OPS else "strategy"] = [self.strategy.value]
        try:
            live = sweep(self.op.value, list(self.impls.value), self.shapes(), [self.dtype.value],
                         [self.direction.value], options=options, progress=self._on_progress)
        except Exception as exc:  # shown in the widget; a notebook user sees the reason
            self.status.value = f"run failed: {type(exc).__name__}: {exc}"
            raise
        self.live = plots.with_source(live, "live")
        self.skipped = list(getattr(live, "skipped", []))
        skipped = "".join(f"<br>skipped {html.escape(c)}: {html.escape(r)}"
                          for c, r in self.skipped)
        self.status.value = f"{len(self.live)} live measurements. " + self._mode_note() + skipped
        figs = [plots.gbps_vs_shape(self.live), plots.roofline_bars(self.live),
                plots.speedup_vs_best_peer(self.live)]
        _show(self.out_live, figs)
        self.figures = figs + self.show_recorded()
        return self.figures

    def _ipython_display_(self) -> None:
        display(self.widget)


def _show(out: W.Output, figs: list) -> None:
    """Replace ``out``'s content with ``figs`` through the widget's ``outputs`` state.

    Not ``with out: display(...)``, whose messages a headless runner (nbclient) must route
    through output hooks: the H200 runs of the explorer notebook ended twice in nbclient errors
    at that cell. The widget state renders the same in JupyterLab and needs no hooks.
    """
    to_mimebundle = pio.renderers["plotly_mimetype"].to_mimebundle  # JSON-safe plotly bundle
    out.outputs = tuple(
        {"output_type": "display_data", "metadata": {},
         "data": {**to_mimebundle(fig.to_dict()),
                  "text/plain": f"<plotly figure: {_figure_title(fig)}>"}}
        for fig in figs
    )  # fmt: skip


def _figure_title(fig) -> str:
    return (fig.layout.title.text or "untitled") if fig.layout.title else "untitled"


def _load_recorded() -> list:
    try:
        return bench.load_recorded()
    except FileNotFoundError:
        return []


def explorer(**kwargs) -> Explorer:
    """Build the explorer and show the recorded view for its initial selection."""
    ex = Explorer(**kwargs)
    ex.show_recorded()
    return ex


def contention_explorer(n_sm: int | None = None) -> W.VBox:
    """Sliders for M, N and persistent programs per SM over ``plots.contention_figure``, drawn
    with the planner's configuration for each shape (``plots.contention_plan``): row tiles,
    two-stage blocks, and paired partial rows where the planner pairs them at that program count.

    ``n_sm`` defaults to this GPU's SMs, or the H200's 132 under the interpreter (whose 4
    stand-in SMs would make a dull picture).
    """
    from normlab.norms import config as norm_config

    n_sm = n_sm or (132 if _runtime.INTERPRET else _runtime.sm_count())
    M = W.SelectionSlider(options=_POW2, value=32768, description="M (rows)")
    N = W.SelectionSlider(options=_POW2[:13], value=1024, description="N (cols)")
    planned = norm_config.norm_bwd_config("persistent", M.value, N.value).programs_per_sm
    pps = W.SelectionSlider(options=[1, 2, 4, 8], value=planned, description="programs/SM")
    strategies = W.SelectMultiple(options=plots.STRATEGIES, value=plots.STRATEGIES,
                                  description="strategies")
    out = W.Output()

    def draw(_change=None):
        chosen = strategies.value or plots.STRATEGIES
        plan = plots.contention_plan(M.value, N.value, n_sm=n_sm)
        plan["programs_per_sm"] = pps.value
        plan["paired_partials"] = norm_config.norm_bwd_config(
            "persistent", M.value, N.value, programs_per_sm=pps.value).paired_partials
        _show(out, [plots.contention_figure(M.value, N.value, n_sm=n_sm, strategies=chosen,
                                            **plan)])

    for w in (M, N, pps, strategies):
        w.observe(draw, names="value")
    draw()
    return W.VBox([W.HBox([W.VBox([M, N, pps]), strategies]), out])
