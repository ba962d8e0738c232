"""normlab.viz: figures and tables from synthetic records, checked without a browser."""

import math

import pytest

pytest.importorskip("plotly")
pytest.importorskip("ipywidgets")

import plotly.graph_objects as go

from normlab import viz
from normlab.viz import plots

CARD, DATE, COPY, SHEET = "NVIDIA H200", "2026-11-29", 4242.0, 4800.0


def _rec(impl, M, N, us, *, strategy=None, direction="bwd", kernels=None, op="rms_norm", **kw):
    bytes_ = 3 * M * N * 2
    gbps = bytes_ / us / 1e3
    rec = {
        "op": op, "impl": impl, "strategy": strategy, "layout": None, "M": M, "N": N,
        "dtype": "bf16", "direction": direction, "device_us": us, "wall_us": us + 7.0,
        "bytes": bytes_, "gbps": gbps, "roofline_gbps": COPY, "frac_roofline": gbps / COPY,
        "datasheet_gbps": SHEET, "kernels": kernels if kernels is not None else {}, "card": CARD,
        "sm_count": 132, "mode": "gpu", "date": DATE,
    }
    rec.update(kw)
    return rec


@pytest.fixture
def recorded():
    # Two of ours (two strategies) and two peers at three shapes, deliberately unsorted.
    out = []
    for M, N, base in ((16384, 1024, 36.5), (8192, 1024, 24.2), (512, 16384, 30.0)):
        out.append(_rec("normlab", M, N, base * 0.9, strategy="persistent",
                        kernels={"_norm_bwd": base * 0.8, "_dw_reduce": base * 0.1}))
        out.append(_rec("normlab", M, N, base * 1.5, strategy="atomic",
                        kernels={"_norm_bwd_atomic": base * 1.5}))
        out.append(_rec("quack", M, N, base))
        out.append(_rec("compile", M, N, base * 1.1))
    return out


def _hlines(fig):
    return sorted(s.y0 for s in fig.layout.shapes if s.type == "line")


# ---- records ---------------------------------------------------------------------------------


def test_as_dicts_accepts_objects_and_rejects_a_single_dict():
    import dataclasses

    @dataclasses.dataclass
    class R:
        impl: str
        M: int

    assert viz.as_dicts([R("x", 3)]) == [{"impl": "x", "M": 3}]
    with pytest.raises(TypeError, match="single dict"):
        viz.as_dicts({"impl": "x"})
    with pytest.raises(TypeError, match="record must be"):
        viz.as_dicts([42])


def test_select_filters_by_value_and_by_collection(recorded):
    assert len(viz.select(recorded, impl="quack")) == 3
    assert len(viz.select(recorded, impl=("quack", "compile"), M=8192)) == 2
    assert viz.select(recorded, impl="nothing") == []


def test_source_is_explicit_tagged_or_inferred(recorded):
    assert viz.source_of(recorded) == "recorded"
    assert viz.source_of(recorded, "live") == "live"
    assert viz.source_of(viz.with_source(recorded, "live")) == "live"
    assert viz.source_of([dict(recorded[0], mode="interpret")]) == "live"
    with pytest.raises(ValueError, match="source='cached'"):
        viz.source_of(recorded, "cached")
    text = viz.source_text([dict(recorded[0], mode="interpret", card="cpu")])
    assert (text.startswith("live: this machine (cpu, interpret mode)")
            and "not GPU bandwidth" in text)


def test_mixing_cards_is_a_clear_error(recorded):
    with pytest.raises(ValueError, match="mix 2 cards"):
        viz.gbps_vs_shape([*recorded, dict(recorded[0], card="NVIDIA H100")])


# ---- GB/s vs shape ---------------------------------------------------------------------------


def test_gbps_vs_shape_traces_lines_title_and_hover(recorded):
    fig = viz.gbps_vs_shape(recorded)
    assert isinstance(fig, go.Figure) and not isinstance(fig, go.FigureWidget)
    names = sorted(t.name for t in fig.data)
    assert names == ["compile", "normlab · atomic", "normlab · persistent", "quack"]
    # x is ordered by problem size (M·N, then M), not by record order.
    quack = next(t for t in fig.data if t.name == "quack")
    assert list(quack.x) == ["512×16384", "8192×1024", "16384×1024"]
    assert list(quack.y) == pytest.approx([3 * 512 * 16384 * 2 / 30e3, 3 * 8192 * 1024 * 2 / 24.2e3,
                                           3 * 16384 * 1024 * 2 / 36.5e3])
    # hover carries device µs, wall µs and % of copy for that exact point
    dev_us, wall_us, pct = quack.customdata[1][:3]
    assert (dev_us, wall_us) == (24.2, 31.2)
    assert pct == pytest.approx(100 * quack.y[1] / COPY)
    assert "µs" in quack.hovertemplate and "% of copy" in quack.hovertemplate
    assert _hlines(fig) == [COPY, SHEET]
    title = fig.layout.title.text
    assert "recorded: NVIDIA H200, 2026-11-29" in title
    assert "GB/s" in fig.layout.yaxis.title.text and "M×N" in fig.layout.xaxis.title.text


