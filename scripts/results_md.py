"""Write docs/results.md from the recorded runs in normlab/data/*.jsonl (release tooling).

    python scripts/results_md.py                 # regenerate docs/results.md
    python scripts/results_md.py --summary       # print only the summary table (Markdown)
    python scripts/results_md.py --check         # exit 1 if docs/results.md is out of date
    python scripts/results_md.py out/*.jsonl     # other records (a new run), to stdout

Every number in the output comes from the records (or, for the Python version, which records do
not carry, from the header of the record logs shipped beside them); the prose around the numbers
only says how they were measured and how to read them. The output is deterministic: groups,
shapes and runs are sorted, and every float has a fixed format.

Definitions used throughout:

* normlab's **default** is the record of ``impl == "normlab"`` with strategy/form, layout and
  block cap all left to "auto" (what a caller gets without options);
* a **peer** is any other implementation (eager, torch, compile) of the same op, direction, dtype
  and shape **in the same run** as that default (same commit and timestamp: one invocation of
  ``python -m normlab bench`` on one op);
* **ratio** = the fastest peer's device µs / normlab's default device µs: above 1 normlab is
  faster.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from normlab.bench import population  # noqa: E402
from normlab.bench.records import Record, read_records  # noqa: E402

DATA_GLOB = "normlab/data/*.jsonl"
POPULATION_GLOB = "normlab/data/*-population.jsonl.gz"
# The vocabulary population is read here only, so it lives with the development records.
VOCAB_GLOB = "benchmarks/data/vocab_population_*.jsonl.gz"
# The fused residual add-norms over the population's model members.
FUSED_ADD_GLOB = "benchmarks/data/population_addpop_*_h200.jsonl.gz"
# The whole population at one later commit, a run per card (the H100 when no H200 could be had).
H100_POPULATION_GLOB = "benchmarks/data/population_all_*_h100.jsonl.gz"
H200_POPULATION_GLOB = "benchmarks/data/population_all_*_h200.jsonl.gz"
# The H200 population's worst members and the peer shapes re-timed on an H200 at a later commit.
H200_REFRESH_GLOB = "benchmarks/data/population_refresh*_h200.jsonl.gz"
# An eighth of the population beside torch.compile compiled per member (dynamic=False).
STATIC_COMPILE_GLOB = "benchmarks/data/population_static_compile_*.jsonl.gz"
OUTPUT = REPO / "docs" / "results.md"
COMMAND = "python scripts/results_md.py"

OP_ORDER = ("rms_norm", "layer_norm", "reverse_kl", "soft_cross_entropy", "cross_entropy")
OP_NAMES = {
    "rms_norm": "RMSNorm",
    "layer_norm": "LayerNorm",
    "reverse_kl": "reverse KL",
    "soft_cross_entropy": "soft-target cross-entropy",
    "cross_entropy": "label cross-entropy",
    "forward_kl": "forward KL",
    "jsd": "JSD",
    "add_rms_norm": "`add_rms_norm`",
    "add_layer_norm": "`add_layer_norm`",
}
DIRECTION_ORDER = ("fwd", "bwd", "fwd+bwd")
DIRECTION_NAMES = {"fwd": "forward", "bwd": "backward", "fwd+bwd": "forward+backward"}
ELEMENT_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "fp64": 8}
NOT_PEERS = ("normlab", "copy")


# ---------------------------------------------------------------------------------------------
# Selection and arithmetic (pure functions; tests/test_results_md.py checks them)
# ---------------------------------------------------------------------------------------------


def is_default(rec: Record) -> bool:
    """normlab with every option left to "auto"."""
    return (
        rec.impl == "normlab"
        and rec.strategy in (None, "", "auto")
        and rec.layout in (None, "", "auto")
        and rec.block_cap is None
    )


def run_key(rec: Record) -> tuple[str, str]:
    """One run = one bench invocation on one op: records with the same commit and timestamp."""
    return (rec.commit, rec.date)


@dataclass(frozen=True)
class Cell:
    """One shape of one (op, direction, dtype) table."""

    M: int
    N: int
    default: Record
    best: Record  # fastest normlab record of the shape, any run
    peer: Record | None  # fastest peer in the default's run

    @property
    def shape(self) -> str:
        return f"{self.M}×{self.N}"

    @property
    def ratio(self) -> float | None:
        if self.peer is None:
            return None
        return self.peer.device_us / self.default.device_us


def _order(value: str, order: tuple[str, ...]) -> tuple[int, str]:
    return (order.index(value) if value in order else len(order), value)


def group_key(rec: Record) -> tuple:
    return (rec.card, _order(rec.op, OP_ORDER), _order(rec.direction, DIRECTION_ORDER), rec.dtype)


def usable(records) -> list[Record]:
    """Valid records with a device time."""
    return [r for r in records if r.valid and r.device_us]


def cells(records) -> list[Cell]:
    """One Cell per shape that has a normlab default, sorted by (M, N). Records of one group."""
    by_shape = defaultdict(list)
    for r in records:
        by_shape[(r.M, r.N)].append(r)
    out = []
    for (M, N), here in sorted(by_shape.items()):
        defaults = [r for r in here if is_default(r)]
        if not defaults:
            continue
        # the latest run's default if a shape was recorded twice
        default = max(defaults, key=lambda r: (r.date, r.commit, -r.device_us))
        ours = [r for r in here if r.impl == "normlab"]
        best = min(ours, key=lambda r: (r.device_us, r.label, r.date))
        peers = [
            r for r in here if r.impl not in NOT_PEERS and run_key(r) == run_key(default)
        ]
        peer = min(peers, key=lambda r: (r.device_us, r.label)) if peers else None
        out.append(Cell(M, N, default, best, peer))
    return out


@dataclass(frozen=True)
class Summary:
    shapes: int  # shapes with a ratio
    faster: int  # of which normlab's default is faster (ratio > 1)
    geomean: float
    worst: Cell


def summarize(group_cells: list[Cell]) -> Summary | None:
    """Geometric mean of the ratios and the smallest one (ties: the first shape)."""
    rated = [c for c in group_cells if c.ratio is not None]
    if not rated:
        return None
    geomean = math.exp(sum(math.log(c.ratio) for c in rated) / len(rated))
    worst = min(rated, key=lambda c: (c.ratio, c.M, c.N))
    return Summary(len(rated), sum(c.ratio > 1 for c in rated), geomean, worst)


# ---------------------------------------------------------------------------------------------
# Formatting
# ---------------------------------------------------------------------------------------------


def us(x: float) -> str:
    return f"{x:.1f}"


def ratio(x: float) -> str:
    return f"{x:.3f}×"


def percent(x: float) -> str:
    return f"{100 * x:.0f}%"


def short_date(date: str) -> str:
    """2026-11-30T06:31:21Z -> 2026-11-30 06:31:21 UTC"""
    return date.replace("T", " ").replace("Z", " UTC")


def plain_command(command: str) -> str:
    """The bench command without its output path (a detail of the machine it ran on); any other
    absolute path shortened to its file name."""
    words = command.split()
    out, skip = [], False
    for w in words:
        if skip:
            skip = False
            continue
        if w in ("--out", "-o"):
            skip = True
            continue
        if w.startswith("--out=") or w.startswith("-o="):
            continue
        out.append(Path(w).name if w.startswith("/") else w)
    return " ".join(out).replace("|", "\\|")


def relative(path: Path) -> str:
    path = Path(path).resolve()
    try:
        return path.relative_to(REPO).as_posix()
    except ValueError:
        return path.name


def python_versions(paths: list[Path]) -> list[tuple[str, str]]:
    """(version, log file) from the record logs beside each records file (``<stem>.*.log``)."""
    found = []
    for path in paths:
        for log in sorted(Path(path).parent.glob(f"{Path(path).stem}.*.log")):
            for line in log.read_text(encoding="utf-8", errors="replace").splitlines()[:20]:
                m = re.match(r"^\s*python\s+(\d+\.\d+\.\d+)\s*$", line, re.IGNORECASE) or re.search(
                    r"\bPython (\d+\.\d+\.\d+)\b", line
                )
                if m:
                    found.append((m.group(1), relative(log)))
                    break
    return found


def bytes_model(records) -> list[str]:
    """The bytes model per (op, direction), read back from the records: bytes / (M·N·e)."""
    factors = defaultdict(set)
    for r in records:
        e = ELEMENT_BYTES.get(r.dtype)
        if e:
            factors[(_order(r.op, OP_ORDER), _order(r.direction, DIRECTION_ORDER))].add(
                r.bytes / (r.M * r.N * e)
            )
    lines = []
    for (op, direction), fs in sorted(factors.items()):
        text = ", ".join(f"{f:g}" for f in sorted(fs))
        lines.append(f"{OP_NAMES.get(op[1], op[1])} {direction[1]}: {text}·M·N·e")
    return lines


def _range(values, fmt) -> str:
    lo, hi = min(values), max(values)
    return fmt(lo) if fmt(lo) == fmt(hi) else f"{fmt(lo)}–{fmt(hi)}"


def _groups(records):
    groups = defaultdict(list)
    for r in records:
        groups[group_key(r)].append(r)
    return [(key, groups[key]) for key in sorted(groups)]


def _title(key, many_cards: bool) -> str:
    card, (_, op), (_, direction), dtype = key
    title = f"{OP_NAMES.get(op, op)} {DIRECTION_NAMES.get(direction, direction)} ({dtype})"
    return f"{card}: {title}" if many_cards else title


def summary_table(records) -> str:
    records = usable(records)
    many_cards = len({r.card for r in records}) > 1
    lines = [
        "| op | direction | dtype | shapes | normlab faster | geomean peer/normlab | "
        "worst peer/normlab (shape) |",
        "|---|---|---|---|---|---|---|",
    ]
    for key, group in _groups(records):
        s = summarize(cells(group))
        if s is None:
            continue
        card, (_, op), (_, direction), dtype = key
        name = OP_NAMES.get(op, op) + (f" ({card})" if many_cards else "")
        w = s.worst
        lines.append(
            f"| {name} | {direction} | {dtype} | {s.shapes} | {s.faster} of {s.shapes} | "
            f"{ratio(s.geomean)} | {ratio(w.ratio)} ({w.shape}, {w.peer.label}) |"
        )
    return "\n".join(lines) + "\n"


def worst_line(s: Summary) -> str:
    w = s.worst
    if w.ratio < 1:
        verdict = (f"normlab's default is slower here: it takes "
                   f"{100 * (1 / w.ratio - 1):.1f}% longer than {w.peer.label}")
    elif w.ratio == 1:
        verdict = "a tie"
    else:
        verdict = (f"normlab's default is faster even here: {w.peer.label} takes "
                   f"{ratio(w.ratio)} its time")
    return (
        f"Worst cell: {w.shape}, normlab {us(w.default.device_us)} µs against "
        f"{w.peer.label} {us(w.peer.device_us)} µs, ratio {ratio(w.ratio)}: {verdict}."
    )


def group_table(group_cells: list[Cell]) -> str:
    lines = [
        "| M×N | normlab µs (wall) | GB/s | % of copy | best normlab variant µs | "
        "fastest peer µs (wall) | peer/normlab | run |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in group_cells:
        d = c.default
        best = f"{c.best.label} {us(c.best.device_us)}"
        if run_key(c.best) != run_key(d):
            best += f" (at `{c.best.commit}`)" if c.best.commit != d.commit else " (other run)"
        peer = f"{c.peer.label} {us(c.peer.device_us)} ({us(c.peer.wall_us)})" if c.peer else "—"
        rat = ratio(c.ratio) if c.ratio is not None else "—"
        frac = percent(d.frac_roofline) if d.frac_roofline is not None else "—"
        gbps = f"{d.gbps:.0f}" if d.gbps is not None else "—"
        lines.append(
            f"| {c.shape} | {us(d.device_us)} ({us(d.wall_us)}) | {gbps} | {frac} | {best} | "
            f"{peer} | {rat} | `{d.commit}` {d.date[11:19]} |"
        )
    return "\n".join(lines) + "\n"


def runs_table(records) -> str:
    runs = defaultdict(list)
    for r in records:
        runs[run_key(r)].append(r)
    lines = [
        "| date (UTC) | commit | op | records | copy GB/s | command |",
        "|---|---|---|---|---|---|",
    ]
    for (commit, date), rs in sorted(runs.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        ops = ", ".join(sorted({r.op for r in rs}, key=lambda o: _order(o, OP_ORDER)))
        copy = _range([r.roofline_gbps for r in rs if r.roofline_gbps], lambda x: f"{x:.1f}")
        commands = sorted({plain_command(r.command) for r in rs})
        lines.append(
            f"| {date[:10]} {date[11:19]} | `{commit}` | {ops} | {len(rs)} | {copy} | "
            + "<br>".join(f"`{c}`" for c in commands)
            + " |"
        )
    return "\n".join(lines) + "\n"


def render(paths: list[Path]) -> str:
    paths = sorted(paths)  # the header names them; the order must not depend on the caller
    all_records = []
    for p in paths:
        all_records += read_records(p)
    records = usable(all_records)
    if not records:
        return f"# Recorded results\n\n(no valid records in {', '.join(map(relative, paths))})\n"
    many_cards = len({r.card for r in records}) > 1
    cards = sorted({(r.card, r.sm_count) for r in records})
    torches = sorted({r.torch for r in records})
    tritons = sorted({r.triton for r in records})
    modes = sorted({r.mode for r in records})
    commits = sorted({r.commit for r in records})
    dates = sorted({r.date for r in records})
    pythons = python_versions(paths)
    roof = [r.roofline_gbps for r in records if r.roofline_gbps]
    sheet = sorted({r.datasheet_gbps for r in records if r.datasheet_gbps})

    out = ["# Recorded results\n"]
    out.append(
        f"<!-- Generated by `{COMMAND}` from {', '.join(relative(p) for p in paths)}. "
        f"Do not edit by hand: tests/test_results_md.py fails when this file and the data "
        f"disagree. -->\n"
    )
    if pythons:
        py = "; ".join(sorted({f"Python {v} (header of `{log}`)" for v, log in pythons}))
    else:
        py = "Python version not recorded"
    out.append(
        "- **Card**: "
        + "; ".join(f"{c} ({sm} SMs)" for c, sm in cards)
        + f", mode {', '.join(modes)}.\n"
        f"- **Software**: torch {', '.join(torches)}, triton {', '.join(tritons)}, {py}.\n"
        f"- **Records**: {len(records)} valid of {len(all_records)} in "
        f"{', '.join(f'`{relative(p)}`' for p in paths)}, measured "
        f"{short_date(dates[0])} to {short_date(dates[-1])}, at commits "
        f"{', '.join(f'`{c}`' for c in commits)} (each run below).\n"
        f"- **Roofline**: the card's copy bandwidth measured in each run (a device-to-device copy, "
        f"bytes read + written): {_range(roof, lambda x: f'{x:.0f}')} GB/s "
        f"(datasheet {', '.join(f'{s:.0f}' for s in sheet)} GB/s). % of copy = GB/s / that run's "
        f"copy; a copy is a floor of what the card can move, not a ceiling, so a kernel may "
        f"slightly exceed it.\n"
    )
    out.append(
        "## How these numbers were measured\n\n"
        "- **Device µs**: the sum of the durations of every kernel (memsets and copies included) "
        "one call launched, read from `torch.profiler`, with the L2 flushed before every call by a "
        "kernel of its own (inputs come from HBM, as in training), averaged over the timed calls. "
        "The flush writes, so a call starts with the L2 full of dirty lines, as after a "
        "training step's previous kernel, and pays their write-back; every implementation "
        "alike (`docs/notes/2026-12-03-measuring-the-peers.md` measures it). "
        "A backward is timed alone, after an untimed forward.\n"
        "- **Wall µs** (in parentheses): CUDA events around the call after the flush and a "
        "synchronize, median over the calls: it includes the host's launch overhead, which is "
        "time a user waits for as well.\n"
        "- **GB/s** = the minimal bytes model / device time. The model counts each tensor the op "
        "must read or write once (e = bytes per element; statistics, parameters and workspaces "
        "are not counted), as the records carry it:\n"
        + "".join(f"  - {line}\n" for line in bytes_model(records))
        + "- **peer/normlab** = the fastest peer's device µs / normlab's default device µs, both "
        "from the **same run** (one `bench` invocation, same commit and timestamp, shape by "
        "shape): above 1 normlab's default is faster. Peers: `eager` (the op-by-op PyTorch "
        "reference), `torch` (PyTorch's built-in op where it has one), `compile` "
        "(`torch.compile` of it, `dynamic=False`).\n"
        "- **normlab** is the default (every option `auto`); **best normlab variant** is the "
        "fastest normlab record of that shape in the file, any strategy, layout, form or tile; "
        "where it comes from another run than the default, the cell says so, and it is not a "
        "same-run comparison.\n"
        "- **Worst cell** under each table: the smallest peer/normlab ratio of that table.\n"
    )
    out.append("## Summary\n\n" + summary_table(records))
    out.append(population_section(sorted(REPO.glob(POPULATION_GLOB))))
    out.append(whole_population_section(sorted(REPO.glob(H200_POPULATION_GLOB)), "the H200"))
    out.append(whole_population_section(sorted(REPO.glob(H100_POPULATION_GLOB)), "an H100"))
    out.append(h200_refresh_section(sorted(REPO.glob(H200_REFRESH_GLOB))))
    out.append(static_compile_section(sorted(REPO.glob(STATIC_COMPILE_GLOB))))
    out.append(vocab_section(sorted(REPO.glob(VOCAB_GLOB))))
    out.append(fused_add_section(sorted(REPO.glob(FUSED_ADD_GLOB))))
    out.append("## Runs\n\n" + runs_table(records))
    for key, group in _groups(records):
        group_cells = cells(group)
        if not group_cells:
            continue
        out.append(f"## {_title(key, many_cards)}\n\n" + group_table(group_cells))
        s = summarize(group_cells)
        if s is not None:
            out.append(worst_line(s) + "\n")
    return "\n".join(part for part in out if part)  # a section without records is ""


README = REPO / "README.md"
README_START = "<!-- summary: generated by scripts/results_md.py -->"
README_END = "<!-- /summary -->"


def verdict_table(verdicts) -> str:
    """Per op and direction: members, geomean of best peer / normlab, the members below 0.90x,
    the targets' verdict and the five worst with their best peer."""
    rows = []
    for v in verdicts:
        worst = ", ".join(f"{r.M}×{r.N} {r.dtype} {r.ratio:.2f} ({r.peer})" for r in v.worst)
        rows.append(f"| {OP_NAMES.get(v.op, v.op)} {v.direction} | {v.n} | {v.geomean:.2f}× | "
                    f"{v.below} | {'met' if v.met else 'missed'} | {worst} |")
    return ("| op | members | geomean | below 0.90× | targets | worst five (best peer) |\n"
            "|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n")  # fmt: skip


