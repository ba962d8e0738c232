"""Pure figure and table functions: benchmark records in, ``plotly.graph_objects.Figure`` out.

A record is one measurement as ``normlab.bench`` writes it (a dict, or any object with those
attributes): op, impl, strategy, layout, M, N, dtype, direction, device_us, wall_us, bytes,
gbps, roofline_gbps (measured copy bandwidth), frac_roofline, datasheet_gbps, kernels
(kernel name -> µs), card, mode, date, ... Nothing here measures, prints or touches widgets,
so every function is testable without a browser.

Every title says whether its numbers are **live** (measured on this machine, in this session)
or **recorded** (shipped in ``normlab/data/``, measured on the card named in the title).
"""

from __future__ import annotations

import dataclasses
import functools
import html
import math
from collections.abc import Iterable, Mapping

import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from normlab.bench.population import OPTION_COST_TARGET
from normlab.norms import config as norm_config

SOURCES = ("live", "recorded")
NO_RECORDED_DATA = (
    "no recorded GPU data in this package yet (normlab/data/*.jsonl is empty); "
    "run on a GPU for live numbers"
)
# Peer implementations the speed-up chart compares against: everything not written by normlab.
OURS_PREFIX = "normlab"
# Show at most this many programs/workspace rows in the contention picture; the rest are counted.
MAX_CARTS_SHOWN = 24
MAX_DOCKS_SHOWN = 10
STRATEGIES = norm_config.NORM_BWD_STRATEGIES
_COLORS = {"atomic": "#d62728", "two_stage": "#1f77b4", "persistent": "#2ca02c"}
# 24 distinct colours (plotly's Dark24): a figure of up to 24 series repeats none.
PALETTE = tuple(qualitative.Dark24)
# Short kernel labels for the per-kernel breakdown, first match wins (full names go in the hover).
KERNEL_KINDS = (
    ("memset", ("Memset",)),
    ("fill", ("FillFunctor",)),
    ("copy", ("copy_kernel", "Memcpy")),
    ("reduce", ("reduce", "GammaBetaBackward")),  # normlab's and torch's dγ/dβ reductions
)
_KIND_COLORS = {"main": "#1f77b4", "reduce": "#ff7f0e", "memset": "#7f7f7f", "fill": "#c7c7c7",
                "copy": "#9467bd"}
# Shape families of the named shape sets (normlab.bench.SHAPES), in plotting order.
SHAPE_SET_FAMILIES = {"peers": "peer shapes", "narrow": "narrow rows (7.9M)",
                      "losses": "vocabularies"}


# ---- records -----------------------------------------------------------------------------------


def as_dicts(records: Iterable) -> list[dict]:
    """Records as plain dicts (accepts dicts, dataclasses or attribute objects)."""
    if records is None:
        return []
    if isinstance(records, Mapping):
        raise TypeError("expected a list of records, got a single dict; wrap it in a list")
    rows = []
    for r in records:
        if isinstance(r, Mapping):
            rows.append(dict(r))
        elif dataclasses.is_dataclass(r) and not isinstance(r, type):
            rows.append(dataclasses.asdict(r))
        elif hasattr(r, "__dict__"):
            rows.append(dict(vars(r)))
        else:
            raise TypeError("record must be a dict or an object with attributes, "
                            f"got {type(r).__name__}")
    return rows


def select(records: Iterable, **criteria) -> list[dict]:
    """Records whose fields match ``criteria``; a list/tuple/set value means "any of these"."""
    out = []
    for r in as_dicts(records):
        ok = True
        for key, want in criteria.items():
            have = r.get(key)
            if isinstance(want, (list, tuple, set, frozenset)):
                ok = have in want
            else:
                ok = have == want
            if not ok:
                break
        if ok:
            out.append(r)
    return out


def one(records: Iterable, **criteria) -> dict:
    """The single record matching ``criteria`` (as :func:`select`); none or several is a
    ValueError naming the criteria, so a quoted number always comes from exactly one record."""
    found = select(records, **criteria)
    if len(found) != 1:
        shown = ", ".join(f"{k}={v!r}" for k, v in criteria.items())
        raise ValueError(f"{len(found)} records match {shown}; expected exactly one")
    return found[0]


def device_us_text(rec: Mapping) -> str:
    """A record's device time as every notebook prints it (one decimal, µs)."""
    return f"{_num(rec.get('device_us')):.1f} µs"


def quote(records: Iterable, **criteria) -> str:
    """One record's device time with where it comes from, e.g. "258.5 µs (normlab, layer_norm
    fwd 32768×8192 bf16; NVIDIA H200, 2026-11-30, commit 5d1df6e)"."""
    r = one(records, **criteria)
    return (f"{device_us_text(r)} ({series_label(r)}, {r.get('op')} {r.get('direction')} "
            f"{shape_label(r)} {r.get('dtype')}; {r.get('card')}, {str(r.get('date'))[:10]}, "
            f"commit {r.get('commit')})")


def recorded_summary(records: Iterable) -> str:
    """One deterministic line about the records loaded: how many, on which card(s), how many in
    a shape population, and per op (a notebook checks it, so a missing data file fails CI)."""
    rows = as_dicts(records)
    if not rows:
        return NO_RECORDED_DATA
    cards = ", ".join(sorted({str(r.get("card")) for r in rows}))
    ops: dict[str, int] = {}
    for r in rows:
        ops[str(r.get("op"))] = ops.get(str(r.get("op")), 0) + 1
    population = sum(bool(r.get("shape_set")) for r in rows)
    return (f"{len(rows)} recorded records ({cards}), {population} of them in a shape population; "
            + ", ".join(f"{op} {n}" for op, n in sorted(ops.items())))


def with_source(records: Iterable, source: str) -> list[dict]:
    """Copies of the records tagged ``source`` ("live" or "recorded") for every later plot."""
    if source not in SOURCES:
        raise ValueError(f"source={source!r}: expected one of {SOURCES}")
    return [{**r, "source": source} for r in as_dicts(records)]


def series_label(rec: Mapping) -> str:
    """Trace name of a record: impl, then strategy and layout when they say something."""
    parts = [str(rec.get("impl") or "?")]
    for key in ("strategy", "layout"):
        value = rec.get(key)
        if value not in (None, "", "-", "auto", "default"):
            parts.append(str(value))
    if rec.get("block_cap") is not None:
        parts.append(f"cap={rec['block_cap']}")
    return " · ".join(parts)


def shape_label(rec: Mapping) -> str:
    return f"{rec.get('M')}×{rec.get('N')}"


@functools.cache
def _population_families() -> dict[tuple[str, int, int], str]:
    from normlab.bench.shapes import POPULATIONS

    return {(name, c.M, c.N): c.family for name, make in POPULATIONS.items() for c in make()}


def shape_family(rec: Mapping) -> str:
    """The family a record's shape belongs to, so that plots never join two families with a line:
    its ``family`` field, else the population member's rule ("population: random"), else the
    named shape set of ``normlab.bench.SHAPES`` it is in ("peer shapes"), else "other shapes"."""
    if rec.get("family"):
        return str(rec["family"])
    M, N, shape_set = rec.get("M"), rec.get("N"), rec.get("shape_set")
    if shape_set:
        family = _population_families().get((shape_set, M, N))
        return f"{shape_set}: {family}" if family else str(shape_set)
    from normlab.bench.sweep import SHAPES

    for name, label in SHAPE_SET_FAMILIES.items():
        if (M, N) in SHAPES[name]:
            return label
    return "other shapes"