def test_gbps_vs_shape_explicit_lines_override_and_missing_lines_are_not_drawn(recorded):
    fig = viz.gbps_vs_shape(recorded, copy_gbps=1000.0, datasheet_gbps=2000.0, source="live")
    assert _hlines(fig) == [1000.0, 2000.0]
    assert "live: this machine" in fig.layout.title.text
    bare = [dict(r, roofline_gbps=None, datasheet_gbps=None, frac_roofline=None) for r in recorded]
    fig = viz.gbps_vs_shape(bare)
    assert _hlines(fig) == []
    assert all(math.isnan(c[2]) for t in fig.data for c in t.customdata)  # no copy -> no % claimed


def test_invalid_records_are_left_out_and_counted(recorded):
    bad = dict(recorded[0], gbps=9999.0, valid=False, note="exceeds the measured copy roofline")
    fig = viz.gbps_vs_shape([*recorded, bad])
    assert 9999.0 not in [y for t in fig.data for y in t.y]
    assert "1 record(s) marked invalid" in fig.layout.title.text


def test_accepts_bench_record_objects_and_labels_block_cap(recorded):
    from normlab.bench.records import FIELDS, Record

    fields = {k: v for k, v in recorded[0].items() if k in FIELDS}
    rec = Record(**{**{k: "" for k in FIELDS if k not in fields}, **fields,
                    "peak_extra_bytes": None, "block_cap": 8192, "valid": True})
    fig = viz.gbps_vs_shape([rec])
    assert fig.data[0].name == "normlab · persistent · cap=8192"


def test_gbps_vs_shape_names_the_varying_direction(recorded):
    fwd = [dict(r, direction="fwd") for r in recorded if r["impl"] == "quack"]
    fig = viz.gbps_vs_shape(viz.select(recorded, impl="quack") + fwd)
    assert sorted(t.name for t in fig.data) == ["quack (bwd)", "quack (fwd)"]


@pytest.mark.parametrize("fn", [viz.gbps_vs_shape, viz.roofline_bars, viz.kernel_breakdown,
                                viz.speedup_vs_best_peer])
def test_empty_input_gives_a_figure_that_says_why(fn):
    fig = fn([], source="recorded")
    assert len(fig.data) == 0
    assert fig.layout.annotations[0].text.startswith("no recorded GPU data in this package yet")
    fig = fn([], source="live")
    assert "no records to plot" in fig.layout.annotations[0].text


# ---- roofline --------------------------------------------------------------------------------


def test_roofline_bars_are_percent_of_copy_with_ceiling_lines(recorded):
    fig = viz.roofline_bars(recorded)
    assert {type(t) for t in fig.data} == {go.Bar}
    quack = next(t for t in fig.data if t.name == "quack")
    assert list(quack.y) == pytest.approx([100 * r["frac_roofline"] for r in
                                           sorted(viz.select(recorded, impl="quack"),
                                                  key=lambda r: (r["M"] * r["N"], r["M"]))])
    assert _hlines(fig) == pytest.approx([100.0, 100 * SHEET / COPY])
    assert "recorded: NVIDIA H200, 2026-11-29" in fig.layout.title.text


def test_roofline_bars_derive_fraction_when_record_lacks_it(recorded):
    rec = dict(recorded[0], frac_roofline=None)
    fig = viz.roofline_bars([rec])
    assert fig.data[0].y[0] == pytest.approx(100 * rec["gbps"] / COPY)


# ---- per-kernel breakdown --------------------------------------------------------------------


def test_kernel_breakdown_stacks_main_and_reduce(recorded):
    fig = viz.kernel_breakdown(recorded)
    assert fig.layout.barmode == "stack"
    # short labels; the full kernel names are in the hover
    assert [t.name for t in fig.data] == ["main", "reduce"]
    reduce = next(t for t in fig.data if t.name == "reduce")
    # a persistent run at 8192×1024 has reduce 2.42 µs; the atomic run has no reduce kernel (0)
    x = list(reduce.x)
    assert reduce.y[x.index("8192×1024 · normlab · persistent")] == pytest.approx(2.42)
    assert reduce.y[x.index("8192×1024 · normlab · atomic")] == 0.0
    # stacks add up to each run's kernel total; peers without kernel times are left out
    total = sum(t.y[x.index("512×16384 · normlab · persistent")] for t in fig.data)
    assert total == pytest.approx(30.0 * 0.9)
    assert not any("quack" in v for v in x)
    assert "device time (µs)" == fig.layout.yaxis.title.text
    main = next(t for t in fig.data if t.name == "main")
    hover = main.customdata[x.index("8192×1024 · normlab · atomic")][1]
    assert hover.startswith("_norm_bwd_atomic: 36.30 µs")


def test_kernel_kinds_name_every_recorded_kind():
    cpp = ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
           "std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)")
    assert viz.kernel_kind(cpp) == "fill"
    assert viz.kernel_kind("Memset (Device)") == "memset"
    assert viz.kernel_kind("_reduce_partials_kernel") == "reduce"
    assert viz.kernel_kind("void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernel"
                           "Template<c10::BFloat16, float>(long)") == "reduce"
    assert viz.kernel_kind("Memcpy DtoD (Device -> Device)") == "copy"
    assert viz.kernel_kind("_norm_bwd_persistent_static_kernel") == "main"
    assert viz.kernel_kind("triton_red_fused__fused_rms_norm_0") == "main"
    # two kernels of one kind in one run are stacked as one bar, both named in the hover
    rec = _rec("normlab", 64, 64, 5.0, kernels={"Memset (Device)": 1.0, "_a_kernel": 3.0,
                                                "_b_kernel": 1.0})
    fig = viz.kernel_breakdown([rec])
    main = next(t for t in fig.data if t.name == "main")
    assert main.y[0] == pytest.approx(4.0) and "_a_kernel: 3.00 µs<br>_b_kernel: 1.00 µs" in \
        main.customdata[0][1]
    assert [t.name for t in fig.data] == ["main", "memset"]


