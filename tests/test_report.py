"""normlab.report: the HTML report of results files, from synthetic records (no GPU, no browser)."""

import dataclasses
import json
import re
import subprocess
import sys

import pytest

pytest.importorskip("plotly", reason="normlab report needs the lab extra (plotly)")

from plotly.offline import get_plotlyjs

from normlab import report
from normlab.bench.records import Record, write_csv, write_jsonl

# Synthetic numbers for the tests only (not measurements). At each shape the fastest valid peer
# is liger (10 µs); normlab takes 8 µs, so its speed-up is 1.25×; an invalid torch record at
# 1 µs must not become the best peer.
US = {"eager": 20.0, "liger": 10.0, "normlab": 8.0, "torch": 1.0}
SHAPES = [(1024, 8192), (4096, 4096), (61, 1000)]


def _record(impl="normlab", M=1024, N=8192, *, us=None, **overrides) -> Record:
    us = US[impl] if us is None else us
    n_bytes = 3 * M * N * 2
    fields = {
        "op": "rms_norm", "impl": impl, "strategy": "two_stage" if impl == "normlab" else None,
        "layout": "row" if impl == "normlab" else None, "M": M, "N": N, "dtype": "bf16",
        "direction": "bwd", "device_us": us, "wall_us": us * 1.1, "bytes": n_bytes,
        "gbps": n_bytes / us / 1e3, "roofline_gbps": 4000.0,
        "frac_roofline": n_bytes / us / 1e3 / 4000.0, "datasheet_gbps": 4800.0,
        "peak_extra_bytes": 0, "kernels": {"main": us}, "card": "Synthetic Card 9000",
        "sm_count": 99, "torch": "2.99.0", "triton": "3.99.0", "mode": "gpu",
        "date": "2031-02-03T04:05:06Z", "commit": "0123456789ab",
        "command": "python -m normlab bench", "note": "",
    }
    fields.update(overrides)
    return Record(**fields)


def _gpu_records() -> list[Record]:
    recs = [_record(impl, M, N) for M, N in SHAPES for impl in ("normlab", "eager", "liger")]
    recs.append(_record("torch", 4096, 4096, valid=False, note="1 µs: faster than the copy"))
    recs.append(_record("liger", 256, 512, op="layer_norm", direction="fwd", dtype="fp16"))
    return recs


def _interpret_records() -> list[Record]:
    return [_record(impl, 64, 256, card="CPU x86_64", mode="interpret", sm_count=4,
                    date="2031-02-04T00:00:00Z", us=US[impl] * 1000)
            for impl in ("normlab", "eager")]


def _row(html: str, *cells: str) -> str:
    """The one table row that holds all ``cells`` (in order)."""
    rows = [r for r in re.findall(r"<tr[^>]*>.*?</tr>", html)
            if re.search(".*?".join(re.escape(f">{c}<") for c in cells), r)]
    assert len(rows) == 1, (cells, rows)
    return rows[0]


