"""The CLI: `python -m normlab info|bench|report`, each with --help, run as a user runs it."""

import importlib
import json
import os
import re
import subprocess
import sys
import types
from pathlib import Path

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


@pytest.mark.slow  # the CLI end to end, every baseline; test_bench covers the sweep quickly
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
    # the product and the baselines: rms_norm eager+torch+normlab and layer_norm torch+normlab,
    # 2 quick shapes, fwd and bwd; normlab's rows are labelled as interpreter runs
    assert {(r.op, r.impl) for r in recs} == {
        ("rms_norm", "eager"),
        ("rms_norm", "torch"),
        ("rms_norm", "normlab"),
        ("layer_norm", "torch"),
        ("layer_norm", "normlab"),
    }
    assert len(recs) == 5 * 2 * 2
    table_rows = [line.split() for line in text.splitlines() if line.split()[:2] in
                  (["rms_norm", "normlab"], ["layer_norm", "normlab"])]  # fmt: skip
    assert len(table_rows) == 2 * 2 * 2
    assert "# normlab rows: its Triton kernels run in the interpreter on CPU" in text
    assert all(r.mode == "interpret" and r.valid and r.gbps > 0 for r in recs)
    assert all(r.command.startswith("python -m normlab bench --quick") for r in recs)
    assert "skipped: rms_norm compile" in text  # said, not silent
    assert "[" in proc.stderr and "done" in proc.stderr  # the progress counter
    assert "elapsed, ETA" in proc.stderr


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
    "args, flag, message",
    [
        (["bench", "--shapes", "12"], "--shapes", "bad shape '12'"),
        (["bench", "--shapes", "0x5"], "--shapes", "bad shape '0x5'"),
        (["bench", "--shapes", "peer"], "--shapes", "bad shape 'peer'"),
        (["bench", "--shapes", ","], "--shapes", "no shapes"),
        (["bench", "--op", "softmax"], "--op", "unknown op 'softmax'"),
        (["bench", "--op", "rms_norm,"], "--op", "empty item"),
        (["bench", "--op", "all,rms_norm"], "--op", "'all' cannot be combined"),
        (["bench", "--impl", "apex"], "--impl", "unknown impl 'apex'"),
        (["bench", "--op", "reverse_kl", "--impl", "quack"], "--impl", "quack implements none"),
        (["bench", "--dtype", "int8"], "--dtype", "unknown dtype 'int8'"),
        (["bench", "--dtype", "fp64"], "--dtype", "unknown dtype 'fp64'"),
        (["bench", "--dtype", "bf16,float64"], "--dtype", "unknown dtype 'float64'"),
        (["bench", "--direction", "sideways"], "--direction", "unknown direction 'sideways'"),
        (["bench", "--op", "reverse_kl", "--direction", "bwd"], "--direction", "applies to none"),
        (["bench", "--strategy", "fast"], "--strategy", "unknown strategy 'fast'"),
        (["bench", "--layout", "column"], "--layout", "unknown layout 'column'"),
        (["bench", "--form", "blocked"], "--form", "unknown form 'blocked'"),
        (["bench", "--block-cap", "3"], "--block-cap", "bad block cap '3'"),
        (["bench", "--block-cap", "131072"], "--block-cap", "bad block cap '131072'"),
        (["bench", "--block-cap", "big"], "--block-cap", "bad block cap 'big'"),
        (["bench", "--op", "rms_norm", "--block-cap", "4096"], "--block-cap", "run has none"),
        (["bench", "--op", "copy,reverse_kl", "--impl", "torch", "--direction", "fwd+bwd"],
         "nothing to run", "--impl and --direction"),  # fmt: skip
        (["bench", "--op", "reverse_kl", "--strategy", "atomic"], "--strategy", "run has none"),
        (["bench", "--impl", "torch", "--layout", "row"], "--layout", "this run has none"),
        (["bench", "--reps", "0"], "--reps", "0 is below 1"),
        (["bench", "--reps", "five"], "--reps", "'five' is not an integer"),
        (["bench", "--warmup", "-1"], "--warmup", "-1 is below 0"),
        (["bench", "--model", "huge"], "--model", "invalid choice: 'huge'"),
        (["bench", "--out", "records.txt"], "--out", "expected a .jsonl or .csv file name"),
        (["bench", "--out", f"{__file__}/r.csv"], "--out", "is not a folder"),
        # a folder no one can make, root included (Linux's /proc): refused before the run
        *([(["bench", "--out", "/proc/normlab/r.csv"], "--out", "cannot make /proc/normlab")]
          if os.path.isdir("/proc/self") else []),
        (["bench", "--unknown-flag"], "unrecognized arguments", "--unknown-flag"),
        (["bench", "--overhead", "--out", "o.jsonl"], "--overhead", "writes FILE.json"),
        (["bench", "--out", "r.json"], "--out FILE.json", "is for --overhead"),
        (["bench", "--overhead", "--op", "copy"], "--overhead", "--op named none"),
        (["bench", "--impl", "normlab+compile"], "--impl", "normlab+compile implements none"),
        (["info", "--copy-mib", "0"], "--copy-mib", "0 is below 1"),
        (["info", "--copy-mib", "-5"], "--copy-mib", "-5 is below 1"),
        (["info", "--copy-mib", "1.5"], "--copy-mib", "'1.5' is not an integer"),
        (["info", "--no-copy", "--copy-mib", "8"], "--copy-mib", "not allowed with --no-copy"),
        (["frobnicate"], "invalid choice", "frobnicate"),
    ],
)
def test_bad_arguments_exit_nonzero_with_one_line(args, flag, message, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(args)
    assert exc.value.code == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1, captured.err  # one line, no usage block
    assert "error:" in lines[0] and flag in lines[0] and message in lines[0], lines[0]
    assert "copy roofline" not in captured.out  # refused before any measurement


def test_bench_form_reaches_the_compiled_loss(capsys):
    # --form applies to normlab inside torch.compile too (skipped on CPU, with its reason).
    args = ["bench", "--op", "cross_entropy", "--shapes", "4x64", "--impl", "normlab+compile",
            "--form", "split", "--no-progress"]  # fmt: skip
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    if normlab.INTERPRET:
        assert "skipped: cross_entropy normlab+compile: skipped on CPU" in out


def test_bench_overhead_writes_host_costs(tmp_path, capsys):
    """bench --overhead: host µs and wall µs per (op, impl, direction) in a table and a JSON
    file; on CPU the table says they are interpreter figures."""
    import json

    out = tmp_path / "overhead.json"
    assert cli.main(["bench", "--overhead", "--op", "rms_norm", "--impl", "normlab,torch",
                     "--no-progress", "--out", str(out)]) == 0  # fmt: skip
    text = capsys.readouterr().out
    data = json.loads(out.read_text())
    pairs = {(c["impl"], c["direction"]) for c in data["costs"]}
    assert pairs == {(i, d) for i in ("normlab", "torch") for d in ("fwd", "fwd+bwd")}
    assert all(c["host_us"] > 0 and c["wall_us"] > 0 for c in data["costs"])
    assert data["meta"]["command"].startswith("python -m normlab bench --overhead")
    assert "normlab ÷ torch" in text
    if normlab.INTERPRET:
        assert "Interpreter figures" in text and data["costs"][0]["mode"] == "interpret"


def test_bench_overhead_takes_normlab_inside_compile(tmp_path, capsys):
    """--impl normlab+compile is an --overhead impl (left out on CPU, where a compile per case
    teaches nothing)."""
    import json

    out = tmp_path / "overhead.json"
    assert cli.main(["bench", "--overhead", "--op", "rms_norm", "--impl", "torch,normlab+compile",
                     "--no-progress", "--out", str(out)]) == 0  # fmt: skip
    impls = {c["impl"] for c in json.loads(out.read_text())["costs"]}
    assert impls == ({"torch"} if normlab.INTERPRET else {"torch", "normlab+compile"})


@pytest.mark.parametrize(
    "args, flag",
    [
        (["bench", "--direction", "sideways"], "--direction"),
        (["bench", "--block-cap", "3"], "--block-cap"),
        (["bench", "--dtype", "fp64"], "--dtype"),
    ],
)
def test_bad_arguments_via_subprocess(args, flag):
    proc = _run(*args)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and not proc.stdout
    errors = [line for line in proc.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and errors[0].startswith("normlab bench: error: argument " + flag)


def test_an_info_copy_too_large_to_allocate_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["info", "--copy-mib", str(2**40)])  # 1 EiB
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "argument --copy-mib: cannot measure a" in err


def _small_copy(monkeypatch):
    from normlab.bench import device

    real = device.device_info
    monkeypatch.setattr(device, "device_info", lambda measure_copy: real(measure_copy, 2**20))


PEERS_NORMS = [
    "bench", "--op", "rms_norm,layer_norm", "--shapes", "peers", "--direction", "fwd,bwd"
]  # fmt: skip


@pytest.fixture
def on_cpu(monkeypatch):
    """The cost check applies where kernels run in the interpreter: pretend so on any machine."""
    monkeypatch.setattr(normlab._runtime, "DEVICE", "cpu")


def test_a_long_cpu_sweep_is_refused_with_its_estimate(on_cpu, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(PEERS_NORMS)
    assert exc.value.code == 2
    captured = capsys.readouterr()
    assert "copy roofline" not in captured.out  # refused before measuring anything
    (line,) = captured.err.strip().splitlines()
    assert line.startswith("normlab bench: error: this sweep is 110 cases, estimated ~")
    assert " h " in line  # hours
    assert "elements through the Triton interpreter" in line
    assert "--quick" in line and "--shapes quick" in line and "--yes" in line


@pytest.mark.parametrize("flag", ["--yes", "--force"])
def test_yes_runs_a_long_cpu_sweep_and_says_its_estimate(flag, on_cpu, monkeypatch, capsys):
    sweep = importlib.import_module("normlab.bench.sweep")  # the module, not the function

    ran = []

    def fake_sweep(op, impls, shapes, *args, **kwargs):
        ran.append((op, shapes))
        return sweep.Results()

    monkeypatch.setattr(sweep, "sweep", fake_sweep)
    _small_copy(monkeypatch)
    assert cli.main([*PEERS_NORMS, flag]) == 0
    assert ran == [("rms_norm", "peers"), ("layer_norm", "peers")]
    err = capsys.readouterr().err
    assert "note: 110 cases, estimated ~" in err
    assert "running it (--yes)" in err


def test_quick_and_small_sweeps_run_without_asking(on_cpu, monkeypatch, capsys):
    sweep = importlib.import_module("normlab.bench.sweep")  # the module, not the function

    monkeypatch.setattr(sweep, "sweep", lambda *a, **k: sweep.Results())
    _small_copy(monkeypatch)
    for args in (
        ["--quick"],
        ["--shapes", "quick", "--direction", "fwd,bwd"],
        ["--op", "all", "--quick"],
    ):
        assert cli.main(["bench", *args]) == 0
        assert "estimated" not in capsys.readouterr().err


# --------------------------------------------------------------------------------------------
# Makefile
# --------------------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]


def _make_n(*args):
    proc = subprocess.run(
        ["make", "-n", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_make_lab_as_root_allows_root():
    lab = [line for line in _make_n("lab", "LAB_UID=0").splitlines() if "jupyter lab" in line]
    assert len(lab) == 1 and "--allow-root" in lab[0]
    assert "make lab: running as root" in _make_n("lab", "LAB_UID=0")
    if os.getuid() == 0:  # as here: the uid is detected, not only passed
        assert "--allow-root" in _make_n("lab")
    assert "--allow-root" not in _make_n("lab", "LAB_UID=1000")


def test_make_install_without_a_gpu_takes_torch_from_the_cpu_index(tmp_path):
    out = _make_n("install", f"VENV={tmp_path / 'venv'}", "HAS_GPU=")
    # probes PyPI's CPU index, and adds it as an extra index when it answers
    assert "urllib.request.urlopen" in out and "'https://download.pytorch.org/whl/cpu'" in out
    assert "index='--extra-index-url https://download.pytorch.org/whl/cpu'" in out
    assert "--dry-run" in out and "nvidia-" in out  # stops before a CUDA build is pulled
    assert "'torch==2.13.0'" in out
    with_gpu = _make_n("install", f"VENV={tmp_path / 'venv'}", "HAS_GPU=1")
    # with a GPU: plain `torch` from pip's indexes, no CPU index, no check (index is not "cpu")
    assert "index=''" in with_gpu and "install -q $index 'torch'" in with_gpu


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


@pytest.mark.parametrize("script", ["benchmarks/h200_round.sh", "benchmarks/record.sh"])
def test_device_scripts_parse_and_refuse_unknown_stages(script, tmp_path):
    """The device calls' shell scripts are valid bash, and an unknown stage exits non-zero
    before anything is installed or run."""
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    assert subprocess.run(["bash", "-n", script], cwd=root).returncode == 0
    if script.endswith("h200_round.sh"):
        proc = subprocess.run(["bash", script, "nonsense"], cwd=root, capture_output=True,
                              text=True, env={"OUT": str(tmp_path), "PATH": "/usr/bin:/bin"})
        assert proc.returncode == 2 and "unknown stage nonsense" in proc.stderr
        assert not any(tmp_path.iterdir())  # nothing written


def test_every_round_stage_passes_the_stage_check():
    """h200_round.sh refuses a stage missing from its check's list before running it: every
    stage the script defines (a ``  name)`` or ``  name | name)`` case label) is in that list."""
    text = (Path(__file__).resolve().parents[1] / "benchmarks/h200_round.sh").read_text()
    check = re.search(r"^case \$STAGE in (.*?)\) ;; \*\)", text, re.M)
    allowed = {name.strip() for name in check.group(1).split("|")}
    defined = set()
    for labels in re.findall(r"^  ([a-z0-9_ |]+)\)", text, re.M):
        defined.update(name.strip() for name in labels.split("|"))
    assert len(defined) > 100 and not defined - allowed, sorted(defined - allowed)


@pytest.mark.parametrize(("script", "args", "message"), [
    ("benchmarks/norm_bwd_variants.py", ["--out", "x.jsonl", "--reps", "0"], "--reps must be"),
    ("benchmarks/norm_bwd_variants.py", ["--out", "x.jsonl", "--cells", "3x"], "--cells takes"),
    ("benchmarks/norm_bwd_variants.py", ["--out", "x.jsonl"], "needs a CUDA GPU"),
    ("benchmarks/norm_fused_add.py", ["--out", "x.jsonl", "--reps", "0"], "--reps must be"),
    ("benchmarks/norm_fused_add.py", ["--out", "x.jsonl", "--cells", "3x"], "--cells takes"),
    ("benchmarks/norm_fused_add.py", ["--out", "x.jsonl", "--ops", "rms"], "--ops: a comma"),
    ("benchmarks/norm_fused_add.py", ["--out", "x.jsonl", "--dtype", "fp64"], "invalid choice"),
    ("benchmarks/warm_vs_cold.py", ["--reps", "0"], "--reps must be"),
    ("benchmarks/warm_vs_cold.py", ["--cells", "3x"], "--cells takes"),
    ("benchmarks/warm_vs_cold.py", [], "needs a CUDA GPU"),
    ("benchmarks/norm_fused_add.py", ["--out", "x.jsonl"], "needs a CUDA GPU"),
    ("benchmarks/norm_bwd_profile.py", ["--cells", "3x"], "--cells takes"),
    ("benchmarks/norm_bwd_profile.py", [], "needs a CUDA GPU"),
    ("benchmarks/short_call_probe.py", ["--out", "x.jsonl", "--reps", "0"], "--reps must be"),
    ("benchmarks/short_call_probe.py", ["--out", "x.jsonl"], "needs a CUDA GPU"),
    ("benchmarks/compile_check.py", ["--norms", "--losses"], "not allowed with"),
    ("benchmarks/compile_check.py", ["--bogus"], "unrecognized arguments"),
    ("benchmarks/compile_check.py", ["--losses"], "needs a CUDA GPU"),
    ("benchmarks/compiled_loss_forms.py", ["--out", "x.jsonl", "--ways", "eager"],
     "--ways: unknown"),
    ("benchmarks/compiled_loss_forms.py", ["--out", "x.jsonl", "--losses", "kl"],
     "--losses: unknown"),
    ("benchmarks/compiled_loss_forms.py", ["--out", "x.jsonl", "--shapes", "0x8"],
     "--shapes takes positive"),
    ("benchmarks/compiled_loss_forms.py", ["--out", "x.jsonl", "--reps", "0"], "--reps must be"),
    ("benchmarks/compiled_loss_forms.py", ["--out", "x.jsonl"], "needs a CUDA GPU"),
    ("benchmarks/loss_form_probe.py", ["--out", "x.jsonl", "--reps", "0"], "--reps must be"),
    ("benchmarks/loss_form_probe.py", ["--out", "x.jsonl", "--cases", "jsx"],
     "--cases: unknown"),
    ("benchmarks/loss_form_probe.py", ["--out", "x.jsonl", "--forms", "split"],
     "--forms: unknown"),
    ("benchmarks/loss_form_probe.py", ["--out", "x.jsonl", "--caps", "1000"],
     "--caps: powers of two"),
    ("benchmarks/loss_form_probe.py", ["--out", "x.jsonl", "--caps", "a"], "--caps takes"),
    ("benchmarks/loss_form_probe.py", ["--out", "x.jsonl", "--chunked-maxnreg", "2048:9"],
     "--chunked-maxnreg: "),
    ("benchmarks/loss_form_probe.py", ["--out", "x.jsonl"], "needs a CUDA GPU"),
    ("benchmarks/norm_launch_variants.py", ["--out", "x.jsonl", "--reps", "0"], "--reps must be"),
    ("benchmarks/norm_launch_variants.py", ["--out", "x.jsonl", "--cells", "rms_norm:up:3x4"],
     "--cells takes"),
    ("benchmarks/norm_launch_variants.py", ["--out", "x.jsonl", "--cells", "rms_norm:fwd:0x4"],
     "--cells takes"),
    ("benchmarks/norm_launch_variants.py", ["--out", "x.jsonl", "--only", "row w(2"],
     "--only: not a regular expression"),
    ("benchmarks/norm_launch_variants.py", ["--out", "x.jsonl"], "needs a CUDA GPU"),
    ("benchmarks/norm_fwd_ablation.py", ["--out", "x.jsonl", "--cells", "4x12"],
     "a multiple of 8"),
    ("benchmarks/norm_fwd_ablation.py", ["--out", "x.jsonl"], "needs a CUDA GPU"),
    ("benchmarks/host_breakdown.py", ["--calls", "0"], "must be >= 1"),
    ("benchmarks/host_breakdown.py", [], "needs a CUDA GPU"),
    ("benchmarks/gpu_check.py", ["--out", "x.json", "--loss-options", "cross_entropy,jsx"],
     "no case starts with 'jsx'"),
    ("benchmarks/gpu_check.py", ["--out", "x.json", "--loss-options", "jsd"], "needs a CUDA GPU"),
    ("benchmarks/gpu_check.py", ["--out", "x.json", "--dtypes", "fp16"], "--dtypes: a comma"),
    ("benchmarks/gpu_check.py", ["--out", "x.json", "--dtypes", "fp32", "--quick"],
     "--dtypes: a comma"),
    ("benchmarks/gpu_check.py", ["--out", "x.json", "--dtypes", "fp32"], "needs a CUDA GPU"),
    ("benchmarks/norm_fwd_launch_path.py", ["--out", "x.jsonl", "--cells", "4x4:fp16"],
     "--cells: expected"),
    ("benchmarks/norm_fwd_launch_path.py", ["--out", "x.jsonl", "--reps", "0"], "--reps must be"),
    ("benchmarks/kernel_loops.py", ["--block", "100"], "must be a power of two"),
    ("benchmarks/kernel_loops.py", ["--warps", "3"], "--warps must be"),
    ("benchmarks/kernel_loops.py", ["--form", "split"], "invalid choice"),
    ("benchmarks/kernel_loops.py", ["--maxnreg", "8"], "--maxnreg must be in"),
    ("benchmarks/kernel_loops.py", ["--shape", "4096"], "--shape takes MxV"),
    ("benchmarks/kernel_loops.py", ["--shape", "0x8"], "--shape takes MxV"),
    ("benchmarks/kernel_loops.py", ["--sms", "0"], "must be positive"),
    ("benchmarks/norm_population.py", ["--out", "x", "--timed-us", "-1"], "--timed-us must be"),
    ("benchmarks/norm_population.py", ["--out", "x", "--peers-timed-us", "2e6"],
     "--peers-timed-us must be"),
    ("benchmarks/norm_population.py", ["--out", "x", "--impls", "normlab,inductor"],
     "--impls takes"),
    ("benchmarks/norm_population.py", ["--out", "x", "--ops", "rms_norm,add_norm"],
     "--ops: unknown add_norm"),
    ("benchmarks/norm_fwd_peer_kernel.py", ["--out", "x.jsonl", "--reps", "0"], "--reps must be"),
    ("benchmarks/norm_fwd_peer_kernel.py", ["--out", "x.jsonl", "--cells", "rms_norm:4by8"],
     "--cells takes"),
    ("benchmarks/norm_fwd_peer_kernel.py", ["--out", "x.jsonl"], "needs a CUDA GPU"),
    ("benchmarks/l2_flush_state.py", ["--reps", "0"], "--reps must be"),
    ("benchmarks/l2_flush_state.py", ["--cells", "softmax:4x8"], "--cells takes"),
    ("benchmarks/l2_flush_state.py", [], "needs a CUDA GPU"),
    ("benchmarks/norm_odd_widths.py", ["--out", "x.jsonl", "--reps", "0"], "--reps must be"),
    ("benchmarks/norm_odd_widths.py", ["--out", "x.jsonl", "--cells", "rms_norm:0x8"],
     "--cells takes"),
    ("benchmarks/norm_odd_widths.py", ["--out", "x.jsonl", "--block-row-max-cols", "0"],
     "--block-row-max-cols must be"),
    ("benchmarks/llama_step.py", ["--profile", "-1"], "--profile must be >= 0"),
    ("benchmarks/llama_step.py", ["--variants", "hf,nl"], "is not one of"),
    ("benchmarks/compiled_host_profile.py", ["--calls", "0"], "--calls must be >= 1"),
    ("benchmarks/compiled_host_profile.py", ["--shape", "4by8"], "is not MxN"),
    ("benchmarks/compiled_host_profile.py", ["--op", "kl"], "is not rms_norm, layer_norm"),
    ("benchmarks/compiled_host_profile.py", [], "needs a CUDA GPU"),
    ("benchmarks/profile_kernels.py", ["reverse_kl:chunked:4096x131072"], "case: <op>"),
    ("benchmarks/profile_kernels.py", ["reverse_kl:chunked:-:4096by8"], "case: <op>"),
    ("benchmarks/profile_kernels.py", ["cross_entropy:chunked:-:8x8", "--options", "softcap"],
     "--options: name=value"),
    ("benchmarks/profile_kernels.py", ["rms_norm:normlab:-:8x8", "--options", "softcap=3"],
     "for the losses only"),
    ("benchmarks/norm_bwd_spills.py", ["--cells", "0x8"], "--cells takes"),
    ("benchmarks/norm_bwd_spills.py", ["--dtypes", "fp8"], "--dtypes: a comma list"),
    ("benchmarks/norm_bwd_spills.py", ["--ops", "kl"], "--ops: a comma list"),
    ("benchmarks/norm_bwd_spills.py", ["--fused", "maybe"], "--fused: no, yes"),
    ("benchmarks/norm_bwd_spills.py", ["--sms", "0"], "--sms must be >= 1"),
    ("benchmarks/norm_bwd_spills.py", ["--set", "prefetch=Fals"], "a Python literal value"),
    ("benchmarks/norm_bwd_spills.py", ["--set", "dh=None"], "'dh' is not one of"),
    ("benchmarks/norm_strategy_tiles.py", ["--out", "x.jsonl", "--reps", "0"], "--reps must be"),
    ("benchmarks/norm_strategy_tiles.py", ["--out", "x.jsonl", "--cells", "8by8"], "--cells takes"),
    ("benchmarks/norm_strategy_tiles.py", ["--out", "x.jsonl"], "needs a CUDA GPU"),
    ("benchmarks/norm_launch_code.py", ["--cells", "0x8"], "--cells takes"),
    ("benchmarks/norm_launch_code.py", ["--ops", "kl"], "--ops: a comma list"),
    ("benchmarks/norm_launch_code.py", ["--strategies", "fast"], "--strategies: a comma list"),
    ("benchmarks/norm_launch_code.py", ["--affine", ""], "--affine: a comma list"),
    ("benchmarks/norm_launch_code.py", ["--sms", "0"], "--sms must be >= 1"),
    ("benchmarks/inductor_norm_bwd.py", ["--out", "x", "--ops", "rms"], "--ops: unknown rms"),
    ("benchmarks/inductor_norm_bwd.py", ["--out", "x", "--modes", "fast"], "--modes: unknown fast"),
    ("benchmarks/inductor_norm_bwd.py", ["--out", "x", "--reps", "0"], "--reps must be"),
    ("benchmarks/inductor_norm_bwd.py", ["--out", "x", "--cells", "8by8"], "--cells takes"),
    ("benchmarks/inductor_norm_bwd.py", ["--out", "x"], "needs a CUDA GPU"),
    ("benchmarks/compiled_guards.py", ["--out", "x.json", "--op", "kl"], "--op: a comma list"),
    ("benchmarks/compiled_guards.py", ["--out", "x.json", "--calls", "5"], "--calls must be"),
    ("benchmarks/compiled_guards.py", ["--out", "x.json", "--rounds", "0"], "--rounds must be"),
    ("benchmarks/compiled_guards.py", ["--out", "x.csv"], "--out takes FILE.json"),
    ("benchmarks/compiled_launch_args.py", ["--out", "x.csv"], "--out takes FILE.json"),
    ("benchmarks/compiled_launch_args.py", ["--out", "x.json", "--calls", "5"], "--calls must be"),
    ("benchmarks/compiled_launch_args.py", ["--out", "x.json", "--rounds", "0"], "--rounds must"),
    ("benchmarks/compiled_launch_args.py", ["--out", "x.json"], "needs a CUDA GPU"),
    ("benchmarks/compiled_loss_kernels.py", ["--out", "x.json", "--shapes", "0x8"], "--shapes:"),
    ("benchmarks/compiled_loss_kernels.py", ["--out", "x.json", "--shapes", "8by8"], "--shapes:"),
    ("benchmarks/compiled_loss_kernels.py", ["--out", "x.json", "--losses", "kl"], "--losses:"),
    ("benchmarks/compiled_loss_kernels.py", ["--out", "x.json"], "needs a CUDA GPU"),
])  # fmt: skip
def test_device_benchmarks_refuse_bad_arguments(script, args, message, tmp_path):
    """Bad arguments (and no GPU here) exit 2 with the reason, before anything is measured."""
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, script, *args], cwd=root, capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(root)})
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr[-500:]


def test_compiled_guards_times_both_implementations(tmp_path):
    """benchmarks/compiled_guards.py runs here (the interpreter): per op, normlab's and torch's
    guard trees and µs per call, written to the JSON it names."""
    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "guards.json"
    proc = subprocess.run([sys.executable, "benchmarks/compiled_guards.py", "--out", str(out),
                           "--calls", "20", "--rounds", "2", "--op", "rms_norm,cross_entropy"],
                          cwd=root, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(root)})  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-800:]
    rows = json.loads(out.read_text())["rows"]
    assert [(r["op"], r["impl"]) for r in rows] == [
        ("rms_norm", "normlab"), ("rms_norm", "torch"),
        ("cross_entropy", "normlab"), ("cross_entropy", "torch")]  # fmt: skip
    assert all(r["guard_lines"] > 10 and r["us_per_call"] > 0 and len(r["rounds_us"]) == 2
               for r in rows)  # fmt: skip


