"""docs/results.md is generated from normlab/data/*.jsonl by scripts/results_md.py: the committed
file must equal a fresh generation, and the ratio / geometric-mean logic is checked on records
made by hand."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

from normlab.bench.records import Record

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "results_md.py"
DOC = REPO / "docs" / "results.md"


@pytest.fixture(scope="module")
def results_md():
    spec = importlib.util.spec_from_file_location("results_md", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while being defined
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


def _record(impl, M, N, device_us, *, strategy=None, layout="auto", commit="aaaaaaa",
            date="2026-11-30T00:00:00Z", op="rms_norm", direction="fwd") -> Record:  # fmt: skip
    nbytes = 2 * M * N * 2
    return Record(
        op=op, impl=impl, strategy=strategy, layout=layout if impl == "normlab" else None,
        M=M, N=N, dtype="bf16", direction=direction, device_us=device_us,
        wall_us=device_us + 100.0, bytes=nbytes, gbps=nbytes / device_us / 1e3,
        roofline_gbps=4000.0, frac_roofline=nbytes / device_us / 1e3 / 4000.0,
        datasheet_gbps=4800.0, peak_extra_bytes=0, kernels={}, card="Test GPU", sm_count=2,
        torch="2.0", triton="3.0", mode="gpu", date=date, commit=commit, command="python -m x",
    )  # fmt: skip


def test_committed_results_md_is_current(results_md, tmp_path):
    out = tmp_path / "results.md"
    assert results_md.main(["-o", str(out)]) == 0
    fresh = out.read_text(encoding="utf-8")
    committed = DOC.read_text(encoding="utf-8") if DOC.exists() else ""
    assert committed == fresh, (
        "docs/results.md differs from what normlab/data/*.jsonl gives: "
        "run `python scripts/results_md.py` and commit docs/results.md"
    )


def test_generation_is_deterministic(results_md):
    paths = results_md.default_paths()
    assert paths, "no records under normlab/data/"
    assert results_md.render(paths) == results_md.render(list(reversed(paths)))


def test_ratio_geomean_and_worst(results_md):
    records = [
        # shape A: normlab 10 µs, compile 20 µs in the same run -> ratio 2
        _record("normlab", 1024, 1024, 10.0),
        _record("compile", 1024, 1024, 20.0),
        _record("torch", 1024, 1024, 25.0),
        # shape B: normlab 40 µs, torch 20 µs in the same run -> ratio 0.5, the worst cell
        _record("normlab", 2048, 1024, 40.0),
        _record("torch", 2048, 1024, 20.0),
        # a faster peer of another run (other timestamp) is no same-run comparison: ignored
        _record("compile", 2048, 1024, 1.0, date="2026-11-30T01:00:00Z"),
        # a variant is the best normlab record but never the default
        _record("normlab", 2048, 1024, 30.0, layout="row", date="2026-11-30T02:00:00Z"),
    ]
    cells = results_md.cells(records)
    assert [(c.M, c.N) for c in cells] == [(1024, 1024), (2048, 1024)]
    a, b = cells
    assert a.peer.impl == "compile" and a.ratio == pytest.approx(2.0)
    assert b.peer.impl == "torch" and b.ratio == pytest.approx(0.5)
    assert b.default.device_us == 40.0 and b.best.layout == "row"

    s = results_md.summarize(cells)
    assert s.shapes == 2 and s.faster == 1
    assert s.geomean == pytest.approx(math.sqrt(2.0 * 0.5))
    assert s.worst is b
    line = results_md.worst_line(s)
    assert "2048×1024" in line and "0.500×" in line and "100.0% longer" in line

    table = results_md.summary_table(records)
    assert "| RMSNorm | fwd | bf16 | 2 | 1 of 2 | 1.000× | 0.500× (2048×1024, torch) |" in table
    # the README's row of the benchmark's shapes: one group, its geomean, one cell below 0.90x
    summary = results_md.readme_summary(records, sets=[])
    assert summary.splitlines()[2] == (
        "| [the benchmark's shapes](docs/results.md#summary), norms and losses | Test, "
        "2026-11-30, `aaaaaaa` | torch, torch.compile | 1.00× | 1 of 2 | "
        "0.50× RMSNorm fwd 2048×1024 bf16 (torch) |"
    ), summary


def test_shape_without_peer_has_no_ratio(results_md):
    cells = results_md.cells([_record("normlab", 64, 64, 5.0)])
    assert cells[0].peer is None and cells[0].ratio is None
    assert results_md.summarize(cells) is None


def test_commands_shown_without_paths(results_md):
    cmd = "python -m normlab bench --out /root/out/x.jsonl --op rms_norm --shapes /abs/dir/s.txt"
    assert results_md.plain_command(cmd) == "python -m normlab bench --op rms_norm --shapes s.txt"


def _write_gz(path, records):
    import dataclasses
    import gzip
    import json

    with gzip.open(path, "wt", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(dataclasses.asdict(r)) + "\n")
    return path


def test_population_section_leaves_the_peer_shapes_to_their_own_lines(results_md, tmp_path):
    import dataclasses

    def tagged(rec, shape_set):
        return dataclasses.replace(rec, shape_set=shape_set, strategy=None, layout=None)

    pop = [tagged(_record("normlab", 64, 4096, 10.0), "population"),
           tagged(_record("torch", 64, 4096, 12.0), "population"),
           # a peer shape where normlab is slower (0.50x): not a population member
           tagged(_record("normlab", 4096, 4096, 20.0), "peers"),
           tagged(_record("compile", 4096, 4096, 10.0), "peers")]  # fmt: skip
    path = _write_gz(tmp_path / "card-2031-01-01-population.jsonl.gz", pop)
    text = results_md.population_section([path])
    assert "| RMSNorm fwd | 1 | 1.20× | 0 | met | 64×4096 bf16 1.20 (torch) |" in text
    assert "4096×4096" not in text  # the peer shape is in no row of the table
    assert "- peers rms_norm fwd: 1 shapes, lowest 4096x4096 0.50x (target >= 0.98x): missed" \
        in text  # fmt: skip
    # its README row leaves the peer shape out too
    row = results_md.readme_summary([], sets=[([path], "the-shape-population", "pop", False)])
    assert row.splitlines()[2] == (
        "| [pop](docs/results.md#the-shape-population) | Test, 2026-11-30, `aaaaaaa` | torch | "
        "1.20× | 0 of 1 | 1.20× RMSNorm fwd 64×4096 bf16 (torch) |")


def test_readme_row_of_a_later_run_takes_the_newest_run_alone(results_md, tmp_path):
    """A newest-only set (a later commit's run beside an older record) shows its newest run: a
    member only the older run timed is in no count, and the row names one commit."""
    import dataclasses

    def run(commit, date, cells):
        return [dataclasses.replace(_record(impl, m, 4096, us, commit=commit, date=date),
                                    shape_set="population", strategy=None, layout=None)
                for m, normlab_us in cells
                for impl, us in (("normlab", normlab_us), ("torch", 12.0))]  # fmt: skip

    old = _write_gz(tmp_path / "old.jsonl.gz",
                    run("aaaaaaa", "2026-11-30T00:00:00Z", [(64, 24.0), (128, 24.0)]))
    new = _write_gz(tmp_path / "new.jsonl.gz", run("bbbbbbb", "2026-12-01T00:00:00Z", [(64, 10.0)]))
    newest = results_md.readme_summary([], sets=[([old, new], "h", "later", True)])
    assert newest.splitlines()[2] == (
        "| [later](docs/results.md#h) | Test, 2026-12-01, `bbbbbbb` | torch | 1.20× | 0 of 1 | "
        "1.20× RMSNorm fwd 64×4096 bf16 (torch) |")
    both = results_md.readme_summary([], sets=[([old, new], "h", "all", False)])
    assert both.splitlines()[2] == (
        "| [all](docs/results.md#h) | Test, 2026-11-30 to 2026-12-01, 2 commits | torch | 0.77× | "
        "1 of 2 | 0.50× RMSNorm fwd 128×4096 bf16 (torch) |")


def test_vocab_section_judges_every_member_without_a_geomean_target(results_md, tmp_path):
    import dataclasses

    recs = [dataclasses.replace(_record(impl, m, 32000, us, op="cross_entropy",
                                        direction="fwd+bwd", layout=None),
                                shape_set="vocab_population")
            for impl, m, us in (("normlab", 8, 10.0), ("compile", 8, 8.5),  # 0.85x
                                ("normlab", 16, 10.0), ("liger", 16, 30.0))]  # 3.00x
    path = _write_gz(tmp_path / "vocab.jsonl.gz", recs)
    text = results_md.vocab_section([path])
    assert "fastest of torch.compile and Liger-Kernel" in text
    assert ("| label cross-entropy fwd+bwd | 2 | 1.60× | 1 | missed | "
            "8×32000 bf16 0.85 (compile), 16×32000 bf16 3.00 (liger) |") in text
    row = results_md.readme_summary([], sets=[([path], "the-vocabulary-population", "v", False)])
    assert row.splitlines()[2] == (
        "| [v](docs/results.md#the-vocabulary-population) | Test, 2026-11-30, `aaaaaaa` | "
        "torch.compile, Liger-Kernel | 1.60× | 1 of 2 | "
        "0.85× label cross-entropy fwd+bwd 8×32000 bf16 (torch.compile) |")
    assert results_md.vocab_section([]) == ""