def test_report_gpu_run(tmp_path, capsys):
    results = write_jsonl(_gpu_records(), tmp_path / "h200.jsonl")
    out = tmp_path / "sub" / "report.html"
    assert report.main([str(results), "-o", str(out)]) == 0
    assert f"wrote {out}: 11 records from 1 file(s)" in capsys.readouterr().out
    html = out.read_text(encoding="utf-8")

    # self-contained: plotly.js embedded exactly once, nothing loaded from elsewhere
    assert html.count(get_plotlyjs()[:200]) == 1
    assert not re.search(r"<(script|link)[^>]+(src|href)=", html)
    # rms_norm bwd: GB/s, roofline, speed-up; layer_norm fwd (a peer only): GB/s, roofline
    assert html.count("Plotly.newPlot(") == 5
    assert html.index(get_plotlyjs()[:200]) < html.index("Plotly.newPlot(")
    # card, versions, commit, date
    run = _row(html, "Synthetic Card 9000", "gpu", "99", "2.99.0", "3.99.0", "0123456789ab",
               "2031-02-03", "4,000", "4,800", "11")
    assert 'class="run"' in run
    # one table row per record, the invalid one struck through and named
    assert html.count('<tr class="record') == 11
    assert html.count('<tr class="record invalid">') == 1
    assert "invalid: 1 µs: faster than the copy" in _row(html, "torch", "4096×4096")
    assert "1 record(s) marked invalid" in html
    # ratio against the best valid peer per shape (liger, not the invalid torch)
    for M, N in SHAPES:
        shape = f"{M}×{N}"
        assert _row(html, "normlab · two_stage · row", shape, "8.00", "10.00", "1.25×")
        assert "best peer µs ÷ this µs" in html
        assert _row(html, "eager", shape, "20.00", "22.00").endswith(
            "<td>0.50×</td><td class=\"text\">-</td></tr>")
    gbps = 3 * 1024 * 8192 * 2 / 8.0 / 1e3  # bytes model ÷ device time
    row = _row(html, "normlab · two_stage · row", "1024×8192", "8.00", "8.80")
    assert f">{gbps:,.1f}<" in row
    assert "No shape has both a normlab run and a peer run" in html  # the layer_norm section
    assert "interpreter timings" not in html


def test_report_several_files_and_csv(tmp_path):
    gpu = write_jsonl(_gpu_records(), tmp_path / "gpu.jsonl")
    cpu = write_csv(_interpret_records(), tmp_path / "cpu.csv")
    out = tmp_path / "both.html"
    assert report.main([str(gpu), str(cpu), "-o", str(out), "--title", "two <runs>"]) == 0
    html = out.read_text(encoding="utf-8")
    assert "<title>two &lt;runs&gt;</title>" in html
    assert html.count(get_plotlyjs()[:200]) == 1
    assert html.count('<tr class="record') == 11 + 2
    assert _row(html, "CPU x86_64", "interpret", "4") and _row(html, "Synthetic Card 9000")
    # a file column once there are several files; the CPU records name theirs
    assert _row(html, "normlab · two_stage · row", "64×256", "8,000.0", "eager", "2.50×",
                "cpu.csv")
    # the interpreter caveat, on the page and in that section's chart titles
    assert "say nothing about GPU bandwidth" in html
    title = "rms_norm · bwd · bf16: effective bandwidth vs shape (interpreter timings)"
    assert json.dumps(title)[1:-1] in html  # in plotly's JSON, which escapes the "·"
    # one section per card/op/direction/dtype, listed in the contents
    assert html.count('<h2 id="') == 3
    assert html.count("<li><a href=\"#") == 3


def _run_cli(*args):
    return subprocess.run([sys.executable, "-m", "normlab", "report", *map(str, args)],
                          check=False, capture_output=True, text=True, timeout=180)


