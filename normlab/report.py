"""``python -m normlab report RESULTS... -o report.html``: recorded runs as one shareable HTML page.

Reads one or more results files (JSONL or CSV, as ``normlab bench --out`` writes them) with
``normlab.bench``'s record reader and writes a self-contained page: plotly's JavaScript is
embedded once (the first figure), so the report opens offline. It shows the card, mode,
versions, commit and date of every run, and per card, op, direction and dtype: GB/s against the
measured copy roofline, the fraction of that roofline, the speed-up over the best peer per shape,
and a table with one row per record. A malformed results file is a one-line error naming the file
and line (exit status 2), never a half-written report.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import html
import math
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

INTERPRETER_NOTE = ("interpreter timings (Triton interpreter on CPU tensors): they check the "
                    "pipeline and say nothing about GPU bandwidth")

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
table { border-collapse: collapse; margin: 0.6em 0 1.4em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th { background: #f3f3f3; }
td.text, th.text { text-align: left; }
tr.invalid td { color: #999; text-decoration: line-through; }
tr.invalid td:last-child { text-decoration: none; color: #b00; }
.warn { background: #fff4e5; border-left: 4px solid #f0a020; padding: 0.5em 1em; }
.meta { color: #666; }
"""


# ---- reading -----------------------------------------------------------------------------------


def load(paths: Iterable[str | Path]) -> list[tuple[Path, list]]:
    """``(path, records)`` per results file. Raises ValueError with a one-line message naming the
    file (and the line, for a malformed record) when a file is missing, unreadable or empty."""
    from normlab.bench.records import read_records

    loaded = []
    for path in map(Path, paths):
        if not path.is_file():
            raise ValueError(f"{path}: no such results file")
        try:
            records = read_records(path)
        except UnicodeDecodeError as exc:
            raise ValueError(f"{path}: not UTF-8 text (byte {exc.start})") from None
        except OSError as exc:
            raise ValueError(f"{path}: cannot read ({exc.strerror or exc})") from None
        if not records:
            raise ValueError(f"{path}: no records")
        loaded.append((path, records))
    return loaded


# ---- formatting --------------------------------------------------------------------------------


def _esc(value) -> str:
    return html.escape("-" if value is None or value == "" else str(value))


def _num(value) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


def _fmt(value, digits: int = 2) -> str:
    v = _num(value)
    if v is None:
        return "-"
    return f"{v:,.1f}" if abs(v) >= 100 else f"{v:.{digits}f}"