def test_norm_bwd_spills_finds_the_spilling_plan():
    """benchmarks/norm_bwd_spills.py compiles the planned backward for sm_90 without a GPU: the
    fused add's backward at 16384 columns in Liger-Kernel's order (16 warps, 128 registers)
    spills far less than the shifted tile the plan took before (NORMLAB_NORM_BWD_LIGER_ORDER=0)."""
    import re

    root = Path(__file__).resolve().parents[1]
    stacks = {}
    for on in ("1", "0"):
        proc = subprocess.run([sys.executable, "benchmarks/norm_bwd_spills.py", "--cells",
                               "512x16384", "--dtypes", "bf16", "--ops", "rms_norm", "--fused",
                               "yes"], cwd=root, capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(root),
                                   "NORMLAB_NORM_BWD_LIGER_ORDER": on})  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-2000:]
        line = re.search(r"^add_rms_norm 512x16384 bf16: _norm_bwd_persistent_kernel grid "
                         r"(\d+), \{'num_warps': (\d+), 'maxnreg': (\d+)\}: (\d+) registers, "
                         r"(\d+) B stack, (\d+) instructions$", proc.stdout, re.M)  # fmt: skip
        assert line, proc.stdout
        stacks[on] = tuple(int(v) for v in line.groups())
    assert stacks["1"][:3] == (132, 16, 128) and stacks["0"][:3] == (128, 8, 255)
    assert stacks["1"][5] > 100 and stacks["0"][5] > 100  # a row loop's SASS, counted
    assert stacks["1"][4] < 64 < 4 * 64 < stacks["0"][4], stacks