def kernel_kind(name: str) -> str:
    """Short label of a profiler kernel name: memset, fill, copy, reduce, or main."""
    for kind, needles in KERNEL_KINDS:
        if any(n in name for n in needles):
            return kind
    return "main"


def _num(value) -> float:
    """A float, NaN for missing values (plotly leaves a gap, hover shows NaN rather than lying)."""
    try:
        return float(value) if value is not None else math.nan
    except (TypeError, ValueError):
        return math.nan


def _one(rows: list[dict], key: str, what: str):
    """The single value of ``key`` across rows (None if absent); several values is an error."""
    values = sorted({str(r[key]) for r in rows if r.get(key) not in (None, "")})
    if len(values) > 1:
        raise ValueError(
            f"records mix {len(values)} {what}s ({', '.join(values)}); plot one at a time, "
            f"e.g. normlab.viz.select(records, {key}={values[0]!r})"
        )
    if not values:
        return None
    return next(r[key] for r in rows if r.get(key) not in (None, "") and str(r[key]) == values[0])


def _first_number(rows: list[dict], key: str) -> float | None:
    for r in rows:
        v = _num(r.get(key))
        if not math.isnan(v) and v > 0:
            return v
    return None


def source_of(records: Iterable, source: str | None = None) -> str:
    """"live" or "recorded": the explicit ``source``, else the records' own ``source`` field,
    else live for interpreter runs (never shipped), recorded otherwise. Pass ``source="live"``
    for a GPU run made in this session."""
    if source is not None:
        if source not in SOURCES:
            raise ValueError(f"source={source!r}: expected one of {SOURCES}")
        return source
    rows = as_dicts(records)
    tagged = {r.get("source") for r in rows if r.get("source") in SOURCES}
    if len(tagged) == 1:
        return tagged.pop()
    if any(r.get("mode") == "interpret" for r in rows):
        return "live"
    return "recorded"


def _commits(rows: list[dict]) -> str:
    """"commit abc1234" or "commits a, b, c" (at most 4 named), "" when the records carry none."""
    commits = sorted({str(r["commit"]) for r in rows if r.get("commit")})
    if not commits:
        return ""
    if len(commits) == 1:
        return f", commit {commits[0]}"
    shown = ", ".join(commits[:4]) + (f" +{len(commits) - 4} more" if len(commits) > 4 else "")
    return f", commits {shown}"


def source_text(records: Iterable, source: str | None = None) -> str:
    """One line naming where the numbers come from: live or recorded, card, date and commit, e.g.
    "recorded: NVIDIA H200, 2026-11-29, commit 5d1df6e"."""
    rows = as_dicts(records)
    src = source_of(rows, source)
    card = _one(rows, "card", "card") or "unknown card"
    dates = sorted({str(r["date"])[:10] for r in rows if r.get("date")})
    when = dates[0] if len(dates) == 1 else (f"{dates[0]}…{dates[-1]}" if dates else "undated")
    modes = sorted({str(r["mode"]) for r in rows if r.get("mode")})
    if src == "recorded":
        return f"recorded: {card}, {when}{_commits(rows)}"
    text = (f"live: this machine ({card}, {'/'.join(modes) or 'unknown'} mode), "
            f"{when}{_commits(rows)}")
    if "interpret" in modes:
        text += " (interpreter timings, not GPU bandwidth)"
    return text


def _valid(records: Iterable) -> tuple[list[dict], int]:
    """Records bench did not mark invalid (``valid=False``: a time or GB/s that cannot be real),
    and how many were left out."""
    rows = as_dicts(records)
    kept = [r for r in rows if r.get("valid", True) is not False]
    return kept, len(rows) - len(kept)


def _title(what: str, rows: list[dict], source: str | None, title: str | None,
           dropped: int = 0) -> str:
    head = title or what
    sub = source_text(rows, source)
    if dropped:
        sub += f"; {dropped} record(s) marked invalid by bench left out"
    return f"{head}<br><sup>{html.escape(sub)}</sup>"


def empty_figure(message: str, title: str = "") -> go.Figure:
    """A figure that says in words why there is nothing to plot."""
    fig = go.Figure()
    fig.add_annotation(
        text=html.escape(message), x=0.5, y=0.5, xref="paper", yref="paper",
        showarrow=False, font={"size": 14},
    )
    fig.update_layout(
        title=f"{title}<br><sup>{html.escape(message)}</sup>" if title else message,
        xaxis={"visible": False}, yaxis={"visible": False},
        height=260, template="plotly_white",
    )
    return fig


def _empty_message(source: str | None, what: str) -> str:
    if source == "recorded":
        return NO_RECORDED_DATA
    return f"no records to plot ({what})"


def _shape_order(rows: list[dict]) -> list[str]:
    """Shape labels by family (first seen first), then by size (M·N, then M) within one."""
    families = list(dict.fromkeys(shape_family(r) for r in rows))
    keyed = {}
    for r in rows:
        keyed.setdefault(shape_label(r), (families.index(shape_family(r)),
                                          int(r.get("M") or 0) * int(r.get("N") or 0),
                                          int(r.get("M") or 0)))
    return sorted(keyed, key=keyed.get)


def _family_dividers(fig: go.Figure, rows: list[dict], order: list[str]) -> None:
    """A dotted line between shape families on a category x axis, each family named above."""
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for r in rows:
        i, fam = order.index(shape_label(r)), shape_family(r)
        first[fam], last[fam] = min(first.get(fam, i), i), max(last.get(fam, i), i)
    if len(first) < 2:
        return
    for fam in first:
        if first[fam] > 0:
            fig.add_vline(x=first[fam] - 0.5, line_dash="dot", line_color="#999")
        fig.add_annotation(x=(first[fam] + last[fam]) / 2, y=1.0, yref="paper", yanchor="bottom",
                           text=html.escape(fam), showarrow=False,
                           font={"size": 11, "color": "#555"})


def _layout(fig: go.Figure, **kw) -> go.Figure:
    """The shared look: white template, the 24-colour palette, room for a two-line title and
    the family names above the plot."""
    fig.update_layout(template="plotly_white", colorway=list(PALETTE),
                      margin={"l": 90, "t": 100}, **kw)
    return fig


def _color_map(names: Iterable[str]) -> dict[str, str]:
    return {n: PALETTE[i % len(PALETTE)] for i, n in enumerate(dict.fromkeys(names))}


def _series(rows: list[dict]) -> dict[str, list[dict]]:
    """Records grouped by trace name; op/dtype/direction are added to the name when they vary."""
    varying = [k for k in ("op", "dtype", "direction") if len({r.get(k) for r in rows}) > 1]
    groups: dict[str, list[dict]] = {}
    for r in rows:
        name = series_label(r)
        if varying:
            name += " (" + ", ".join(str(r.get(k)) for k in varying) + ")"
        groups.setdefault(name, []).append(r)
    return groups


def _pct_of_copy(rec: Mapping, copy_gbps: float | None) -> float:
    frac = _num(rec.get("frac_roofline"))
    if math.isnan(frac) and copy_gbps:
        frac = _num(rec.get("gbps")) / copy_gbps
    return 100.0 * frac