PEER_NAMES = {"compile": "torch.compile", "liger": "Liger-Kernel"}


def _commits(records) -> str:
    commits = sorted({r.commit for r in records})
    return f"commit{'s' if len(commits) > 1 else ''} " + ", ".join(f"`{c}`" for c in commits)


def peer_bullets(records, lead: str) -> str:
    """The peer shapes' verdict lines (``population.peer_lines``) under ``lead``; "" if none."""
    peers = population.peer_lines(records)
    return f"\n{lead}:\n\n" + "".join(f"- {line}\n" for line in peers) if peers else ""


def population_section(paths: list[Path]) -> str:
    """The shape population against its targets: per op and direction, the geomean of best peer
    / normlab, the members below 0.90x and the five worst (``normlab.bench.population``); then
    the peer shapes recorded beside it, against their own targets."""
    records = [r for p in paths for r in read_records(p)]
    if not records:
        return ""
    members = population.without_peers(records)
    peers_text = peer_bullets(records, "The 11 peer shapes, timed in the same runs (records tagged "
                              f"`shape_set: \"{population.PEERS_SET}\"`, not among the members "
                              "above)")  # fmt: skip
    one_run = len({r.commit for r in members}) == 1
    covers = "gives its commands" if one_run else "says which members each run covers"
    return (
        "## The shape population\n\n"
        f"normlab's default ÷ the fastest of torch, torch.compile and Liger-Kernel measured in the "
        f"same process, over the members in {', '.join(f'`{relative(p)}`' for p in paths)} "
        f"({_commits(members)}; `normlab/data/README.md` {covers}). Targets: every member ≥ "
        f"{population.TARGET_EVERY_SHAPE}×, geomean ≥ "
        f"{population.TARGET_GEOMEAN}×. `python3 benchmarks/norm_population.py --summary FILE` "
        "prints the same for any run; the cliff maps are in notebook 06 and the HTML report.\n\n"
        + verdict_table(population.verdicts(members)) + peers_text
    )