def test_norm_launch_code_digests_what_each_planned_launch_runs():
    """benchmarks/norm_launch_code.py compiles each launch of a planned norm call for sm_90
    without a GPU. Its digests tell code apart: parameter offsets alone change neither, the same
    instructions reordered (registers renumbered) change only the first, another instruction
    both."""
    import re

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    try:
        from norm_launch_code import sass_digests
    finally:
        sys.path.pop(0)
    sass = ("        /*0000*/  LDC R1, c[0x0][0x28] ;  /* 0x000a00ff017b82 */\n"
            ".L_x_0:\n"
            "        /*0010*/  IADD3 R8, P0, R4, 0x1000, RZ ;  /* 0x0000100004087810 */\n"
            "        /*0020*/  ULDC UR26, c[0x0][0x210] ;  /* 0x0000840000047ab9 */\n")
    moved = sass.replace("0x210", "0x218").replace("0x28]", "0x30]")
    swapped = sass.split("\n")
    swapped[2], swapped[3] = swapped[3].replace("UR26", "UR36"), swapped[2]
    other = sass.replace("IADD3 R8", "IMAD R8")
    base = sass_digests(sass)
    assert sass_digests(moved) == base
    assert sass_digests("\n".join(swapped))[0] != base[0]
    assert sass_digests("\n".join(swapped))[1] == base[1]
    assert all(a != b for a, b in zip(sass_digests(other), base, strict=True))
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "benchmarks/norm_launch_code.py", "--cells", "8x1024",
                           "--ops", "rms_norm", "--fused", "no", "--affine", "no",
                           "--strategies", "auto"], cwd=root, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(root)})  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = re.findall(r"^rms_norm 8x1024 bf16 no-affine auto (fwd|bwd): (\w+) grid \(\d+,\), "
                       r"\{.*\}: \d+ registers, \d+ B stack, (\d+) instructions, "
                       r"sass [0-9a-f]{12}, unordered [0-9a-f]{12}$",
                       proc.stdout, re.M)  # fmt: skip
    assert [(d, k) for d, k, _ in lines][:1] == [("fwd", "_norm_fwd_kernel")], proc.stdout
    assert "bwd" in {d for d, _, _ in lines} and all(int(n) > 10 for _, _, n in lines)