def test_kernel_breakdown_without_kernel_times_says_so(recorded):
    fig = viz.kernel_breakdown([dict(r, kernels={}) for r in recorded], source="live")
    assert "no per-kernel times" in fig.layout.annotations[0].text


# ---- speed-up --------------------------------------------------------------------------------


def test_speedup_against_fastest_peer_per_shape(recorded):
    table = viz.speedup_table(recorded)
    assert len(table) == 6  # 2 of ours × 3 shapes
    row = next(t for t in table if t["impl"] == "normlab · persistent" and t["M"] == 8192)
    assert row["best_peer"] == "quack" and row["best_peer_us"] == 24.2
    assert row["speedup"] == pytest.approx(1 / 0.9)
    fig = viz.speedup_vs_best_peer(recorded)
    atomic = next(t for t in fig.data if t.name == "normlab · atomic")
    assert list(atomic.y) == pytest.approx([1 / 1.5] * 3)
    assert _hlines(fig) == [1.0]
    assert "recorded: NVIDIA H200" in fig.layout.title.text


def test_speedup_skips_shapes_without_a_peer_and_says_when_none_match(recorded):
    lonely = _rec("normlab", 100, 100, 1.0, strategy="atomic")
    assert all(t["M"] != 100 for t in viz.speedup_table([*recorded, lonely]))
    fig = viz.speedup_vs_best_peer(viz.select(recorded, impl="normlab"))
    assert "no shape has both" in fig.layout.annotations[0].text


# ---- contention picture ----------------------------------------------------------------------


def test_contention_model_numbers():
    m = viz.contention_model(32768, 1024, n_sm=132, programs_per_sm=2)
    assert m["atomic"]["queue_depth"] == 32768 and m["atomic"]["destinations"] == 1
    assert m["atomic"]["workspace_bytes"] == 0
    assert m["two_stage"]["partial_rows"] == 32768 and m["two_stage"]["queue_depth"] == 1
    assert m["two_stage"]["workspace_bytes"] == 32768 * 1024 * 4
    assert m["persistent"]["programs"] == 264 and m["persistent"]["tiles_per_program"] == 125
    # the bounded workspace does not grow with M; two-stage's does
    m2 = viz.contention_model(2 * 32768, 1024, n_sm=132, programs_per_sm=2)
    assert m2["persistent"]["workspace_bytes"] == m["persistent"]["workspace_bytes"]
    assert m2["two_stage"]["workspace_bytes"] == 2 * m["two_stage"]["workspace_bytes"]
    # fewer row tiles than persistent slots: one tile each, no idle programs
    small = viz.contention_model(7, 33, n_sm=4, programs_per_sm=2, rows_per_program=2)
    assert small["persistent"]["programs"] == 4 and small["atomic"]["queue_depth"] == 4
    # two-stage folds a block of rows per partial (the kernel's rows_per_program)
    blk = viz.contention_model(1000, 64, n_sm=4, rows_per_program=2, two_stage_rows=32)
    assert blk["two_stage"]["partial_rows"] == 32 and blk["two_stage"]["tiles_per_program"] == 16
    assert blk["atomic"]["queue_depth"] == 500
    with pytest.raises(ValueError, match="n_rows must be a positive int"):
        viz.contention_model(0, 8, n_sm=4)


def test_contention_figure_is_driven_by_the_numbers():
    fig = viz.contention_figure(4096, 1024, n_sm=132, programs_per_sm=2)
    titles = [a.text for a in fig.layout.annotations]
    assert "<b>atomic</b>: 4,096 programs<br>→ 1 dγ vector" in titles
    assert "<b>persistent</b>: 264 programs<br>→ 264 partial rows" in titles
    carts = {t.name: t for t in fig.data if isinstance(t, go.Scatter) and "docks" not in t.name}
    assert len(carts["atomic"].x) == plots.MAX_CARTS_SHOWN  # the queue, capped for display
    assert any(a.text == f"+{4096 - plots.MAX_CARTS_SHOWN:,} more" for a in fig.layout.annotations)
    bars = {t.name: t for t in fig.data if isinstance(t, go.Bar)}
    assert bars["atomic"].y[0] == 4096 and bars["persistent"].y[1] == 264
    # a small problem draws every program and says how many tiles each persistent program folds
    fig = viz.contention_figure(64, 256, n_sm=4, strategies=["persistent"])
    assert any("×8 tiles each" in a.text for a in fig.layout.annotations)
    with pytest.raises(ValueError, match="strategies must be"):
        viz.contention_figure(64, 256, n_sm=4, strategies=["lock"])