def roofline_lines(rows: list[dict], copy_gbps=None, datasheet_gbps=None) -> dict[str, float]:
    """The horizontal ceilings to draw: measured copy bandwidth and datasheet peak, in GB/s."""
    lines = {}
    copy = copy_gbps if copy_gbps is not None else _first_number(rows, "roofline_gbps")
    sheet = datasheet_gbps if datasheet_gbps is not None else _first_number(rows, "datasheet_gbps")
    if copy:
        lines["measured copy"] = float(copy)
    if sheet:
        lines["datasheet"] = float(sheet)
    return lines


# ---- GB/s against shape ------------------------------------------------------------------------


def gbps_vs_shape(
    records: Iterable,
    *,
    source: str | None = None,
    copy_gbps: float | None = None,
    datasheet_gbps: float | None = None,
    title: str | None = None,
) -> go.Figure:
    """Effective bandwidth per shape, one trace per implementation/strategy, under the ceilings.

    The dashed lines are the measured device-to-device copy bandwidth (the practical roofline)
    and the datasheet peak; hover gives device and wall µs, GB/s and the percentage of copy.
    """
    rows, dropped = _valid(records)
    if not rows:
        return empty_figure(_empty_message(source, "GB/s vs shape"), title or "GB/s vs shape")
    lines = roofline_lines(rows, copy_gbps, datasheet_gbps)
    copy = lines.get("measured copy")
    order = _shape_order(rows)
    series = _series(rows)
    colors = _color_map(series)
    fig = go.Figure()
    for name, group in series.items():
        group = sorted(group, key=lambda r: order.index(shape_label(r)))
        families = list(dict.fromkeys(shape_family(r) for r in group))
        for k, fam in enumerate(families):  # one line per family: families are not joined
            part = [r for r in group if shape_family(r) == fam]
            fig.add_trace(
                go.Scatter(
                    x=[shape_label(r) for r in part],
                    y=[_num(r.get("gbps")) for r in part],
                    mode="lines+markers",
                    name=name, legendgroup=name, showlegend=k == 0,
                    line={"color": colors[name]}, marker={"color": colors[name]},
                    customdata=[
                        [_num(r.get("device_us")), _num(r.get("wall_us")), _pct_of_copy(r, copy),
                         _num(r.get("bytes")) / 1e6, str(r.get("dtype")), str(r.get("direction")),
                         fam]
                        for r in part
                    ],
                    hovertemplate=(
                        "<b>%{fullData.name}</b><br>M×N = %{x} (%{customdata[4]}, "
                        "%{customdata[5]}; %{customdata[6]})"
                        "<br>device %{customdata[0]:.2f} µs · wall %{customdata[1]:.2f} µs"
                        "<br>%{y:.1f} GB/s = %{customdata[2]:.1f}% of copy"
                        "<br>%{customdata[3]:.2f} MB moved (bytes model)<extra></extra>"
                    ),
                )
            )
    for label, y in lines.items():
        fig.add_hline(
            y=y, line_dash="dash" if label == "measured copy" else "dot",
            line_color="black" if label == "measured copy" else "gray",
            annotation_text=f"{label} {y:,.0f} GB/s", annotation_position="top left",
        )
    _family_dividers(fig, rows, order)
    _layout(
        fig,
        title=_title("Effective bandwidth vs shape", rows, source, title, dropped),
        xaxis_title="shape M×N (rows × columns)",
        yaxis_title="GB/s (bytes ÷ device time)",
        xaxis={"type": "category", "categoryorder": "array", "categoryarray": order},
        yaxis={"rangemode": "tozero"},
        legend_title_text="implementation",
    )
    return fig


# ---- roofline: fraction of the measured copy bandwidth -------------------------------------------


def roofline_bars(
    records: Iterable,
    *,
    source: str | None = None,
    copy_gbps: float | None = None,
    datasheet_gbps: float | None = None,
    title: str | None = None,
) -> go.Figure:
    """How close each run gets to the memory roofline: % of measured copy bandwidth, as bars.

    Memory-bound ops sit far left of any compute ridge, so the roofline reduces to one ceiling:
    100% is the card's measured copy bandwidth; the dotted line marks the datasheet peak.
    """
    rows, dropped = _valid(records)
    if not rows:
        return empty_figure(_empty_message(source, "roofline"), title or "Fraction of roofline")
    lines = roofline_lines(rows, copy_gbps, datasheet_gbps)
    copy = lines.get("measured copy")
    order = _shape_order(rows)
    fig = go.Figure()
    for name, group in _series(rows).items():
        group = sorted(group, key=lambda r: order.index(shape_label(r)))
        fig.add_trace(
            go.Bar(
                x=[shape_label(r) for r in group],
                y=[_pct_of_copy(r, copy) for r in group],
                name=name,
                customdata=[[_num(r.get("gbps")), _num(r.get("device_us"))] for r in group],
                hovertemplate=(
                    "<b>%{fullData.name}</b><br>M×N = %{x}<br>%{y:.1f}% of copy"
                    "<br>%{customdata[0]:.1f} GB/s · device %{customdata[1]:.2f} µs<extra></extra>"
                ),
            )
        )
    if copy:
        fig.add_hline(y=100.0, line_dash="dash", line_color="black",
                      annotation_text=f"measured copy {copy:,.0f} GB/s = 100%",
                      annotation_position="top left")
        if "datasheet" in lines:
            pct = 100.0 * lines["datasheet"] / copy
            fig.add_hline(y=pct, line_dash="dot", line_color="gray",
                          annotation_text=f"datasheet {lines['datasheet']:,.0f} GB/s = {pct:.0f}%",
                          annotation_position="top right")
    _family_dividers(fig, rows, order)
    _layout(
        fig,
        title=_title("Roofline: achieved fraction of measured copy bandwidth", rows, source, title,
                     dropped),
        barmode="group",
        xaxis_title="shape M×N (rows × columns)",
        yaxis_title="% of copy bandwidth",
        xaxis={"type": "category", "categoryorder": "array", "categoryarray": order},
        legend_title_text="implementation",
    )
    return fig


# ---- per-kernel breakdown ----------------------------------------------------------------------