def _dated_runs(paths: list[Path], keep=lambda records: True) -> list[tuple]:
    """(newest record's date, path, records) of each file whose records ``keep`` takes, oldest
    first."""
    runs = ((path, read_records(path)) for path in paths)
    return sorted((max(r.date for r in records), path, records)
                  for path, records in runs if records and keep(records))  # fmt: skip


def _run_before(runs: list[tuple], peers: str = "") -> str:
    """The verdicts of the run before the newest (``_dated_runs``), or "" where there is none."""
    return "".join(
        f"\nThe run before, the same members at {_commits(old)} (`{relative(path)}`){peers}:\n\n"
        + verdict_table(population.verdicts(population.without_peers(old)))
        for _, path, old in runs[-2:-1]
    )  # fmt: skip


def whole_population_section(paths: list[Path], card: str) -> str:
    """The same verdicts over the whole population on one card at later commits than the
    population records, one run (file) a commit: the newest in full, the run before it as a
    table (the targets are the H200's)."""
    runs = _dated_runs(paths)
    if not runs:
        return ""
    _, path, records = runs[-1]
    cards = ", ".join(sorted({r.card for r in records}))
    h100 = card != "the H200"
    return (
        f"### The whole population on {card}\n\n"
        f"The population runs above predate later rules. The same members and peers at "
        f"{_commits(records)} on {'an ' if h100 else 'the '}{cards} (`{relative(path)}`; "
        "`benchmarks/data/README.md` has the command), judged by the same rules"
        + ("; the targets are stated for the H200" if h100 else "") + ":\n\n"
        + verdict_table(population.verdicts(population.without_peers(records)))
        + peer_bullets(records, "The peer shapes in the same run (`benchmarks/data/README.md` "
                       "says which ran"
                       + ("; the 32768×8192 target is the H200's, whose copy bandwidth is 1.4× "
                          "the H100's" if h100 else "") + ")")  # fmt: skip
        + _run_before(runs)
    )