def test_contention_plan_draws_the_configuration_that_runs():
    from normlab.norms import config

    plan = viz.contention_plan(32768, 1024)
    cfg = config.norm_bwd_config("persistent", 32768, 1024)
    assert plan["programs_per_sm"] == cfg.programs_per_sm == 4
    assert plan["paired_partials"] == cfg.paired_partials is False
    two_stage = config.norm_bwd_config("two_stage", 32768, 1024)
    assert plan["two_stage_rows"] == two_stage.rows_per_program
    m = viz.contention_model(32768, 1024, n_sm=132, **plan)
    # 4 programs per SM x 132 SMs, each into its own partial row
    assert m["persistent"]["programs"] == 528 and m["persistent"]["partial_rows"] == 528
    assert m["persistent"]["queue_depth"] == 1 and not m["persistent"]["paired"]
    assert m["persistent"]["workspace_bytes"] == 528 * 1024 * 4
    assert m["two_stage"]["partial_rows"] == 32768 // plan["two_stage_rows"]
    assert m["atomic"]["programs"] == 32768 // plan["atomic_rows"]
    # paired (paired_partials=True): added in pairs into 264 zeroed partial rows
    paired = {**plan, "paired_partials": True}
    m = viz.contention_model(32768, 1024, n_sm=132, **paired)
    assert m["persistent"]["partial_rows"] == 264 and m["persistent"]["queue_depth"] == 2
    fig = viz.contention_figure(32768, 1024, n_sm=132, **paired)
    titles = [a.text for a in fig.layout.annotations]
    assert "<b>persistent</b>: 528 programs<br>→ 264 partial rows (in pairs)" in titles
    carts = next(t for t in fig.data if t.name == "persistent" and isinstance(t, go.Scatter))
    assert list(carts.y[:4]) == [0, 0, 1, 1]  # two carts per dock
    # wide rows take the two-pass kernel: no pairing there
    assert not viz.contention_plan(4096, 32768)["paired_partials"]
    # an odd program count: the last partial row has one addend
    odd = viz.contention_model(5, 8, n_sm=1, programs_per_sm=8, paired_partials=True)
    assert odd["persistent"]["programs"] == 5 and odd["persistent"]["partial_rows"] == 3


def test_subplot_titles_fit_at_1280_px():
    fig = viz.contention_figure(262144, 16384, n_sm=132, **viz.contention_plan(262144, 16384))
    # at 1280 px three panels get ~380 px each; no title line is longer than ~40 characters
    for a in fig.layout.annotations[:3]:
        assert all(len(line.replace("<b>", "").replace("</b>", "")) <= 40
                   for line in a.text.split("<br>")), a.text


# ---- families, palette, captions ---------------------------------------------------------------


def test_no_line_joins_two_shape_families(recorded):
    narrow = [_rec("quack", 7_864_320, n, 100.0 * n / 16) for n in (16, 32)]
    fig = viz.gbps_vs_shape(viz.select(recorded, impl="quack") + narrow)
    quack = [t for t in fig.data if t.name == "quack"]
    assert len(quack) == 2 and sum(bool(t.showlegend) for t in quack) == 1
    assert {t.legendgroup for t in quack} == {"quack"}
    assert quack[0].line.color == quack[1].line.color
    assert list(quack[1].x) == ["7864320×16", "7864320×32"]
    assert viz.shape_family(narrow[0]) == "narrow rows (7.9M)"
    assert viz.shape_family(recorded[0]) == "peer shapes"
    assert viz.shape_family({"M": 3, "N": 5}) == "other shapes"
    assert viz.shape_family({"M": 3, "N": 5, "family": "mine"}) == "mine"
    # the x axis groups each family's shapes together, with a divider between the families
    order = list(fig.layout.xaxis.categoryarray)
    assert order[-2:] == ["7864320×16", "7864320×32"]
    assert any(s.type == "line" and s.x0 == s.x1 == len(order) - 2.5 for s in fig.layout.shapes)


def test_population_members_are_grouped_by_their_rule():
    from normlab.bench.shapes import norm_population

    case = next(c for c in norm_population() if c.family == "narrow")
    rec = {"M": case.M, "N": case.N, "shape_set": "population"}
    assert viz.shape_family(rec) == "population: narrow"


def test_palette_has_no_repeat_for_24_series(recorded):
    recs = [_rec(f"peer{i}", 64, 64, 1.0 + i) for i in range(24)]
    fig = viz.gbps_vs_shape(recs)
    colors = [t.line.color for t in fig.data]
    assert len(set(colors)) == 24 and set(colors) <= set(viz.PALETTE)


def test_captions_name_card_date_commit_and_source(recorded):
    recs = [dict(r, commit="5d1df6e") for r in recorded]
    for fig in (viz.gbps_vs_shape(recs), viz.roofline_bars(recs), viz.kernel_breakdown(recs),
                viz.speedup_vs_best_peer(recs)):
        assert "recorded: NVIDIA H200, 2026-11-29, commit 5d1df6e" in fig.layout.title.text
    two = recs[:2] + [dict(r, commit="9ce8805") for r in recs[2:]]
    assert "commits 5d1df6e, 9ce8805" in viz.gbps_vs_shape(two).layout.title.text
    live = viz.gbps_vs_shape(recs, source="live").layout.title.text
    assert "live: this machine (NVIDIA H200, gpu mode), 2026-11-29, commit 5d1df6e" in live


def test_quote_prints_one_record_the_same_way_everywhere(recorded):
    recs = [dict(r, commit="5d1df6e") for r in recorded]
    text = viz.quote(recs, impl="quack", M=8192, N=1024)
    assert text == ("24.2 µs (quack, rms_norm bwd 8192×1024 bf16; NVIDIA H200, 2026-11-29, "
                    "commit 5d1df6e)")
    with pytest.raises(ValueError, match="3 records match impl='quack'"):
        viz.quote(recs, impl="quack")
    with pytest.raises(ValueError, match="0 records match"):
        viz.one(recs, impl="nobody")