def test_kernel_loops_counts_the_options_instructions():
    """benchmarks/kernel_loops.py compiles the fused loss kernel for sm_90 without a GPU: every
    variant has its loops, and label smoothing adds instructions to the statistics' loop (its
    sum of the logits)."""
    import re

    root = Path(__file__).resolve().parents[1]
    variants = ("cross_entropy", "cross_entropy label_smoothing", "cross_entropy z_loss",
                "cross_entropy softcap", "cross_entropy all three", "reverse_kl",
                "reverse_kl T=2", "soft_cross_entropy", "soft_cross_entropy T=2", "jsd")
    proc = subprocess.run([sys.executable, "benchmarks/kernel_loops.py", "--block", "512",
                           "--warps", "2"], cwd=root, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(root)})  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    per_variant = {}  # the tile loops (those with MUFU ops; not the count of the labels)
    for block in proc.stdout.strip().split("\n")[1:]:
        if not block.startswith(" "):
            name = block.split(":")[0]
            per_variant[name] = []
        elif " MUFU " in block:
            per_variant[name].append(int(re.search(r"loop of (\d+)", block).group(1)))
    assert tuple(per_variant) == variants and all(per_variant.values()), proc.stdout
    # each variant's registers and the stack a thread spills to (ptxas' STACK)
    assert len(re.findall(r": \d+ registers, \d+ B stack", proc.stdout)) == len(variants)
    # and the model: instructions and MUFU ops a logit over the tile loops, their least times.
    # Label CE's tile loops take two exponentials a logit (and one a lane for the running
    # rescale), softcap's two tanh more.
    model = dict(re.findall(r"^([^:\n]+):.*; [\d.]+ instructions and ([\d.]+) MUFU a logit: at "
                            r"4096x131072 at least \d+ us to issue, \d+ us of MUFU \(model\)$",
                            proc.stdout, re.M))  # fmt: skip
    assert set(model) == set(variants), proc.stdout
    base, capped = float(model["cross_entropy"]), float(model["cross_entropy softcap"])
    assert 2.0 <= base < 2.5 and abs(capped - base - 2.0) < 0.05, proc.stdout
    # the first tile loop in the SASS is the statistics' pass
    assert per_variant["cross_entropy label_smoothing"][0] > per_variant["cross_entropy"][0]
    # JSD's second pass (its sums) takes one shared log1p a logit, through lg2.approx: within
    # twice reverse KL's statistics pass (five times before, with two exact softplus)
    assert per_variant["jsd"][1] <= 2 * per_variant["reverse_kl"][0], proc.stdout
    # the label's one-hot after the loops (the default): the gradient loop (the last) has no
    # compare; with it in the loop, that loop is longer
    assert "one-hot after the loops" in proc.stdout
    in_loop = subprocess.run([sys.executable, "benchmarks/kernel_loops.py", "--block", "512",
                              "--warps", "2", "--one-hot-in-loop"], cwd=root, capture_output=True,
                             text=True, env={**os.environ, "PYTHONPATH": str(root)})  # fmt: skip
    assert in_loop.returncode == 0 and "one-hot in the gradient loop" in in_loop.stdout, \
        in_loop.stderr[-2000:]  # fmt: skip
    after_lines = proc.stdout.split("cross_entropy label_smoothing:")[0]
    in_loop_lines = in_loop.stdout.split("cross_entropy label_smoothing:")[0]
    last_after = [int(v) for v in re.findall(r"loop of (\d+)", after_lines)][-1]
    last_in_loop = [int(v) for v in re.findall(r"loop of (\d+)", in_loop_lines)][-1]
    assert last_after < last_in_loop
    # the chunked form's kernel (label CE's at V >= 65536): every variant compiles, with loops
    chunked = subprocess.run([sys.executable, "benchmarks/kernel_loops.py", "--block", "512",
                              "--warps", "2", "--form", "chunked"], cwd=root, capture_output=True,
                             text=True, env={**os.environ, "PYTHONPATH": str(root)})  # fmt: skip
    assert chunked.returncode == 0, chunked.stderr[-2000:]
    assert chunked.stdout.startswith("_entropy_chunked_kernel, sm_90")
    assert chunked.stdout.count("registers") == len(variants) and "loop of" in chunked.stdout