def test_report_cli(tmp_path):
    results = write_jsonl(_gpu_records(), tmp_path / "h200.jsonl")
    out = tmp_path / "cli.html"
    proc = _run_cli(results, "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert f"wrote {out}: 11 records" in proc.stdout
    html = out.read_text(encoding="utf-8")
    assert html.count(get_plotlyjs()[:200]) == 1 and html.count('<tr class="record') == 11


def _malformed(tmp_path):
    """A JSONL file whose third line is a record with a text where M (an int) belongs."""
    good = json.dumps(dataclasses.asdict(_record()))
    bad = json.dumps({**dataclasses.asdict(_record()), "M": "many"})
    path = tmp_path / "broken.jsonl"
    path.write_text(f"{good}\n{good}\n{bad}\n", encoding="utf-8")
    return path


def test_report_cli_malformed_file(tmp_path):
    out = tmp_path / "never.html"
    proc = _run_cli(_malformed(tmp_path), "-o", out)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "Traceback" not in proc.stderr
    # on a CPU, importing normlab first notes the interpreter mode on stderr
    lines = [line for line in proc.stderr.splitlines()
             if not line.startswith("normlab: no CUDA")]
    assert lines == [(f"normlab report: error: {tmp_path / 'broken.jsonl'}:3: field 'M' must "
                      "be an integer, got 'many'")]
    assert not out.exists()


def test_report_to_a_place_it_cannot_write(tmp_path, capsys):
    # -o naming a folder, or under a file: one line and exit 2, the page not half written.
    results = write_jsonl(_gpu_records(), tmp_path / "h200.jsonl")
    for out in (tmp_path, results / "r.html"):  # (the OS's reason varies: not asserted)
        assert report.main([str(results), "-o", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"normlab report: error: cannot write {out}: "), err
        assert "\n" not in err and "Traceback" not in err
    assert results.is_file()


@pytest.mark.parametrize("case, expected", [
    ("not_json", "bad.jsonl:2: not valid JSON"),
    ("missing_field", "bad.jsonl:1: missing field(s) gbps"),
    ("csv_short_row", "bad.csv:3: fewer values than header fields"),
    ("empty", "bad.jsonl: no records"),
    ("missing_file", "nowhere.jsonl: no such results file"),
    ("suffix", "bad.txt: unknown record format '.txt'"),
    ("binary", "bad.jsonl: not UTF-8 text"),
])
def test_report_bad_input(tmp_path, capsys, case, expected):
    good = dataclasses.asdict(_record())
    path = tmp_path / ("bad.csv" if case == "csv_short_row" else "bad.txt" if case == "suffix"
                       else "nowhere.jsonl" if case == "missing_file" else "bad.jsonl")
    if case == "not_json":
        path.write_text(json.dumps(good) + "\n{'M': 1,}\n")
    elif case == "missing_field":
        path.write_text(json.dumps({k: v for k, v in good.items() if k != "gbps"}) + "\n")
    elif case == "csv_short_row":
        write_csv([_record(), _record()], path)
        lines = path.read_text().splitlines()
        path.write_text("\n".join([*lines[:2], lines[2].rsplit(",", 10)[0]]) + "\n")
    elif case == "empty":
        path.write_text("\n")
    elif case == "suffix":
        path.write_text(json.dumps(good) + "\n")
    elif case == "binary":
        path.write_bytes(b"\xff\xfe\x00garbage\n")
    good_file = write_jsonl([_record()], tmp_path / "good.jsonl")
    out = tmp_path / "r.html"
    assert report.main([str(good_file), str(path), "-o", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err.strip()
    assert "\n" not in err and err.startswith("normlab report: error: ")
    assert str(tmp_path / expected.split(":")[0]) in err and expected in err
    assert not out.exists()


def test_report_usage_errors(capsys):
    with pytest.raises(SystemExit) as exc:
        report.main([])
    assert exc.value.code == 2
    assert "RESULTS" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        report.main(["--help"])
    assert exc.value.code == 0
    assert "Opens offline (plotly.js is embedded)" in capsys.readouterr().out


def test_report_draws_a_cliff_map_of_a_population(tmp_path):
    shapes = [(1, 768), (4096, 4096), (10_000_000, 5)]
    recs = [_record(impl, M, N, strategy=None, layout=None, shape_set="population",
                    us=us * (2.0 if (M, N) == (1, 768) and impl == "normlab" else 1.0))
            for M, N in shapes for impl, us in (("normlab", 8.0), ("liger", 10.0))]
    results = write_jsonl(recs + _gpu_records(), tmp_path / "pop.jsonl")
    html = report.build_html(report.load([results]))
    assert '<h2 id="cliff-maps">Cliff maps</h2>' in html
    assert 'href="#cliff-maps"' in html
    # figure text sits in plotly's JSON, non-ASCII escaped
    for text in ("rms_norm · bwd · bf16 over the population (Synthetic Card 9000): normlab ÷ best",
                 "normlab faster at 2 of 3 shapes; worst 1.60× at 1×768 (best peer liger)"):
        assert json.dumps(text)[1:-1] in html
    # without population records there is no cliff-map section
    plain = report.build_html(report.load([write_jsonl(_gpu_records(), tmp_path / "p.jsonl")]))
    assert "cliff-maps" not in plain