# ---- the cliff map -----------------------------------------------------------------------------


def _cliff_records():
    """normlab, two peers and a normlab variant at four shapes of one run; one shape measured
    with no peer, one peer from another run."""
    out = []
    for (M, N), ours, torch_us, liger_us in (((1, 768), 8.0, 4.0, 5.0),
                                             ((4096, 4096), 20.0, 30.0, 25.0),
                                             ((10_000_000, 5), 138.0, 51353.0, 900.0),
                                             ((593, 37), 6.0, 6.0, 7.0)):
        out.append(_rec("normlab", M, N, ours, direction="fwd", commit="c1",
                        shape_set="population"))
        out.append(_rec("normlab", M, N, 0.1, direction="fwd", commit="c1", layout="row"))
        out.append(_rec("torch", M, N, torch_us, direction="fwd", commit="c1"))
        out.append(_rec("liger", M, N, liger_us, direction="fwd", commit="c1"))
    out.append(_rec("normlab", 7, 7, 1.0, direction="fwd", commit="c1"))  # no peer
    out.append(_rec("normlab", 9, 9, 1.0, direction="fwd", commit="c1"))
    out.append(_rec("torch", 9, 9, 0.5, direction="fwd", commit="c0"))  # another run
    out.append(_rec("torch", 4096, 4096, 1.0, direction="fwd", commit="c1", valid=False))
    out.append(_rec("torch", 4096, 4096, 1.0, direction="bwd", commit="c1"))
    return out


def test_cliff_ratios_take_the_best_peer_of_the_same_run():
    table = viz.cliff_ratios(_cliff_records(), op="rms_norm", direction="fwd")
    by = {(t["M"], t["N"]): t for t in table}
    assert set(by) == {(1, 768), (4096, 4096), (10_000_000, 5), (593, 37)}
    assert by[(1, 768)]["ratio"] == pytest.approx(2.0) and by[(1, 768)]["best_peer"] == "torch"
    # the invalid 1 µs torch record is not the best peer; the variant's 0.1 µs is not "normlab"
    assert by[(4096, 4096)]["ratio"] == pytest.approx(0.8)
    assert by[(4096, 4096)]["best_peer"] == "liger"
    assert by[(10_000_000, 5)]["ratio"] == pytest.approx(138 / 900)
    assert by[(593, 37)]["ratio"] == pytest.approx(1.0)
    assert viz.cliff_ratios(_cliff_records(), op="rms_norm", direction="bwd") == []
    with pytest.raises(ValueError, match="dtypes bf16, fp32"):
        fp32 = _rec("torch", 1, 768, 1.0, direction="fwd", dtype="fp32")
        viz.cliff_ratios([*_cliff_records(), fp32], op="rms_norm", direction="fwd")


def test_cliff_ratios_keep_a_shapes_latest_run():
    """A member re-measured in a later run shows that run's ratio alone, in any record order."""
    later = [_rec("normlab", 1, 768, 4.0, direction="fwd", commit="c2", date="2026-12-02T00:00Z"),
             _rec("torch", 1, 768, 2.0, direction="fwd", commit="c2", date="2026-12-02T00:00Z")]
    for records in (_cliff_records() + later, later + _cliff_records()):
        table = viz.cliff_ratios(records, op="rms_norm", direction="fwd")
        assert [t["ratio"] for t in table if (t["M"], t["N"]) == (1, 768)] == [2.0]
        assert len(table) == 4


def test_cliff_map_is_a_log_log_diverging_map_centred_at_one():
    fig = viz.cliff_map(_cliff_records(), op="rms_norm", direction="fwd")
    (trace,) = fig.data
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    assert trace.marker.cmid == 0.0 and trace.marker.cmin == -trace.marker.cmax
    pts = {(x, y): (c, d) for x, y, c, d in zip(trace.x, trace.y, trace.marker.color,
                                                trace.customdata, strict=True)}
    colour, data = pts[(768, 1)]
    assert colour == pytest.approx(1.0) and data[2] == "torch"  # log2(2×) = 1
    assert pts[(37, 593)][0] == 0.0  # parity is the centre of the scale
    assert pts[(5, 10_000_000)][0] == -math.log2(plots.CLIFF_RANGE)  # saturated, not off-scale
    assert "best peer" in trace.hovertemplate and "ratio" in trace.hovertemplate
    note = fig.layout.annotations[0].text
    assert note.startswith("normlab faster at 2 of 4 shapes; worst 2.00× at 1×768")
    assert "recorded: NVIDIA H200" in fig.layout.title.text and "commit c1" in fig.layout.title.text
    empty = viz.cliff_map(_cliff_records(), op="layer_norm", direction="fwd")
    assert "no shape has normlab" in empty.layout.annotations[0].text
    assert "no recorded GPU data" in viz.cliff_map([], op="rms_norm", direction="fwd",
                                                   source="recorded").layout.annotations[0].text


# ---- table -----------------------------------------------------------------------------------


def test_records_table_text_and_html(recorded):
    table = viz.records_table(viz.select(recorded, impl="quack"))
    text = str(table).splitlines()
    assert text[0].split() == ["op", "impl", "dtype", "dir", "M", "N", "device", "µs", "wall", "µs",
                               "GB/s", "%", "of", "copy"]  # all-empty strategy/layout dropped
    assert len(table) == 3 and len(text) == 5
    assert "24.2" in text[2] or "24.2" in "".join(text)
    assert "<table>" in table._repr_html_() and "<th>GB/s</th>" in table._repr_html_()
    assert str(viz.records_table([], empty="nothing yet")) == "nothing yet"
    assert "M" in viz.records_table(recorded, columns=["M"]).header