def kernel_breakdown(records: Iterable, *, source: str | None = None,
                     title: str | None = None) -> go.Figure:
    """Stacked device time per kernel (e.g. main dx kernel + dγ reduce kernel) per run."""
    valid, dropped = _valid(records)
    rows = [r for r in valid if r.get("kernels")]
    if not rows:
        msg = _empty_message(source, "per-kernel breakdown")
        if valid and source != "recorded":
            msg = "these records carry no per-kernel times (the interpreter has no profiler)"
        return empty_figure(msg, title or "Per-kernel device time")
    order = _shape_order(rows)
    rows = sorted(rows, key=lambda r: (order.index(shape_label(r)), series_label(r)))
    multi_dir = len({r.get("direction") for r in rows}) > 1
    xs = [f"{shape_label(r)} · {series_label(r)}"
          + (f" ({r.get('direction')})" if multi_dir else "")
          for r in rows]
    # Kernels grouped under short labels (main / reduce / memset / fill / copy); the full
    # profiler names, each with its µs, are in the hover.
    kinds: list[str] = []
    per_run: list[dict[str, list[tuple[str, float]]]] = []
    for r in rows:
        by_kind: dict[str, list[tuple[str, float]]] = {}
        for k, us in r["kernels"].items():
            by_kind.setdefault(kernel_kind(k), []).append((k, _num(us)))
        per_run.append(by_kind)
        kinds += [k for k in by_kind if k not in kinds]
    kinds.sort(key=lambda k: list(_KIND_COLORS).index(k) if k in _KIND_COLORS else 99)
    fig = go.Figure()
    for kind in kinds:
        us = [sum(u for _, u in run.get(kind, ())) for run in per_run]
        totals = [sum(_num(v) for v in r["kernels"].values()) for r in rows]
        names = ["<br>".join(f"{html.escape(_short(n))}: {u:.2f} µs" for n, u in run.get(kind, ()))
                 or "(none)" for run in per_run]
        fig.add_trace(
            go.Bar(
                x=xs, y=us, name=kind, marker_color=_KIND_COLORS.get(kind),
                customdata=[[100.0 * u / t if t else 0.0, n]
                            for u, t, n in zip(us, totals, names, strict=True)],
                hovertemplate=(f"<b>{kind}</b><br>%{{x}}<br>%{{y:.2f}} µs "
                               "(%{customdata[0]:.0f}% of device time)<br>%{customdata[1]}"
                               "<extra></extra>"),
            )
        )
    _layout(
        fig,
        title=_title("Per-kernel device time", rows, source, title, dropped),
        barmode="stack",
        xaxis_title="shape · implementation",
        yaxis_title="device time (µs)",
        legend_title_text="kernel",
    )
    return fig


def _short(kernel_name: str, limit: int = 90) -> str:
    """A C++ kernel signature cut to ``limit`` characters (hover text stays one screen wide)."""
    return kernel_name if len(kernel_name) <= limit else kernel_name[:limit - 1] + "…"


# ---- speed-up against the best peer ------------------------------------------------------------


def is_ours(rec: Mapping) -> bool:
    """A normlab run (any strategy/layout/form), as opposed to a peer."""
    return str(rec.get("impl", "")).startswith(OURS_PREFIX)


def peer_key(rec: Mapping) -> tuple:
    """What a run is compared on: the same op, shape, dtype and direction."""
    return (rec.get("op"), rec.get("M"), rec.get("N"), rec.get("dtype"), rec.get("direction"))


def best_peers(records: Iterable) -> dict[tuple, dict]:
    """The fastest valid peer run (positive device time) per ``peer_key``."""
    rows, _ = _valid(records)
    best: dict[tuple, dict] = {}
    for r in rows:
        if is_ours(r) or not _num(r.get("device_us")) > 0:
            continue
        k = peer_key(r)
        if k not in best or _num(r["device_us"]) < _num(best[k]["device_us"]):
            best[k] = r
    return best


def speedup_table(records: Iterable) -> list[dict]:
    """For every run of ours: the best (fastest device time) peer at the same op/shape/dtype/dir.

    ``speedup`` > 1 means ours is faster. Shapes without a peer measurement are left out.
    """
    rows, _ = _valid(records)
    best = best_peers(rows)
    out = []
    for r in rows:
        if not is_ours(r) or peer_key(r) not in best or not _num(r.get("device_us")) > 0:
            continue
        peer = best[peer_key(r)]
        out.append({
            "op": r.get("op"), "M": r.get("M"), "N": r.get("N"), "dtype": r.get("dtype"),
            "direction": r.get("direction"), "impl": series_label(r),
            "device_us": _num(r["device_us"]), "best_peer": series_label(peer),
            "best_peer_us": _num(peer["device_us"]),
            "speedup": _num(peer["device_us"]) / _num(r["device_us"]),
            "shape_set": r.get("shape_set"), "family": shape_family(r),
        })
    return out


def speedup_vs_best_peer(
    records: Iterable,
    *,
    source: str | None = None,
    title: str | None = None,
) -> go.Figure:
    """Speed-up of each of our implementations over the fastest peer at each shape (1× = parity)."""
    rows, dropped = _valid(records)
    table = speedup_table(rows)
    if not table:
        msg = _empty_message(source, "speed-up") if not rows else (
            "no shape has both a normlab run and a peer run to compare")
        return empty_figure(msg, title or "Speed-up vs best peer")
    order = _shape_order(table)
    fig = go.Figure()
    groups: dict[str, list[dict]] = {}
    for t in table:
        groups.setdefault(t["impl"], []).append(t)
    for name, group in groups.items():
        group = sorted(group, key=lambda t: order.index(shape_label(t)))
        fig.add_trace(
            go.Bar(
                x=[shape_label(t) for t in group], y=[t["speedup"] for t in group], name=name,
                customdata=[[t["device_us"], t["best_peer"], t["best_peer_us"]] for t in group],
                hovertemplate=(
                    "<b>%{fullData.name}</b><br>M×N = %{x}<br>%{customdata[0]:.2f} µs vs best peer "
                    "%{customdata[1]} %{customdata[2]:.2f} µs<br>speed-up %{y:.2f}×<extra></extra>"
                ),
            )
        )
    fig.add_hline(y=1.0, line_dash="dash", line_color="black",
                  annotation_text="parity with the best peer", annotation_position="top left")
    _family_dividers(fig, table, order)
    _layout(
        fig,
        title=_title("Speed-up vs the best peer (device time)", rows, source, title, dropped),
        barmode="group",
        xaxis_title="shape M×N (rows × columns)",
        yaxis_title="speed-up (best peer µs ÷ our µs, ×)",
        xaxis={"type": "category", "categoryorder": "array", "categoryarray": order},
        legend_title_text="implementation",
    )
    return fig


# ---- the cliff map: normlab ÷ best peer over (M, N) -----------------------------------------


def _is_default(rec: Mapping, impl: str) -> bool:
    """``impl``'s default configuration: no strategy, layout or cap chosen."""
    return (rec.get("impl") == impl and rec.get("strategy") in (None, "", "auto")
            and rec.get("layout") in (None, "", "auto") and rec.get("block_cap") is None)


def cliff_ratios(records: Iterable, *, op: str, direction: str, dtype: str | None = None,
                 impl: str = "normlab") -> list[dict]:
    """For every shape where ``impl``'s default and at least one peer were measured in the same
    run (same op, direction, dtype, shape and commit): ``ratio`` = ``impl`` µs ÷ the fastest
    peer's µs (below 1 ``impl`` is faster), with the peer's name; a shape measured in several
    runs keeps the latest-dated one. Invalid records are left out; ``dtype`` is required when
    the records hold several."""
    rows, _ = _valid(records)
    rows = [r for r in rows if r.get("op") == op and r.get("direction") == direction
            and _num(r.get("device_us")) > 0]
    dtypes = sorted({str(r.get("dtype")) for r in rows})
    if dtype is None and len(dtypes) > 1:
        raise ValueError(f"records hold dtypes {', '.join(dtypes)}; pick one with dtype=...")
    if dtype is not None:
        rows = [r for r in rows if r.get("dtype") == dtype]

    def key(r):
        return (r.get("M"), r.get("N"), r.get("dtype"), r.get("commit"))

    ours = {key(r): r for r in rows if _is_default(r, impl)}
    best: dict[tuple, dict] = {}
    for r in rows:
        if is_ours(r) or r.get("impl") == impl:
            continue
        k = key(r)
        if k in ours and (k not in best or _num(r["device_us"]) < _num(best[k]["device_us"])):
            best[k] = r
    latest: dict[tuple, tuple] = {}  # a shape measured in several runs keeps its latest run
    for k in best:
        date, shape = str(ours[k].get("date") or ""), k[:3]
        if shape not in latest or date >= latest[shape][0]:
            latest[shape] = (date, k)
    out = []
    for _, k in latest.values():
        r, peer = ours[k], best[k]
        out.append({"M": r["M"], "N": r["N"], "dtype": r.get("dtype"), "commit": r.get("commit"),
                    "family": shape_family(r), "impl_us": _num(r["device_us"]),
                    "best_peer": series_label(peer), "best_peer_us": _num(peer["device_us"]),
                    "ratio": _num(r["device_us"]) / _num(peer["device_us"])})
    return sorted(out, key=lambda t: (t["N"], t["M"]))