def _table(header: Sequence[str], rows: Iterable[tuple[list[str], str]], text: set[int],
           cls: str) -> str:
    """An HTML table of escaped cells; each row is (cells, row class); columns in ``text`` are
    left-aligned text, the rest numbers."""
    def cell(i: int, c: str, tag: str) -> str:
        return f'<{tag} class="text">{c}</{tag}>' if i in text else f"<{tag}>{c}</{tag}>"

    head = "".join(cell(i, html.escape(h), "th") for i, h in enumerate(header))
    body = "\n".join(f'<tr class="{row_cls}">'
                     + "".join(cell(i, c, "td") for i, c in enumerate(cells)) + "</tr>"
                     for cells, row_cls in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>\n{body}\n</tbody></table>'


class _Figures:
    """Figures as HTML divs; plotly.js is embedded with the first one only (then reused)."""

    def __init__(self):
        self.count = 0

    def html(self, fig) -> str:
        self.count += 1
        return fig.to_html(include_plotlyjs=self.count == 1, full_html=False,
                           default_width="100%", config={"displaylogo": False})


# ---- the page ----------------------------------------------------------------------------------


def _runs_table(rows: list[dict]) -> str:
    """One row per run: card, mode, versions, commit and date, with its copy roofline."""
    runs: dict[tuple, dict] = {}
    for r in rows:
        key = (r["card"], r["mode"], r["sm_count"], r["torch"], r["triton"], r["commit"],
               str(r["date"])[:10])
        run = runs.setdefault(key, {"records": 0, "files": [], "copy": None, "sheet": None})
        run["records"] += 1
        if r["_file"] not in run["files"]:
            run["files"].append(r["_file"])
        run["copy"] = run["copy"] or _num(r.get("roofline_gbps"))
        run["sheet"] = run["sheet"] or _num(r.get("datasheet_gbps"))
    header = ["card", "mode", "SMs", "torch", "triton", "commit", "date", "measured copy GB/s",
              "datasheet GB/s", "records", "files"]
    out = []
    for (card, mode, sms, torch_v, triton_v, commit, date), run in sorted(runs.items()):
        out.append(([_esc(card), _esc(mode), _esc(sms), _esc(torch_v), _esc(triton_v),
                     _esc(commit), _esc(date), f"{run['copy']:,.0f}" if run["copy"] else "-",
                     f"{run['sheet']:,.0f}" if run["sheet"] else "-", str(run["records"]),
                     _esc(", ".join(run["files"]))], "run"))
    return _table(header, out, text={0, 1, 3, 4, 5, 6, 10}, cls="runs")


def _records_table(rows: list[dict], several_files: bool) -> str:
    """One row per record, with its ratio to the fastest peer at the same shape."""
    from normlab.viz import plots

    best = plots.best_peers(rows)
    header = ["implementation", "shape M×N", "device µs", "wall µs", "MB moved", "GB/s",
              "% of copy", "best peer", "best peer µs ÷ this µs"]
    header += ["file", "note"] if several_files else ["note"]
    out = []
    for r in sorted(rows, key=lambda r: (r["M"] * r["N"], r["M"], plots.series_label(r))):
        us = _num(r.get("device_us"))
        peer = best.get(plots.peer_key(r))
        frac = _num(r.get("frac_roofline"))
        cells = [_esc(plots.series_label(r)), _esc(f"{r['M']}×{r['N']}"), _fmt(us),
                 _fmt(r.get("wall_us")), _fmt(r["bytes"] / 1e6), _fmt(r.get("gbps"), 1),
                 f"{100 * frac:.1f}" if frac is not None else "-",
                 _esc(plots.series_label(peer) if peer else None),
                 f"{_num(peer['device_us']) / us:.2f}×" if peer and us else "-"]
        if several_files:
            cells.append(_esc(r["_file"]))
        invalid = r.get("valid") is False
        cells.append(_esc(("invalid: " if invalid else "") + (r.get("note") or "")))
        out.append((cells, "record invalid" if invalid else "record"))
    return _table(header, out, text={0, 1, 7, *range(9, len(header))}, cls="records")


def _speedup_table(rows: list[dict]) -> str:
    from normlab.viz import plots

    table = plots.speedup_table(rows)
    if not table:
        return ("<p><em>No shape has both a normlab run and a peer run: no speed-up to show."
                "</em></p>")
    header = ["normlab", "shape M×N", "µs", "best peer", "peer µs", "speed-up"]
    out = [([_esc(t["impl"]), _esc(f"{t['M']}×{t['N']}"), _fmt(t["device_us"]),
             _esc(t["best_peer"]), _fmt(t["best_peer_us"]), f"{t['speedup']:.2f}×"], "speedup")
           for t in sorted(table, key=lambda t: (t["M"] * t["N"], t["M"], t["impl"]))]
    return _table(header, out, text={0, 1, 3}, cls="speedup")


def _section(key: tuple, rows: list[dict], figures: _Figures,
             several_files: bool) -> tuple[str, str, str]:
    """(HTML, anchor, contents label) of one card/op/direction/dtype group."""
    from normlab.viz import plots

    card, op, direction, dtype = key
    interpret = any(r.get("mode") != "gpu" for r in rows)
    name = f"{op} · {direction} · {dtype}"
    suffix = " (interpreter timings)" if interpret else ""
    anchor = "-".join(str(k) for k in key).replace(" ", "_").replace("+", "plus")
    parts = [(f'<h2 id="{html.escape(anchor)}">{html.escape(name)} <small>on '
              f'{html.escape(card)}</small></h2>')]
    if interpret:
        parts.append(f'<p class="warn">{html.escape(INTERPRETER_NOTE)}.</p>')
    parts.append(figures.html(plots.gbps_vs_shape(
        rows, source="recorded", title=f"{name}: effective bandwidth vs shape{suffix}")))
    parts.append(figures.html(plots.roofline_bars(
        rows, source="recorded", title=f"{name}: fraction of the measured copy roofline{suffix}")))
    if plots.speedup_table(rows):
        parts.append(figures.html(plots.speedup_vs_best_peer(
            rows, source="recorded", title=f"{name}: speed-up vs the best peer{suffix}")))
    parts.append("<h3>Against the best peer per shape</h3>")
    parts.append(_speedup_table(rows))
    parts.append("<h3>Records</h3>")
    parts.append(_records_table(rows, several_files))
    return "\n".join(parts), anchor, name + f" on {card}"


def _cliff_maps(rows: list[dict], figures: _Figures) -> str:
    """Cliff maps (normlab ÷ best peer over M and N) of every population in the records: one per
    card, op, direction and dtype that has normlab's default and a peer measured in one run."""
    from normlab.viz import plots

    population = [r for r in rows if r.get("shape_set")]
    keys = sorted({(r["card"], r["shape_set"], r["op"], r["direction"], r["dtype"])
                   for r in population})
    parts = []
    for card, shape_set, op, direction, dtype in keys:
        group = [r for r in population if (r["card"], r["shape_set"], r["op"], r["direction"],
                                           r["dtype"]) == (card, shape_set, op, direction, dtype)]
        if not plots.cliff_ratios(group, op=op, direction=direction, dtype=dtype):
            continue
        parts.append(figures.html(plots.cliff_map(
            group, op=op, direction=direction, dtype=dtype, source="recorded",
            title=f"{op} · {direction} · {dtype} over the {shape_set} ({card}): normlab ÷ best "
                  "peer")))
    if not parts:
        return ""
    return ('<h2 id="cliff-maps">Cliff maps</h2>\n<p>normlab\'s default divided by the fastest '
            "peer measured in the same run, at every shape of the population, on log axes (blue: "
            "normlab faster, red: slower). Hover a point for its shape, both times and the "
            "peer.</p>\n" + "\n".join(parts))


def build_html(loaded: list[tuple[Path, list]], *, title: str = "normlab report",
               generated: _dt.datetime | None = None) -> str:
    """The report page for ``load()``'s output, as one self-contained HTML string."""
    import normlab
    from normlab.viz import plots

    generated = generated or _dt.datetime.now(_dt.timezone.utc)
    rows = []
    for path, records in loaded:
        for r in plots.as_dicts(records):
            rows.append({**r, "_file": path.name})
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["card"], r["op"], r["direction"], r["dtype"]), []).append(r)

    figures = _Figures()
    several_files = len(loaded) > 1
    sections = [_section(key, groups[key], figures, several_files) for key in sorted(groups)]
    n_invalid = sum(r.get("valid") is False for r in rows)
    files = ", ".join(html.escape(str(p)) for p, _ in loaded)
    body = [
        f"<h1>{html.escape(title)}</h1>",
        (f'<p class="meta">{len(rows)} records from {len(loaded)} file(s): {files}. Generated '
         f'{generated.strftime("%Y-%m-%d %H:%M UTC")} by normlab '
         f"{html.escape(normlab.__version__)}.</p>"),
        ("<p>GB/s is the bytes model divided by the device time; the roofline is the card's "
         "measured device-to-device copy bandwidth (bytes read + written) from the same run. "
         "Speed-up is the best peer's device time divided by normlab's (above 1× normlab is "
         "faster).</p>"),
        "<h2>Runs</h2>",
        _runs_table(rows),
    ]
    if any(r.get("mode") != "gpu" for r in rows):
        body.append(f'<p class="warn">Some runs are {html.escape(INTERPRETER_NOTE)}.</p>')
    if n_invalid:
        body.append(f'<p class="warn">{n_invalid} record(s) marked invalid by the bench (a time or '
                    "GB/s that cannot be real) are struck through in the tables and left out of "
                    "the plots.</p>")
    cliffs = _cliff_maps(rows, figures)
    contents = ([("cliff-maps", "Cliff maps of the shape populations")] if cliffs else []) + [
        (anchor, label) for _, anchor, label in sections]
    body.append("<h2>Contents</h2><ul>" + "".join(
        f'<li><a href="#{html.escape(anchor)}">{html.escape(label)}</a></li>'
        for anchor, label in contents) + "</ul>")
    if cliffs:
        body.append(cliffs)
    body.extend(text for text, _, _ in sections)
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>{html.escape(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
            + "\n".join(body) + "\n</body>\n</html>\n")


# ---- command line ------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="normlab report",
        description="Render results files (JSONL or CSV from `normlab bench --out`) as one "
        "self-contained HTML page: plots, tables, speed-up over the best peer, card, versions, "
        "date. Opens offline (plotly.js is embedded).",
    )
    parser.add_argument("results", nargs="+", type=Path, metavar="RESULTS",
                        help="results files (.jsonl or .csv)")
    parser.add_argument("-o", "--out", type=Path, default=Path("report.html"),
                        help="HTML file to write (default report.html)")
    parser.add_argument("--title", default="normlab report", help="page title")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``normlab report``: 0 on success, 2 (and one line on stderr) for a bad results file."""
    args = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        import plotly  # noqa: F401
    except ImportError:
        print("normlab report: error: needs plotly (pip install 'normlab[lab]')", file=sys.stderr)
        return 2
    try:
        loaded = load(args.results)
    except ValueError as exc:
        message = " ".join(str(exc).split())  # one line, whatever the reader put in it
        print(f"normlab report: error: {message}", file=sys.stderr)
        return 2
    page = build_html(loaded, title=args.title)
    try:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(page, encoding="utf-8")
    except OSError as exc:  # a folder, a missing or read-only place: one line, not a traceback
        print(f"normlab report: error: cannot write {args.out}: {exc.strerror or exc}",
              file=sys.stderr)  # fmt: skip
        return 2
    n = sum(len(records) for _, records in loaded)
    print(f"wrote {args.out}: {n} records from {len(loaded)} file(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