# ---- widgets (wiring only; no browser) -------------------------------------------------------

OPS = {"rms_norm": ["normlab", "torch", "quack"], "reverse_kl": ["normlab", "compile"]}


def _fake_sweep(calls):
    def sweep(op, impls, shapes, dtypes, directions, *, options=None, progress=None):
        calls.append({"op": op, "impls": impls, "shapes": shapes, "dtypes": dtypes,
                      "directions": directions, "options": options})
        out = []
        total = len(impls) * len(shapes)
        for impl in impls:
            for M, N in shapes:
                out.append(_rec(impl, M, N, 10.0 if impl == "normlab" else 20.0, op=op,
                                direction=directions[0], dtype=dtypes[0], mode="interpret",
                                card="cpu", roofline_gbps=None, datasheet_gbps=None,
                                frac_roofline=None))
                if progress:
                    progress(len(out) - 1, total, f"{impl} {M}x{N}")
        if progress:
            progress(total, total, "done")
        return out
    return sweep


def test_explorer_run_wires_controls_to_sweep_and_figures(recorded):
    from normlab.viz import widgets

    calls = []
    ex = widgets.Explorer(ops=OPS, recorded=recorded, sweep=_fake_sweep(calls), interpret=True)
    ex.impls.value = ("normlab", "quack")
    ex.direction.value = "bwd"
    ex.strategy.value = "persistent"
    ex.preset.value = "peer norm shapes (11)"
    figs = ex.run()
    call = calls[-1]
    assert call["op"] == "rms_norm" and call["impls"] == ["normlab", "quack"]
    assert call["options"] == {"strategy": ["persistent"]} and call["directions"] == ["bwd"]
    # interpreter: preset shapes capped, duplicates dropped
    assert all(M <= widgets.INTERPRET_MAX_ROWS and N <= widgets.INTERPRET_MAX_COLS
               for M, N in call["shapes"])
    assert len(set(call["shapes"])) == len(call["shapes"])
    assert ex.progress.value == ex.progress.max == 2 * len(call["shapes"])
    assert "live: this machine (cpu, interpret mode)" in figs[0].layout.title.text
    # recorded view beside it: the preset's recorded bwd shapes, titled as recorded
    rec_titles = [f.layout.title.text for f in figs[3:]]
    assert any("recorded: NVIDIA H200, 2026-11-29" in t for t in rec_titles)
    assert all(r["direction"] == "bwd" for r in ex.recorded_selection())
    # The figures are the Output widgets' state (plotly JSON), replaced on every run.
    for out, n_figs in ((ex.out_live, 3), (ex.out_recorded, len(figs) - 3)):
        assert len(out.outputs) == n_figs
        assert all("application/vnd.plotly.v1+json" in o["data"] for o in out.outputs)
    ex.run()
    assert len(ex.out_live.outputs) == 3


def test_explorer_without_recorded_data_says_so_and_changing_op_updates_impls():
    from normlab.viz import widgets

    ex = widgets.Explorer(ops=OPS, recorded=[], sweep=_fake_sweep([]), interpret=True)
    figs = ex.show_recorded()
    assert figs[0].layout.annotations[0].text.startswith("no recorded GPU data")
    ex.op.value = "reverse_kl"
    assert ex.impls.options == ("normlab", "compile")
    assert ex.impls.value == ("normlab", "compile")
    assert (ex.strategy.options == ("auto", "fused", "chunked", "split")
            and ex.direction.value == "fwd+bwd")
    calls = []
    ex._sweep = _fake_sweep(calls)
    ex.strategy.value = "split"
    ex.run()
    assert calls[-1]["options"] == {"form": ["split"]}
    ex.impls.value = ()
    assert ex.run() == [] and "pick at least one" in ex.status.value


def test_explorer_recorded_panel_adds_the_cliff_map_of_a_population(recorded):
    from normlab.viz import widgets

    population = [dict(r, shape_set="population", commit="c1", strategy=None) for r in recorded
                  if r["strategy"] != "atomic"]  # normlab's default and the peers
    ex = widgets.Explorer(ops=OPS, recorded=[*recorded, *population], sweep=_fake_sweep([]),
                          interpret=True)
    ex.direction.value = "bwd"
    figs = ex.show_recorded()
    titles = [f.layout.title.text for f in figs]
    assert len(figs) == 3 and titles[2].startswith("Cliff map: rms_norm bwd")
    # the benchmark figures leave the population out: three shapes, not six points per series
    assert all(len(t.x) <= 3 for t in figs[0].data)
    assert len(ex.out_recorded.outputs) == 3
    ex.direction.value = "fwd"  # nothing recorded: one figure that says so
    assert "no recorded run matches" in ex.show_recorded()[0].layout.annotations[0].text


def test_explorer_gpu_mode_keeps_full_shapes():
    from normlab.viz import widgets

    calls = []
    ex = widgets.Explorer(ops=OPS, recorded=[], sweep=_fake_sweep(calls), interpret=False)
    ex.preset.value = "vocabularies, 4096 tokens"
    assert ex.shapes() == widgets.PRESETS["vocabularies, 4096 tokens"]
    ex.preset.value = "custom (sliders)"
    ex.M.value, ex.N.value = 2048, 512
    assert ex.shapes() == [(2048, 512)]