def h200_refresh_section(paths: list[Path]) -> str:
    """The H200 population's worst members, the one-wave members and three peer shapes re-timed
    on an H200 at a later commit than the population, each run on its own: a subset, so its
    geomean is not the population's."""
    runs = [(path, read_records(path)) for path in paths]
    runs = sorted(((path, records) for path, records in runs if records),
                  key=lambda run: min(r.date for r in run[1]))  # fmt: skip
    if not runs:
        return ""
    parts = []
    for path, records in runs:
        parts.append(
            f"`{relative(path)}` ({_commits(records)}, {min(r.date for r in records)[:16]} UTC):"
            "\n\n" + verdict_table(population.verdicts(population.without_peers(records)))
            + peer_bullets(records, "Its peer shapes"))
    return (
        "### The worst members again, on the H200\n\n"
        "The population's members below 0.90× at `00779d0`, the one-wave members and the peer "
        "shapes 4096×4096, 8192×1024 and 32768×8192, re-timed on the H200 after the rules since, "
        "beside the same peers. A subset: its geomean is over these members only (so its "
        "geomean target says little), and its torch.compile peer is compiled over these shapes "
        "alone.\n\n"
        + "\n".join(parts)
    )


def static_compile_section(paths: list[Path]) -> str:
    """The same verdicts over subset runs that also timed torch.compile compiled per member
    (impl ``compile-static``): the newest run without that peer, then with it; the run before
    it with it (the data README lists the rest)."""
    runs = _dated_runs(paths, lambda records: any(r.impl == "compile-static" for r in records))
    if not runs:
        return ""
    _, path, records = runs[-1]
    members = population.without_peers(records)
    default_peers = [r for r in members if r.impl != "compile-static"]
    return (
        "### Against torch.compile compiled per shape\n\n"
        "The population's torch.compile peer is one compiled function called over every member: "
        "after its first recompile it turns dynamic, and a dynamic kernel is slower than the "
        "static one a model of fixed shapes gets. A run over an eighth of the bf16 members "
        f"(`{relative(path)}`, {_commits(members)}) also timed "
        "`torch.compile(..., dynamic=False)`, compiled per member (`compile-static`). Against "
        "the population's peers (torch, torch.compile, Liger-Kernel) on those members:\n\n"
        + verdict_table(population.verdicts(default_peers))
        + "\nWith `compile-static` among the peers, on the same members:\n\n"
        + verdict_table(population.verdicts(members))
        + _run_before(runs, ", with `compile-static`")
        + "\nThe verdicts of the whole population above are against the weaker peer; "
        "`docs/notes/2026-12-03-measuring-the-peers.md` says what this changes, and "
        "`docs/notes/2026-12-03-odd-widths-one-warp.md` and "
        "`docs/notes/2026-12-03-narrow-rows-int32-offsets.md` what changed the narrow and odd "
        "widths between the runs.\n"
    )