CLIFF_RANGE = 4.0  # the colour scale saturates at 4× either way


def cliff_map(records: Iterable, *, op: str, direction: str, dtype: str | None = None,
              impl: str = "normlab", source: str | None = None,
              title: str | None = None) -> go.Figure:
    """Where ``impl`` falls off a cliff: ``impl`` ÷ best peer (device time) at every measured
    (M, N), on log axes, in a diverging colour centred at 1.0 (blue: ``impl`` faster, red:
    slower, saturating at ``CLIFF_RANGE``×). Hover: shape, family, both times, the peer's name."""
    table = cliff_ratios(records, op=op, direction=direction, dtype=dtype, impl=impl)
    what = f"{op} {direction}: {impl} ÷ best peer"
    if not table:
        rows = as_dicts(records)
        msg = _empty_message(source, "cliff map") if not rows else (
            f"no shape has {impl}'s default and a peer measured in the same run ({op} {direction})")
        return empty_figure(msg, title or what)
    span = math.log2(CLIFF_RANGE)
    ticks = [0.25, 0.5, 0.8, 1.0, 1.25, 2.0, 4.0]
    fig = go.Figure(go.Scatter(
        x=[t["N"] for t in table], y=[t["M"] for t in table], mode="markers",
        marker={"size": 11, "line": {"width": 0.5, "color": "#444"},
                "color": [max(-span, min(span, math.log2(t["ratio"]))) for t in table],
                "colorscale": "RdBu_r", "cmin": -span, "cmax": span, "cmid": 0.0,
                "colorbar": {"title": {"text": f"{impl} ÷ best peer"},
                             "tickvals": [math.log2(v) for v in ticks],
                             "ticktext": [f"{v:g}×" for v in ticks]}},
        customdata=[[t["ratio"], t["impl_us"], t["best_peer"], t["best_peer_us"], t["family"],
                     t["dtype"]] for t in table],
        hovertemplate=(f"<b>%{{y}}×%{{x}}</b> (%{{customdata[5]}}, %{{customdata[4]}})"
                       f"<br>{impl} %{{customdata[1]:.2f}} µs · best peer %{{customdata[2]}} "
                       "%{customdata[3]:.2f} µs<br>ratio %{customdata[0]:.2f}×<extra></extra>"),
        showlegend=False,
    ))
    faster = sum(t["ratio"] < 1.0 for t in table)
    worst = max(table, key=lambda t: t["ratio"])
    fig.add_annotation(
        x=0, y=1.0, xref="paper", yref="paper", yanchor="bottom", xanchor="left", showarrow=False,
        text=(f"{impl} faster at {faster} of {len(table)} shapes; worst {worst['ratio']:.2f}× "
              f"at {worst['M']}×{worst['N']} (best peer {html.escape(worst['best_peer'])})"))
    drawn = {(t["M"], t["N"], t["dtype"], t["commit"]) for t in table}
    rows = [r for r in as_dicts(records) if r.get("op") == op and r.get("direction") == direction
            and (r.get("M"), r.get("N"), r.get("dtype"), r.get("commit")) in drawn]
    _layout(fig, title=_title(f"Cliff map: {what} (device time; below 1× {impl} is faster)",
                              rows, source, title),
            xaxis={"type": "log", "title": "N (columns)"},
            yaxis={"type": "log", "title": "M (rows)"}, height=520)
    return fig


# ---- the dγ contention picture (the fused-RMSNorm write-up's queue of carts at one dock) ---------