def test_contention_explorer_redraws_on_slider_change(monkeypatch):
    from normlab.viz import widgets

    shown = []
    monkeypatch.setattr(widgets, "_show", lambda out, figs: shown.extend(figs))
    box = widgets.contention_explorer(n_sm=8)
    assert "M=32,768 rows" in shown[-1].layout.title.text
    m_slider = box.children[0].children[0].children[0]
    m_slider.value = 4096
    assert len(shown) == 2 and "M=4,096 rows" in shown[-1].layout.title.text
    # the planner's 4 programs per SM at 1024 columns, each with its own partial row
    title = shown[-1].layout.title.text
    assert "8 SMs × 4 persistent programs per SM" in title and "paired" not in title
    pps = box.children[0].children[0].children[2]
    pps.value = 2
    assert "8 SMs × 2 persistent programs per SM" in shown[-1].layout.title.text
    assert "paired" not in shown[-1].layout.title.text


# ---- notebook check lines --------------------------------------------------------------------


def test_verdict_uses_the_reference_tolerance_scaled_by_the_reduction_length():
    import torch

    from normlab import ref
    from normlab.viz import checks

    atol, _ = ref.tolerance(torch.bfloat16, reduce_len=100)
    assert atol == pytest.approx(10 * ref.TOLERANCES[torch.bfloat16][0])
    zero = torch.zeros(3)
    near = torch.tensor([0.0, 0.95 * atol, 0.0])
    far = torch.tensor([0.0, 1.05 * atol, 0.0])
    assert "OK" in checks.verdict("dw", near, zero, dtype=torch.bfloat16, reduce_len=100)
    assert "FAIL" in checks.verdict("dw", far, zero, dtype=torch.bfloat16, reduce_len=100)
    assert "FAIL" in checks.verdict("dw", near, zero, dtype=torch.bfloat16)  # no reduction


def test_verdict_ok_fail_and_nan_placement():
    import torch

    ref = torch.randn(61, 1000, dtype=torch.float64)
    bf = ref.to(torch.bfloat16)
    assert viz.verdict("y", bf, ref).startswith("y: OK (max |err| within atol 0.016")
    bad = bf.clone()
    bad[3, 7] += 1.0
    assert viz.verdict("y", bad, ref).startswith("y: FAIL (exceeds")
    # dγ over 4096 rows: atol grows by sqrt(4096) = 64
    assert "atol 0.0013" in viz.verdict("dγ", ref.float(), ref, reduce_len=4096)
    nan_ref = ref.clone()
    nan_ref[0, 0] = float("nan")
    assert "FAIL" in viz.verdict("y", ref, nan_ref)  # a number where NaN belongs
    assert "OK" in viz.verdict("y", nan_ref, nan_ref)
    with pytest.raises(ValueError, match="shape mismatch"):
        viz.verdict("y", ref[:2], ref)


def test_explorer_reads_ops_and_impls_from_the_bench_registry():
    from normlab.bench import REGISTRY
    from normlab.viz import widgets

    ex = widgets.Explorer(recorded=[], interpret=True)
    assert "copy" not in ex.op.options and "rms_norm" in ex.op.options
    assert set(ex.impls.options) == set(REGISTRY["rms_norm"])
    assert ex.impls.value[0] == "normlab"


def test_best_peers_skips_ours_invalid_and_nonpositive_times():
    base = {"op": "rms_norm", "M": 8, "N": 16, "dtype": "bf16", "direction": "fwd"}
    recs = [
        {**base, "impl": "normlab", "device_us": 1.0},
        {**base, "impl": "normlab[persistent]", "device_us": 0.5},
        {**base, "impl": "torch", "device_us": 3.0},
        {**base, "impl": "compile", "device_us": 2.0},
        {**base, "impl": "eager", "device_us": 0.1, "valid": False},
        {**base, "impl": "liger", "device_us": 0.0},
        {**base, "direction": "bwd", "impl": "torch", "device_us": 0.2},
    ]
    best = plots.best_peers(recs)
    assert set(best) == {plots.peer_key(base), plots.peer_key({**base, "direction": "bwd"})}
    assert best[plots.peer_key(base)]["impl"] == "compile"
    speedups = {t["impl"]: t["speedup"] for t in plots.speedup_table(recs)}
    assert speedups == {"normlab": 2.0, "normlab[persistent]": 4.0}


# ---- what an option costs ------------------------------------------------------------------------


def _option_rows():
    def row(variant, impl, us, *, base=None, op="reverse_kl", target=None, M=4, N=1000):
        return {"variant": variant, "base": base, "op": op, "impl": impl, "M": M, "N": N,
                "dtype": "bf16", "target_dtype": target, "device_us": us, "roofline_gbps": 100.0}

    return [row("reverse_kl", "normlab", 100.0), row("jsd", "normlab", 200.0, base="reverse_kl"),
            row("jsd", "liger", 1000.0, base="reverse_kl"),
            row("reverse_kl fp32 teacher", "normlab", 140.0, base="reverse_kl", target="fp32"),
            row("cross_entropy softcap", "normlab", 60.0, base="cross_entropy", op="cross_entropy"),
            row("add_rms_norm", "normlab", 75.0, op="add_rms_norm", M=1000, N=1000),
            row("rms_norm on a separate add", "normlab", 130.0, op="add_rms_norm", M=1000, N=1000),
            row("liger fused add", "liger", 99.0, op="add_rms_norm", M=1000, N=1000)]