def vocab_section(paths: list[Path]) -> str:
    """The losses over the vocabulary population: the same verdicts with no geomean target
    (``benchmarks/vocab_population.py``'s summary, five worst)."""
    records = [r for p in paths for r in read_records(p)]
    verdicts = population.vocab_verdicts(records)
    if not verdicts:
        return ""
    records = [r for r in records if r.shape_set == population.VOCAB_SET]
    impls = sorted({r.impl for r in records if r.valid} - {"normlab"})
    peers = [PEER_NAMES.get(i, i) for i in impls]
    return (
        "## The vocabulary population\n\n"
        f"normlab's default ÷ the fastest of {' and '.join(peers)} measured in the same process, "
        f"over the members in {', '.join(f'`{relative(p)}`' for p in paths)} "
        f"({_commits(records)}; `benchmarks/data/README.md` has the run's log). Target: "
        f"every member ≥ {population.TARGET_EVERY_SHAPE}×; the geomean has none. "
        "`python3 benchmarks/vocab_population.py --summary FILE` prints the same for any run.\n\n"
        + verdict_table(verdicts)
    )


def fused_add_section(paths: list[Path]) -> str:
    """The fused residual add-norms over the population's model members: the same verdicts with
    no geomean target."""
    records = [r for p in paths for r in read_records(p)]
    verdicts = population.verdicts(records, geomean_target=None)
    if not verdicts:
        return ""
    return (
        "## The fused add-norms\n\n"
        "`add_rms_norm` and `add_layer_norm` ÷ the fastest of torch (`x + residual`, then "
        "`F.rms_norm` / `F.layer_norm`, returning both), torch.compile of that and Liger-Kernel's "
        "fused-add RMSNorm, measured in the same process, over the population's model members "
        f"(bf16) in {', '.join(f'`{relative(p)}`' for p in paths)} ({_commits(records)}; "
        "`benchmarks/data/README.md` has the runs' logs). Target: every member ≥ "
        f"{population.TARGET_EVERY_SHAPE}×; the geomean has none.\n\n"
        + verdict_table(verdicts)
    )