def _kernel_loops_counts(*args):
    """(header, {variant: (instructions, MUFU ops) a logit}) of a kernel_loops.py run."""
    import re

    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "benchmarks/kernel_loops.py", *args], cwd=root,
                          capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(root)})  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    counts = {name: (float(ins), float(mufu)) for name, ins, mufu in re.findall(
        r"^([^:\n]+):.*; ([\d.]+) instructions and ([\d.]+) MUFU a logit", proc.stdout, re.M)}
    return proc.stdout.splitlines()[0], counts


def test_kernel_loops_poly_exp2_takes_a_mufu_op_off_softcap():
    """--poly-exp2 (NORMLAB_LOSS_POLY_EXP2=1) compiles softcap's gradient exp on the FMA pipe:
    softcap and the three options together run one MUFU op a logit fewer and more instructions;
    label CE without a softcap compiles as before."""
    _, off = _kernel_loops_counts("--block", "512", "--warps", "2")
    header, on = _kernel_loops_counts("--block", "512", "--warps", "2", "--poly-exp2")
    assert "softcap's gradient exp as poly_exp2" in header
    for name in ("cross_entropy softcap", "cross_entropy all three"):
        assert abs(off[name][1] - on[name][1] - 1.0) < 0.05, (name, off[name], on[name])
        assert on[name][0] > off[name][0] + 4, (name, off[name], on[name])
    assert on["cross_entropy"] == off["cross_entropy"] and on["jsd"] == off["jsd"]