def test_option_cost_table_divides_by_the_base_op_and_its_bytes():
    """Each option over normlab's base op (Liger's too, over the same base), and the bytes
    model's own ratio: 8/6 for an fp32 teacher, 1 for JSD; an option whose base op was not
    measured is left out."""
    table = {t["variant"]: t for t in viz.option_cost_table(_option_rows())}
    assert set(table) == {"jsd", "reverse_kl fp32 teacher"}
    assert table["jsd"]["ratio"] == 2.0 and table["jsd"]["liger_ratio"] == 10.0
    assert table["jsd"]["bytes_ratio"] == 1.0
    teacher = table["reverse_kl fp32 teacher"]
    assert teacher["ratio"] == pytest.approx(1.4) and teacher["liger_ratio"] is None
    assert teacher["bytes_ratio"] == pytest.approx(8 / 6)


def _loop_rows():
    def row(variant, instructions, mufu, poly=False):
        return {"variant": variant, "poly_exp2": poly, "instructions": instructions,
                "mufu": mufu, "commit": "s"}

    return [row("cross_entropy", 16.0, 2.0), row("cross_entropy softcap", 20.0, 4.0),
            row("cross_entropy softcap", 28.0, 3.0, poly=True),
            row("cross_entropy z_loss", 30.0, 2.0, poly=True),  # not a model-only variant
            row("cross_entropy", 99.0, 9.0),  # a second row of a variant: the first is taken
            row("reverse_kl", 35.0, 3.0)]  # no label CE measurement: left out


def test_option_bounds_put_each_pipe_beside_the_measured_time():
    """Label CE's rows: bytes at the run's copy speed, instructions at 128 a clock an SM and MUFU
    ops at 16, over M N logits on the model's SMs and clock; a switch's counts only for the
    model-only variants, with no measured time."""
    model = {"sm_count": 2, "clock_ghz": 1.0}
    rows = [{"variant": v, "op": "cross_entropy", "impl": "normlab", "M": 4, "N": 1000,
             "dtype": "bf16", "device_us": us, "roofline_gbps": 100.0}
            for v, us in (("cross_entropy", 50.0), ("cross_entropy softcap", 60.0))]
    rows.append({**rows[0], "impl": "liger", "device_us": 1.0})
    table = viz.option_bound_table(rows, _loop_rows(), model)
    got = {(t["variant"], t["poly_exp2"]): t for t in table}
    assert set(got) == {("cross_entropy", False), ("cross_entropy softcap", False),
                        ("cross_entropy softcap", True)}
    base, capped, poly = (got[("cross_entropy", False)], got[("cross_entropy softcap", False)],
                          got[("cross_entropy softcap", True)])  # fmt: skip
    # 2 units of 4 x 1000 x 2 bytes = 16000 B at 100 GB/s = 0.16 µs
    assert base["bytes_us"] == pytest.approx(0.16) and base["device_us"] == 50.0
    # 16 instructions x 4000 logits / (128 x 2 SMs x 1 GHz) = 0.25 µs; 2 MUFU: 0.25 µs
    assert base["issue_us"] == pytest.approx(0.25) and base["mufu_us"] == pytest.approx(0.25)
    assert capped["mufu_us"] == pytest.approx(0.5) and capped["device_us"] == 60.0
    assert poly["device_us"] is None and poly["mufu_us"] == pytest.approx(0.375)
    fig = viz.option_bounds({"card": "Synthetic", "date": "2031-01-01", "commit": "c"}, rows,
                            {"model": model}, _loop_rows())  # fmt: skip
    measured, bytes_, issue, mufu = fig.data
    assert list(measured.x) == [50.0, 60.0] and len(mufu.x) == 3
    assert list(bytes_.x) == [pytest.approx(0.16)] * 3 and issue.x[0] == pytest.approx(0.25)
    assert "exp on the FMA pipe (model only)" in mufu.y[-1]
    assert "2 SMs at 1.0 GHz" in fig.layout.title.text
    empty = viz.option_bounds({}, [], {"model": model}, [])
    assert "no label cross-entropy" in empty.layout.title.text


def test_option_figures_name_the_run_and_draw_the_models():
    meta = {"card": "Synthetic", "date": "2031-01-01", "commit": "c"}
    fig = viz.option_costs(meta, _option_rows())
    assert "recorded: Synthetic, 2031-01-01, commit c" in fig.layout.title.text
    normlab, liger, model, target = fig.data
    assert list(normlab.y) == [2.0, pytest.approx(1.4)] and list(liger.y) == [10.0]
    assert list(model.y) == [1.0, pytest.approx(8 / 6)] and set(target.y) == {1.05}
    add = viz.fused_add_costs(meta, _option_rows())
    bars, line = add.data
    assert list(bars.y) == [130.0, 75.0, 99.0]
    # 3 units of 1000 x 1000 x 2 bytes not moved = 6 MB at 100 GB/s = 60 µs: 130 - 60
    assert list(line.y) == [pytest.approx(70.0)] * 2 and "6 MB" in line.name
    assert "no loss-option" in viz.option_costs(meta, []).layout.title.text
    assert "no fused-add" in viz.fused_add_costs(meta, _option_rows()[:5]).layout.title.text