README_PEERS = ("eager", "torch", "compile", "liger")  # the order a row names its peers


def _card(records) -> str:
    """The cards' short names ("H200"), for a table cell."""
    return ", ".join(sorted({r.card.removeprefix("NVIDIA ").split()[0] for r in records}))


def _when(records) -> str:
    dates = sorted({r.date[:10] for r in records})
    return dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}"


def _worst_label(op: str, direction: str, shape: str, dtype: str, peer: str) -> str:
    return f"{OP_NAMES.get(op, op)} {direction} {shape} {dtype} ({PEER_NAMES.get(peer, peer)})"


def _readme_row(link: str, records, rows) -> str:
    """One measured set: card, dates and commits, peers, then over ``rows`` (one per op and
    direction: geomean, cells, cells below 0.90x, worst ratio, its label) the geomeans' range,
    the cells below 0.90x and the lowest ratio. A cell is one op, direction, dtype and shape."""
    peers = sorted({r.impl for r in records if r.impl in README_PEERS}, key=README_PEERS.index)
    commits = sorted({r.commit for r in records})
    at = f"`{commits[0]}`" if len(commits) == 1 else f"{len(commits)} commits"
    geos = [row[0] for row in rows]
    geo = f"{geos[0]:.2f}×" if len(geos) == 1 else f"{min(geos):.2f}–{max(geos):.2f}×"
    *_, worst, label = min(rows, key=lambda row: row[3])
    return (f"| {link} | {_card(records)}, {_when(records)}, {at} | "
            f"{', '.join(PEER_NAMES.get(i, i) for i in peers)} | {geo} | "
            f"{sum(row[2] for row in rows)} of {sum(row[1] for row in rows)} | "
            f"{worst:.2f}× {label} |")  # fmt: skip