def test_kernel_loops_thread_stats_shorten_label_ce():
    """Label CE's one-lane tiles keep their statistics per thread by default: the fused kernel at
    tile 4096 runs fewer instructions a logit than with --no-thread-stats
    (NORMLAB_LOSS_THREAD_STATS=0, a cross-warp reduction a tile), for label CE, z-loss and
    label smoothing; softcap (alone or with the others: the fused form's exception) and the
    other losses compile as before."""
    header_on, on = _kernel_loops_counts("--block", "4096", "--warps", "4")
    header_off, off = _kernel_loops_counts("--block", "4096", "--warps", "4", "--no-thread-stats")
    assert "label CE's statistics per thread" in header_on
    assert "label CE's statistics per thread" not in header_off
    for name in ("cross_entropy", "cross_entropy z_loss", "cross_entropy label_smoothing"):
        assert on[name][0] < off[name][0] - 0.5, (name, off[name], on[name])
    for name in ("cross_entropy softcap", "cross_entropy all three", "reverse_kl",
                 "soft_cross_entropy", "jsd"):  # fmt: skip
        assert on[name] == off[name], (name, off[name], on[name])


def test_kernel_loops_ship_remakes_the_shipped_counts(tmp_path):
    """normlab/data/sm90-loss-loops.json is what --ship makes of its recorded sources in
    benchmarks/data (read by devdata.loss_loops); a file that is not kernel_loops output, or not
    named by its commit, is refused. Its chunked counts are of the launch label CE takes at the
    options run's shape (form, tile, warps, register cap): the figure beside the measured times
    compares like with like."""
    from normlab.bench import devdata
    from normlab.losses import config

    root = Path(__file__).resolve().parents[1]
    meta, rows = devdata.loss_loops()
    sources = sorted({r["source"] for r in rows})
    out = tmp_path / "loops.json"
    proc = subprocess.run([sys.executable, "benchmarks/kernel_loops.py", "--out", str(out),
                           "--ship", *(f"benchmarks/data/{s}" for s in sources)], cwd=root,
                          capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(root)})  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    remade_meta, remade = devdata.loss_loops(out.name, data_dir=tmp_path)
    assert remade == rows and remade_meta["model"] == meta["model"]
    assert meta["model"]["issue_per_clock_sm"] == 128 and meta["model"]["mufu_per_clock_sm"] == 16
    _, options = devdata.loss_options()
    (shape,) = {(r["M"], r["N"]) for r in options if r["op"] == "cross_entropy"}
    form, tile = config.entropy_auto("cross_entropy", shape[1], False, n_rows=shape[0],
                                     sm_count=meta["model"]["sm_count"])  # fmt: skip
    for r in rows:
        assert (r["kernel"], r["tile"], r["warps"], r["maxnreg"]) == (
            form, tile, config.ENTROPY_CHUNKED_WARPS, config.ENTROPY_CHUNKED_MAXNREG.get(tile)), r
    bad = tmp_path / "kernel_loops_x_sm90.txt"
    bad.write_text("not a kernel_loops output\n")
    for name in (bad, root / "README.md"):
        proc = subprocess.run([sys.executable, "benchmarks/kernel_loops.py", "--out", str(out),
                               "--ship", str(name)], cwd=root, capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(root)})  # fmt: skip
        assert proc.returncode == 2 and "--ship:" in proc.stderr, proc.stderr[-500:]