def contention_model(
    n_rows: int,
    n_cols: int,
    *,
    n_sm: int,
    programs_per_sm: int = 2,
    rows_per_program: int = 1,
    two_stage_rows: int | None = None,
    atomic_rows: int | None = None,
    paired_partials: bool = False,
    partials_cap: int | None = None,
    elem_bytes: int = 2,
    partial_bytes: int = 4,
) -> dict[str, dict]:
    """Where each dγ strategy sends its per-program partial sums, in numbers.

    - atomic: every program adds its N-vector into the one dγ vector, so the adds to each address
      queue up, ``programs`` deep.
    - two_stage: every program writes its own workspace row (no waiting); a reduce kernel then
      reads ``programs`` rows. The workspace grows with M.
    - persistent: ``n_sm * programs_per_sm`` programs grid-stride the rows and fold them in fp32
      registers, so the workspace and the reduce kernel's read are bounded, independent of M.
      With ``paired_partials`` programs 2k and 2k + 1 add into one zeroed partial row k, when
      the grid exceeds the bound on partial rows (``norms.config.pair_partials``). With
      ``partials_cap`` (few rows) the grid keeps the partials' traffic a bounded share of the
      rows' (``norms.config.norm_bwd_persistent_programs``).

    ``rows_per_program`` is the persistent kernel's row tile, ``atomic_rows`` the atomic
    kernel's (default: the same), ``two_stage_rows`` the rows each two-stage program folds into
    its one partial row (default: the tile). :func:`contention_plan` gives the planner's values.
    """
    two_stage_rows = rows_per_program if two_stage_rows is None else two_stage_rows
    atomic_rows = rows_per_program if atomic_rows is None else atomic_rows
    for name, v in (("n_rows", n_rows), ("n_cols", n_cols), ("n_sm", n_sm),
                    ("programs_per_sm", programs_per_sm), ("rows_per_program", rows_per_program),
                    ("two_stage_rows", two_stage_rows), ("atomic_rows", atomic_rows)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    tiles = -(-n_rows // rows_per_program)
    main_bytes = 3 * n_rows * n_cols * elem_bytes  # read x, dy; write dx
    persistent = norm_config.norm_bwd_persistent_programs(tiles, programs_per_sm, n_sm,
                                                          partials_cap)  # fmt: skip
    paired = bool(paired_partials) and norm_config.pair_partials(persistent, n_sm)
    persistent_rows = -(-persistent // 2) if paired else persistent
    two_stage = -(-n_rows // two_stage_rows)
    atomic = -(-n_rows // atomic_rows)
    out = {}
    for strategy, programs, partial_rows, depth in (
        ("atomic", atomic, 0, atomic),
        ("two_stage", two_stage, two_stage, 1),
        ("persistent", persistent, persistent_rows, 2 if paired else 1),
    ):
        workspace = partial_rows * n_cols * partial_bytes
        out[strategy] = {
            "programs": programs,
            "destinations": 1 if strategy == "atomic" else partial_rows,
            "queue_depth": depth,  # adds serialized on one dγ (or partial-row) address
            # row tiles folded into each partial (two-stage: its block of rows, in tiles)
            "tiles_per_program": (-(-two_stage_rows // rows_per_program) if strategy == "two_stage"
                                  else -(-tiles // programs) if strategy == "persistent" else 1),
            "partial_rows": partial_rows,
            "paired": paired if strategy == "persistent" else False,
            "workspace_bytes": workspace,
            # the reduce kernel reads the workspace once; atomics need no second kernel
            "reduce_read_bytes": workspace,
            "reduce_share": workspace / (main_bytes + 2 * workspace) if workspace else 0.0,
        }
    return out


def contention_plan(n_rows: int, n_cols: int, *, is_rms: bool = True, n_sm: int = 0) -> dict:
    """The keyword arguments of :func:`contention_model` / :func:`contention_figure` that the
    backward's planner (``normlab.norms.config.norm_bwd_config``) picks for this shape on
    ``n_sm`` SMs (0: unknown): each strategy's row tile, the programs per SM, the two-stage
    block, the paired partial rows and the partials' cap (bf16 rows)."""
    one_warp = norm_config.one_warp_contiguous(n_cols)
    cfg = {s: norm_config.norm_bwd_config(s, n_rows, n_cols, is_rms=is_rms, sm_count=n_sm,
                                          one_warp=one_warp)
           for s in STRATEGIES}  # fmt: skip
    p = cfg["persistent"]
    return {"programs_per_sm": p.programs_per_sm, "rows_per_program": p.block_rows,
            "atomic_rows": cfg["atomic"].block_rows,
            "two_stage_rows": cfg["two_stage"].rows_per_program,
            "paired_partials": p.paired_partials,
            "partials_cap": norm_config.norm_bwd_partials_cap(n_rows, 3 * 2, 1 if is_rms else 2)}


def contention_figure(
    n_rows: int,
    n_cols: int,
    *,
    n_sm: int,
    programs_per_sm: int = 2,
    rows_per_program: int = 1,
    two_stage_rows: int | None = None,
    atomic_rows: int | None = None,
    paired_partials: bool = False,
    partials_cap: int | None = None,
    strategies: Iterable[str] = STRATEGIES,
    title: str | None = None,
) -> go.Figure:
    """Programs (carts) delivering dγ partials to destinations (docks), one panel per strategy.

    Top: what each program does with its partial (queue at one dock, own dock, two programs per
    dock when paired, or folded into a bounded set of docks). Bottom: the numbers behind it, on a
    log scale. Pass ``**contention_plan(n_rows, n_cols)`` to draw what the kernels run.
    """
    strategies = list(strategies)
    bad = [s for s in strategies if s not in STRATEGIES]
    if bad or not strategies:
        raise ValueError(f"strategies must be a non-empty subset of {STRATEGIES}, got {strategies}")
    model = contention_model(n_rows, n_cols, n_sm=n_sm, programs_per_sm=programs_per_sm,
                             rows_per_program=rows_per_program, two_stage_rows=two_stage_rows,
                             atomic_rows=atomic_rows, paired_partials=paired_partials,
                             partials_cap=partials_cap)  # fmt: skip
    n = len(strategies)
    fig = make_subplots(
        rows=2, cols=n, row_heights=[0.58, 0.42], vertical_spacing=0.2, horizontal_spacing=0.06,
        specs=[[{} for _ in strategies], [{"colspan": n}] + [None] * (n - 1)],
        # two short lines per title: three panels side by side at 1280 px do not overlap
        subplot_titles=[f"<b>{s}</b>: {model[s]['programs']:,} programs<br>→ "
                        f"{model[s]['destinations']:,} "
                        f"{'dγ vector' if s == 'atomic' else 'partial rows'}"
                        + (" (in pairs)" if model[s]["paired"] else "")
                        for s in strategies] + ["the numbers (log scale)"],
    )
    for col, s in enumerate(strategies, start=1):
        m, color = model[s], _COLORS[s]
        docks = min(m["destinations"], MAX_DOCKS_SHOWN)
        per_dock = 2 if m["paired"] else 1
        if s == "atomic":
            carts = min(m["programs"], MAX_CARTS_SHOWN)
            cx, cy = list(range(1, carts + 1)), [0] * carts
            hover = [f"program {i}: waits behind {i - 1} adds to the same dγ addresses" for i in cx]
            extra = m["programs"] - carts
        else:
            cx = [1 + j for _ in range(docks) for j in range(per_dock)]
            cy = [i for i in range(docks) for _ in range(per_dock)]
            if per_dock == 2:
                hover = [f"program {2 * i + j}: folds {m['tiles_per_program']} row tile(s) in fp32 "
                         f"registers, adds them into zeroed partial row {i} (with program "
                         f"{2 * i + 1 - j})" for i in range(docks) for j in range(2)]
            else:
                hover = [f"program {i}: folds {m['tiles_per_program']} row tile(s) in fp32 "
                         f"registers, writes partial row {i} once" for i in range(docks)]
            extra = m["programs"] - len(cx)
        fig.add_trace(go.Scatter(
            x=[0] * docks, y=list(range(docks)), mode="markers+text", showlegend=False,
            marker={"symbol": "square", "size": 18, "color": "#7f7f7f"},
            text=["dγ" if s == "atomic" else f"ws[{i}]" for i in range(docks)],
            textposition="middle left", hoverinfo="text",
            hovertext=["the one dγ vector (N fp32 values)" if s == "atomic" else
                       f"workspace row {i} (N fp32 values)" for i in range(docks)],
            name=f"{s} docks",
        ), row=1, col=col)
        fig.add_trace(go.Scatter(
            x=cx, y=cy, mode="markers", name=s, showlegend=False,
            marker={"symbol": "square", "size": 12, "color": color},
            hoverinfo="text", hovertext=hover,
        ), row=1, col=col)
        note = f"+{extra:,} more" if extra > 0 else ""
        if s != "atomic" and m["tiles_per_program"] > 1:
            note = (note + "<br>" if note else "") + f"×{m['tiles_per_program']} tiles each"
        if note:
            fig.add_annotation(text=note, x=max(cx) + 0.5, y=max(cy), showarrow=False,
                               xanchor="left", row=1, col=col)
        fig.update_xaxes(visible=False, range=[-2.5, max(MAX_CARTS_SHOWN, 4) + 4] if s == "atomic"
                         else [-2.5, 7], row=1, col=col)
        fig.update_yaxes(visible=False, range=[MAX_DOCKS_SHOWN, -1], row=1, col=col)
    metrics = (("queue_depth", "adds queued per address"),
               ("partial_rows", "partial rows the reduce kernel reads"),
               ("programs", "programs launched"))
    for s in strategies:
        fig.add_trace(go.Bar(
            x=[label for _, label in metrics],
            y=[max(model[s][k], 0.5) if model[s][k] == 0 else model[s][k] for k, _ in metrics],
            name=s, marker_color=_COLORS[s],
            customdata=[[model[s][k], model[s]["workspace_bytes"] / 2**20] for k, _ in metrics],
            hovertemplate=(f"<b>{s}</b><br>%{{x}}: %{{customdata[0]:,}}"
                           "<br>fp32 workspace %{customdata[1]:.2f} MiB<extra></extra>"),
        ), row=2, col=1)
    fig.update_yaxes(type="log", title_text="count", row=2, col=1)
    pairs = " (paired partial rows)" if paired_partials else ""
    fig.update_layout(
        title=(title or f"Where the dγ partials go: M={n_rows:,} rows × N={n_cols:,}, "
                        f"{n_sm} SMs × {programs_per_sm} persistent programs per SM{pairs}"),
        barmode="group", height=620, template="plotly_white", legend_title_text="strategy",
        margin={"t": 110},
    )
    return fig


# ---- what an option costs: the loss options and the fused residual add --------------------------

def _meta_text(meta: Mapping) -> str:
    return (f"recorded: {meta.get('card', 'unknown card')}, {meta.get('date', 'undated')}, "
            f"commit {meta.get('commit', '?')}")


def option_cost_table(rows: Iterable[Mapping]) -> list[dict]:
    """Per option of a recorded loss-options run (``normlab.bench.devdata.loss_options``): its
    forward+backward time over its base op's (both normlab's), Liger-Kernel's time over the
    same base where Liger has the option, and what the bytes model alone predicts (the option's
    minimal bytes over the base op's: only a teacher in a wider dtype moves more)."""
    from normlab.bench.traffic import bytes_moved

    by = {(r["impl"], r["variant"]): r for r in rows}
    table = []
    for r in rows:
        if r["impl"] != "normlab" or not r.get("base") or ("normlab", r["base"]) not in by:
            continue
        base = by[("normlab", r["base"])]
        shape = (r["M"], r["N"], r["dtype"])
        bytes_ratio = (bytes_moved(r["op"], "fwd+bwd", *shape, target_dtype=r.get("target_dtype"))
                       / bytes_moved(base["op"], "fwd+bwd", *shape))  # fmt: skip
        liger = by.get(("liger", r["variant"]))
        table.append({"variant": r["variant"], "base": r["base"], "device_us": r["device_us"],
                      "base_us": base["device_us"], "ratio": r["device_us"] / base["device_us"],
                      "bytes_ratio": bytes_ratio,
                      "liger_ratio": liger["device_us"] / base["device_us"] if liger else None})
    return table


def option_costs(meta: Mapping, rows: Iterable[Mapping], title: str | None = None) -> go.Figure:
    """Each loss option's forward+backward time over its base op's (normlab's, = 1), beside
    Liger-Kernel's time for the same option over that base, the bytes model's prediction and
    the 5% target: an option costs what it adds to the resource that binds (bytes or
    arithmetic), not what it adds to the code."""
    table = option_cost_table(rows)
    head = title or "What each loss option costs: forward+backward ÷ its base op"
    if not table:
        return empty_figure("no loss-option measurements with their base op", head)
    names = [t["variant"] for t in table]
    fig = go.Figure()
    fig.add_trace(go.Bar(x=names, y=[t["ratio"] for t in table], name="normlab",
                         customdata=[[t["device_us"], t["base"], t["base_us"]] for t in table],
                         hovertemplate="<b>%{x}</b><br>%{y:.3f}× its base op<br>"
                         "%{customdata[0]:.1f} µs against %{customdata[1]}'s "
                         "%{customdata[2]:.1f}<extra></extra>"))
    liger = [t for t in table if t["liger_ratio"] is not None]
    if liger:
        fig.add_trace(go.Bar(x=[t["variant"] for t in liger], y=[t["liger_ratio"] for t in liger],
                             name="Liger-Kernel (÷ normlab's base op)",
                             hovertemplate="<b>%{x}</b><br>Liger: %{y:.3f}× normlab's base op"
                             "<extra></extra>"))
    fig.add_trace(go.Scatter(x=names, y=[t["bytes_ratio"] for t in table], mode="markers",
                             name="bytes model: the option's bytes ÷ the base op's",
                             marker={"symbol": "line-ew-open", "size": 28, "color": "black"}))
    # the target as a trace, not an hline: a log axis misplaces an hline's annotation
    fig.add_trace(go.Scatter(x=[names[0], names[-1]], y=[OPTION_COST_TARGET] * 2, mode="lines",
                             line={"dash": "dash", "color": "gray"},
                             name=f"target: {OPTION_COST_TARGET}× the base op"))
    shape = {(r["M"], r["N"], r["dtype"]) for r in rows if r.get("base")}
    where = ", ".join(f"{m}×{n} {d}" for m, n, d in sorted(shape))
    ticks = [0.8, 1, 1.5, 2, 3, 5, 10, 20]
    _layout(fig, title=f"{head}<br><sup>{html.escape(_meta_text(meta))}; {where}</sup>",
            barmode="group", yaxis={"type": "log", "title": "time ÷ normlab's base op (log)",
                                    "tickvals": ticks, "ticktext": [f"{t:g}×" for t in ticks]},
            xaxis_title="option", legend_title_text="")
    return fig


def fused_add_costs(meta: Mapping, rows: Iterable[Mapping], title: str | None = None) -> go.Figure:
    """The fused residual add's forward+backward beside ``rms_norm`` on a separately computed
    sum and Liger-Kernel's fused add, with what the bytes model predicts for the fused kernel:
    the separate path's time less the bytes it moves and the fused one does not, at the measured
    copy bandwidth (``normlab.bench.traffic.separate_add_bytes``: 11 units of M·N·e against 8)."""
    from normlab.bench.traffic import bytes_moved, separate_add_bytes

    head = title or "The fused residual add: forward+backward"
    by = {r["variant"]: r for r in rows if r.get("op") == "add_rms_norm"}
    separate, fused = by.get("rms_norm on a separate add"), by.get("add_rms_norm")
    if separate is None or fused is None:
        return empty_figure("no fused-add measurements", head)
    M, N, dtype = fused["M"], fused["N"], fused["dtype"]
    shape = ("fwd+bwd", M, N, dtype)
    saved = separate_add_bytes("add_rms_norm", *shape) - bytes_moved("add_rms_norm", *shape)
    predicted = separate["device_us"] - saved / fused["roofline_gbps"] / 1e3
    bars = [("rms_norm on a separate add", separate), ("add_rms_norm", fused),
            ("Liger-Kernel's fused add", by.get("liger fused add"))]
    bars = [(name, r) for name, r in bars if r is not None]
    names = [n for n, _ in bars]
    fig = go.Figure(go.Bar(x=names, y=[r["device_us"] for _, r in bars],
                           marker_color=[PALETTE[i] for i in range(len(bars))],
                           text=[f"{r['device_us']:.1f} µs" for _, r in bars],
                           textposition="outside", showlegend=False))
    fig.add_trace(go.Scatter(x=[names[0], names[-1]], y=[predicted] * 2, mode="lines",
                             line={"dash": "dash", "color": "black"},
                             name=f"bytes model: separate − {saved / 1e6:.0f} MB at the "
                             f"{fused['roofline_gbps']:.0f} GB/s copy = {predicted:.1f} µs"))
    _layout(fig, title=f"{head}<br><sup>{html.escape(_meta_text(meta))}; {M}×{N} {dtype}</sup>",
            yaxis_title="device µs (forward+backward)", xaxis_title="",
            legend={"orientation": "h", "y": -0.15})
    return fig


# Variants whose counts with a switch on differ from the timed code by that switch alone
# (option_bound_table's model-only rows).
MODEL_ONLY = ("cross_entropy softcap",)


def option_bound_table(rows: Iterable[Mapping], loops: Iterable[Mapping], model: Mapping,
                       model_only: Iterable[str] = MODEL_ONLY) -> list[dict]:
    """Per label cross-entropy variant of a recorded loss-options run (normlab's rows) with
    recorded SASS counts (``normlab.bench.devdata.loss_loops``), the least time of each pipe
    that can bind at that run's shape: its bytes at the run's measured copy speed, issuing its
    instructions and running its MUFU operations (``normlab.bench.pipes``, at ``model``'s SM
    count and clock), beside the measured time. Counts compiled with a switch on
    (``poly_exp2``) come as model-only rows (``device_us`` None, not timed) for the variants in
    ``model_only``: those whose other code is as timed. The first row of each (variant, switch)
    in ``loops`` is taken."""
    from normlab.bench import pipes
    from normlab.bench.traffic import bytes_moved

    measured = {r["variant"]: r for r in rows
                if r["impl"] == "normlab" and r["op"] == "cross_entropy"}  # fmt: skip
    counts: dict[tuple[str, bool], Mapping] = {}
    for c in loops:
        counts.setdefault((c["variant"], bool(c.get("poly_exp2"))), c)
    table = []
    model_only = set(model_only)
    for (variant, poly), c in counts.items():
        shape_of = measured.get(variant)
        if shape_of is None or (poly and variant not in model_only):
            continue
        M, N, dtype = shape_of["M"], shape_of["N"], shape_of["dtype"]
        gbps, n_logits = shape_of["roofline_gbps"], M * N
        sms, ghz = model["sm_count"], model["clock_ghz"]
        table.append({
            "variant": variant, "poly_exp2": poly, "M": M, "N": N, "dtype": dtype,
            "device_us": None if poly else shape_of["device_us"],
            "bytes_us": bytes_moved("cross_entropy", "fwd+bwd", M, N, dtype) / gbps / 1e3,
            "issue_us": pipes.issue_us(c["instructions"], n_logits, sms, ghz),
            "mufu_us": pipes.mufu_us(c["mufu"], n_logits, sms, ghz),
            "instructions": c["instructions"], "mufu": c["mufu"], "commit": c.get("commit")})
    return table


def option_bounds(meta: Mapping, rows: Iterable[Mapping], loops_meta: Mapping,
                  loops: Iterable[Mapping], model_only: Iterable[str] = MODEL_ONLY,
                  title: str | None = None) -> go.Figure:  # fmt: skip
    """Label cross-entropy and its options: the measured time beside the least time of each
    pipe (``option_bound_table``), so a reader sees which floor an option lifts and whether the
    time follows. Model-only rows (a switch not timed) have no measured bar."""
    head = title or "What bounds label cross-entropy and its options: forward+backward"
    table = option_bound_table(rows, loops, loops_meta["model"], model_only)
    if not table:
        return empty_figure("no label cross-entropy measurements with SASS counts", head)
    names = [t["variant"].replace("cross_entropy", "label CE")
             + (", exp on the FMA pipe (model only)" if t["poly_exp2"] else "") for t in table]
    fig = go.Figure()
    timed = [(n, t) for n, t in zip(names, table, strict=True) if t["device_us"] is not None]
    fig.add_trace(go.Bar(y=[n for n, _ in timed], x=[t["device_us"] for _, t in timed],
                         orientation="h", name="measured (device µs)", marker_color=PALETTE[0],
                         hovertemplate="%{y}: %{x:.1f} µs measured<extra></extra>"))
    for key, label, color in (("bytes_us", "its bytes at the measured copy speed", PALETTE[1]),
                              ("issue_us", "issuing its instructions (model)", PALETTE[2]),
                              ("mufu_us", "its MUFU ops (model)", PALETTE[3])):
        fig.add_trace(go.Bar(y=names, x=[t[key] for t in table], orientation="h", name=label,
                             marker_color=color,
                             customdata=[[t["instructions"], t["mufu"]] for t in table],
                             hovertemplate="%{y}: %{x:.0f} µs (%{customdata[0]:.1f} instructions, "
                                           "%{customdata[1]:.1f} MUFU a logit)<extra></extra>"))
    model = loops_meta["model"]
    commits = ", ".join(sorted({str(t["commit"]) for t in table}))
    first = table[0]
    sub = (f"{html.escape(_meta_text(meta))}; {first['M']}×{first['N']} {first['dtype']}; SASS "
           f"counts at {html.escape(commits)}, bounds on {model['sm_count']} SMs at "
           f"{model['clock_ghz']} GHz")
    _layout(fig, title=f"{head}<br><sup>{sub}</sup>", barmode="group",
            xaxis_title="µs (forward+backward)", yaxis={"autorange": "reversed"},
            legend={"orientation": "h", "y": -0.2}, height=120 + 70 * len(table))
    return fig


# ---- a plain table -----------------------------------------------------------------------------

TABLE_COLUMNS = (
    ("op", "op"), ("impl", "impl"), ("strategy", "strategy"), ("layout", "layout"),
    ("dtype", "dtype"), ("direction", "dir"), ("M", "M"), ("N", "N"),
    ("device_us", "device µs"), ("wall_us", "wall µs"), ("gbps", "GB/s"),
    ("frac_roofline", "% of copy"),
)


def _fmt(key: str, value) -> str:
    if value is None or value == "":
        return "-"
    if key == "frac_roofline":
        return f"{100.0 * float(value):.1f}"
    if isinstance(value, float):
        return f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"
    return str(value)


class Table:
    """Rows of formatted strings; prints as aligned text, renders as HTML in Jupyter."""

    def __init__(self, header: list[str], rows: list[list[str]], empty: str):
        self.header, self.rows, self.empty = header, rows, empty

    def __len__(self) -> int:
        return len(self.rows)

    def __str__(self) -> str:
        if not self.rows:
            return self.empty
        widths = [max(len(h), *(len(r[i]) for r in self.rows)) for i, h in enumerate(self.header)]
        line = lambda cells: "  ".join(
            c.rjust(w) for c, w in zip(cells, widths, strict=False)).rstrip()
        return "\n".join([line(self.header), line(["-" * w for w in widths])]
                         + [line(r) for r in self.rows])

    __repr__ = __str__

    def _repr_html_(self) -> str:
        if not self.rows:
            return f"<p><em>{html.escape(self.empty)}</em></p>"
        th = "".join(f"<th>{html.escape(h)}</th>" for h in self.header)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>"
                       for r in self.rows)
        return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def records_table(records: Iterable, columns: Iterable[str] | None = None, *,
                  empty: str = "no records") -> Table:
    """The records as a table; columns that are empty in every record are dropped."""
    rows = as_dicts(records)
    labels = dict(TABLE_COLUMNS)
    keys = list(columns) if columns is not None else [k for k, _ in TABLE_COLUMNS]
    if columns is None:
        keys = [k for k in keys if any(r.get(k) not in (None, "") for r in rows)] or keys
    return Table([labels.get(k, k) for k in keys],
                 [[_fmt(k, r.get(k)) for k in keys] for r in rows], empty)