def _verdict_rows(verdicts) -> list[tuple]:
    rows = []
    for v in verdicts:
        w = v.worst[0]
        rows.append((v.geomean, v.n, v.below, w.ratio,
                     _worst_label(v.op, v.direction, f"{w.M}×{w.N}", w.dtype, w.peer)))
    return rows


# The README's measured sets after the benchmark's shapes: (glob, anchor in docs/results.md,
# name, newest run only). A newest-only set is a later commit's run beside an older record.
README_SETS = (
    (POPULATION_GLOB, "the-shape-population", "the norm shape population", False),
    (H200_POPULATION_GLOB, "the-whole-population-on-the-h200", "the same population", True),
    (H100_POPULATION_GLOB, "the-whole-population-on-an-h100", "the same population", True),
    (H200_REFRESH_GLOB, "the-worst-members-again-on-the-h200",
     "its worst members again, the newest run", True),
    (VOCAB_GLOB, "the-vocabulary-population", "the vocabulary population, every loss", False),
    (FUSED_ADD_GLOB, "the-fused-add-norms", "the fused add-norms' model members", False),
)


def _set_row(paths: list[Path], anchor: str, name: str, newest_only: bool) -> str | None:
    """A population's README row (None without records): vocabulary records judged by
    ``population.vocab_verdicts``, the others by ``population.verdicts`` less the peer shapes."""
    runs = _dated_runs(paths)
    if newest_only:
        runs = runs[-1:]
    records = [r for _, _, rs in runs for r in rs]
    if any(r.shape_set == population.VOCAB_SET for r in records):
        verdicts = population.vocab_verdicts(records)
        records = [r for r in records if r.shape_set == population.VOCAB_SET]
    else:
        records = population.without_peers(records)
        verdicts = population.verdicts(records, geomean_target=None)
    if not verdicts:
        return None
    return _readme_row(f"[{name}](docs/results.md#{anchor})", records, _verdict_rows(verdicts))


