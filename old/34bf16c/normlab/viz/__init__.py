"""Figures, tables and widgets over benchmark records (the ``lab`` extra: plotly; ipywidgets
only for ``widgets``, imported on first use).

``plots`` holds pure functions (records in, ``plotly.graph_objects.Figure`` out); ``widgets``
only wires ipywidgets controls to them and to ``normlab.bench``.
"""

from normlab.viz.checks import verdict
from normlab.viz.plots import (
    NO_RECORDED_DATA,
    PALETTE,
    Table,
    as_dicts,
    cliff_map,
    cliff_ratios,
    contention_figure,
    contention_model,
    contention_plan,
    device_us_text,
    empty_figure,
    fused_add_costs,
    gbps_vs_shape,
    kernel_breakdown,
    kernel_kind,
    one,
    option_bound_table,
    option_bounds,
    option_cost_table,
    option_costs,
    quote,
    recorded_summary,
    records_table,
    roofline_bars,
    select,
    shape_family,
    source_of,
    source_text,
    speedup_table,
    speedup_vs_best_peer,
    with_source,
)

__all__ = [
    "NO_RECORDED_DATA",
    "PALETTE",
    "Table",
    "as_dicts",
    "cliff_map",
    "cliff_ratios",
    "contention_figure",
    "contention_model",
    "contention_plan",
    "device_us_text",
    "empty_figure",
    "fused_add_costs",
    "gbps_vs_shape",
    "kernel_breakdown",
    "kernel_kind",
    "one",
    "option_bound_table",
    "option_bounds",
    "option_cost_table",
    "option_costs",
    "quote",
    "recorded_summary",
    "records_table",
    "roofline_bars",
    "select",
    "shape_family",
    "source_of",
    "source_text",
    "speedup_table",
    "speedup_vs_best_peer",
    "verdict",
    "widgets",
    "with_source",
]


def __getattr__(name: str):
    """``viz.widgets`` on first use: the figures and the headless report need no ipywidgets."""
    if name == "widgets":
        import importlib

        return importlib.import_module("normlab.viz.widgets")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
