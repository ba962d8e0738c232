"""The CLI: `python -m normlab info|bench|report`, each with --help, run as a user runs it."""

import subprocess
import sys
import types

import pytest

import normlab
from normlab import __main__ as cli
from normlab.bench import records


def _run(*args, timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "normlab", *args], capture_output=True, text=True, timeout=timeout
    )


def test_info():
    proc = _run("info", "--copy-mib", "8")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    import torch
    import triton

    assert f"torch           {torch.__version__}" in out
    assert f"triton          {triton.__version__}" in out
    assert "measured copy" in out and "GB/s" in out and "SMs" in out and "L2" in out
    if normlab.INTERPRET:
        assert "mode            interpret" in out
        assert "CPU/interpreter timings: say nothing about GPU bandwidth" in out


@pytest.mark.skipif(not normlab.INTERPRET, reason="checks the CPU labelling of --quick")
def test_bench_quick_on_cpu(tmp_path):
    out = tmp_path / "quick.csv"
    proc = _run("bench", "--quick", "--reps", "2", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert "CPU/interpreter timings: say nothing about GPU bandwidth" in text
    assert "copy roofline:" in text
    header = next(line for line in text.splitlines() if line.startswith("op "))
    for column in (
        "impl",
        "shape",
        "dir",
        "device µs",
        "wall µs",
        "GB/s",
        "% copy",
        "Δpeak MiB",
        "vs best",
    ):
        assert column in header
    recs = records.read_records(out)
    # baselines only (interpreted normlab kernels are too slow for a smoke run): rms_norm
    # eager+torch and layer_norm torch, 2 quick shapes, fwd and bwd
    assert {(r.op, r.impl) for r in recs} == {
        ("rms_norm", "eager"),
        ("rms_norm", "torch"),
        ("layer_norm", "torch"),
    }
    assert len(recs) == 3 * 2 * 2
    assert all(r.mode == "interpret" and r.valid and r.gbps > 0 for r in recs)
    assert all(r.command.startswith("python -m normlab bench --quick") for r in recs)
    assert "skipped: rms_norm compile" in text  # said, not silent
    assert "[" in proc.stderr and "done" in proc.stderr  # the progress counter


@pytest.mark.parametrize("args", [(), ("info",), ("bench",)])
def test_help(args, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main([*args, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: normlab")
    if args == ():
        assert "{info,bench,report}" in out
    if args == ("info",):
        assert "--no-copy" in out
    if args == ("bench",):
        for flag in (
            "--op",
            "--impl",
            "--strategy",
            "--shapes",
            "--dtype",
            "--direction",
            "--reps",
            "--quick",
            "--out",
        ):
            assert flag in out


def test_help_via_subprocess():
    proc = _run("bench", "--help")
    assert proc.returncode == 0 and "--shapes" in proc.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["bench", "--shapes", "12"], "bad shape '12'"),
        (["bench", "--op", "softmax"], "unknown op 'softmax'"),
        (["bench", "--impl", "apex"], "unknown impl(s) apex"),
        (["bench", "--dtype", "int8"], "unknown dtype 'int8'"),
    ],
)
def test_bench_usage_errors(args, message, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(args)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_no_subcommand_is_an_error(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main([])
    assert exc.value.code == 2


def test_report_is_delegated_lazily(monkeypatch):
    seen = []
    fake = types.ModuleType("normlab.report")
    fake.main = lambda argv: seen.append(argv) or 0
    monkeypatch.setitem(sys.modules, "normlab.report", fake)
    # An earlier import of the real module also binds it as an attribute of the package.
    monkeypatch.setattr(normlab, "report", fake, raising=False)
    assert cli.main(["report", "--card", "NVIDIA H200", "-x"]) == 0
    assert seen == [["--card", "NVIDIA H200", "-x"]]