def readme_summary(records, sets=None) -> str:
    """The README's one results table: per measured set (the benchmark's shapes in ``records``,
    then each of ``sets``, ``(paths, anchor, name, newest_only)``, by default README_SETS under
    the repository) its card, dates and commits, peers, the range of its geomeans over ops and
    directions, its cells below 0.90x and its worst cell, linked to its section of
    docs/results.md."""
    if sets is None:
        sets = [(sorted(REPO.glob(glob)), *rest) for glob, *rest in README_SETS]
    records = usable(records)
    shape_rows = []
    for (_, (_, op), (_, direction), dtype), group in _groups(records):
        group_cells = [c for c in cells(group) if c.ratio is not None]
        s = summarize(group_cells)
        if s is not None:
            w = s.worst
            below = sum(c.ratio < population.TARGET_EVERY_SHAPE for c in group_cells)
            shape_rows.append((s.geomean, s.shapes, below, w.ratio,
                               _worst_label(op, direction, w.shape, dtype, w.peer.impl)))
    lines = [
        "| measured | card, when, at | peers | geomean best peer ÷ normlab, per op and direction | "
        "cells below 0.90× | worst |",
        "|---|---|---|---|---|---|",
    ]
    if shape_rows:
        lines.append(_readme_row("[the benchmark's shapes](docs/results.md#summary), norms and "
                                 "losses", records, shape_rows))  # fmt: skip
    lines += [row for row in (_set_row(*s) for s in sets) if row]
    return "\n".join(lines) + "\n"


def readme_with_summary(readme: str, table: str) -> str:
    """README text with the summary table between its two markers."""
    head, rest = readme.split(README_START, 1)
    _, tail = rest.split(README_END, 1)
    return f"{head}{README_START}\n{table.rstrip()}\n{README_END}{tail}"


def default_paths() -> list[Path]:
    return sorted(REPO.glob(DATA_GLOB))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path, help=f"records (default: {DATA_GLOB})")
    parser.add_argument("-o", "--output", default=None,
                        help="file to write, - = stdout (default: docs/results.md for the "
                             "shipped data, stdout for files given)")
    parser.add_argument("--summary", action="store_true", help="print only the summary table")
    parser.add_argument("--check", action="store_true", help="exit 1 if the output file differs")
    args = parser.parse_args(argv)
    paths = args.files or default_paths()
    if args.output is None:
        args.output = "-" if args.files else str(OUTPUT)
    if args.summary:
        records = []
        for p in paths:
            records += read_records(p)
        sys.stdout.write(summary_table(records))
        return 0
    text = render(paths)
    shipped = not args.files
    if shipped:  # the README's summary table comes from the same records
        records = [r for p in paths for r in read_records(p)]
        readme = readme_with_summary(README.read_text(encoding="utf-8"), readme_summary(records))
    if args.check:
        out = Path(args.output)
        current = out.read_text(encoding="utf-8") if out.exists() else ""
        stale = [str(out)] if current != text else []
        if shipped and README.read_text(encoding="utf-8") != readme:
            stale.append("README.md")
        if stale:
            print(f"{', '.join(stale)} out of date: run `{COMMAND}`", file=sys.stderr)
            return 1
        return 0
    if args.output == "-":
        sys.stdout.write(text)
    else:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(text, encoding="utf-8")
    if shipped:
        README.write_text(readme, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
