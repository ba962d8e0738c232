"""normlab.bench.records: one schema, JSONL/CSV round trip, malformed-file errors, shipped data."""

import dataclasses
import json
import re
import shlex

import pytest
import torch

from normlab.bench import records
from normlab.bench.records import Record


def _record(**overrides) -> Record:
    fields = {
        "op": "rms_norm",
        "impl": "normlab",
        "strategy": "two_stage",
        "layout": "row",
        "M": 8192,
        "N": 1024,
        "dtype": "bf16",
        "direction": "bwd",
        "device_us": 24.25,
        "wall_us": 390.5,
        "bytes": 3 * 8192 * 1024 * 2,
        "gbps": 2075.4,
        "roofline_gbps": 4242.0,
        "frac_roofline": 0.489,
        "datasheet_gbps": 4800.0,
        "peak_extra_bytes": 17301504,
        "kernels": {"_norm_bwd_kernel": 20.0, "_dw_reduce_kernel": 4.25},
        "card": "NVIDIA H200",
        "sm_count": 132,
        "torch": "2.11.0+cu130",
        "triton": "3.6.0",
        "mode": "gpu",
        "date": "2026-11-29T10:00:00Z",
        "commit": "eb69e41",
        "command": "python -m normlab bench --op x,y",
    }
    fields.update(overrides)
    return Record(**fields)


SAMPLES = [
    _record(),
    _record(
        impl="torch",
        strategy=None,
        layout=None,
        kernels={},
        valid=False,
        note='flagged: "quoted", comma, newline\nsecond line',
    ),
    _record(
        op="reverse_kl",
        impl="normlab",
        strategy="split",
        layout=None,
        block_cap=8192,
        direction="fwd+bwd",
        device_us=None,
        gbps=None,
        frac_roofline=None,
        datasheet_gbps=None,
        roofline_gbps=None,
        peak_extra_bytes=None,
        mode="interpret",
    ),
]


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_round_trip(tmp_path, suffix):
    path = records.write_records(SAMPLES, tmp_path / f"run{suffix}")
    back = records.read_records(path)
    assert back == SAMPLES
    assert isinstance(back[0].M, int) and isinstance(back[0].device_us, float)
    assert back[2].block_cap == 8192 and back[1].valid is False


def test_csv_stores_kernels_as_json(tmp_path):
    path = records.write_csv(SAMPLES[:1], tmp_path / "run.csv")
    header, row = path.read_text().splitlines()[:2]
    assert header.split(",") == list(records.FIELDS)
    assert (
        json.loads(row[row.index('"{') + 1 : row.index('}"') + 1].replace('""', '"'))
        == SAMPLES[0].kernels
    )


def test_jsonl_append(tmp_path):
    path = tmp_path / "run.jsonl"
    records.write_jsonl(SAMPLES[:1], path)
    records.write_jsonl(SAMPLES[1:], path, append=True)
    assert records.read_jsonl(path) == SAMPLES


def test_jsonl_gz_is_gzipped_and_reproducible(tmp_path):
    """A .gz path is written gzipped (also through replace_jsonl's temporary file), the same
    records give the same bytes, and appending to one is refused."""
    a, b = tmp_path / "a.jsonl.gz", tmp_path / "b.jsonl.gz"
    records.write_jsonl(SAMPLES, a)
    records.replace_jsonl(SAMPLES, b)
    assert a.read_bytes()[:2] == b"\x1f\x8b" and a.read_bytes() == b.read_bytes()
    assert records.read_jsonl(a) == SAMPLES
    with pytest.raises(ValueError, match="append"):
        records.write_jsonl(SAMPLES, a, append=True)


def _jsonl_with(tmp_path, bad_line: str):
    good = records.record_to_json(SAMPLES[0])
    path = tmp_path / "bad.jsonl"
    path.write_text(good + "\n" + bad_line + "\n")
    return path


def _mutated(**changes) -> str:
    row = dataclasses.asdict(SAMPLES[0])
    for k, v in changes.items():
        if v is KeyError:
            del row[k]
        else:
            row[k] = v
    return json.dumps(row)


@pytest.mark.parametrize(
    "bad_line, match",
    [
        ('{"op": "rms_norm", ', "not valid JSON"),
        ("[1, 2]", "expected a JSON object"),
        (_mutated(M=KeyError, wall_us=KeyError), "missing field\\(s\\) M, wall_us"),
        (_mutated(M="8192"), "field 'M' must be an integer"),
        (_mutated(M=8192.5), "field 'M' must be an integer"),
        (_mutated(device_us="fast"), "field 'device_us' must be a number"),
        (_mutated(valid="yes"), "field 'valid' must be a boolean"),
        (_mutated(kernels=["k", 1.0]), "field 'kernels' must be an object"),
        (_mutated(kernels={"k": "1"}), "field 'kernels' must be an object"),
        (_mutated(card=None), "field 'card' must be a string"),
        (_mutated(speed=1.0), "unknown field\\(s\\) speed"),
    ],
)
def test_malformed_jsonl_names_file_and_line(tmp_path, bad_line, match):
    path = _jsonl_with(tmp_path, bad_line)
    with pytest.raises(ValueError, match=match) as info:
        records.read_records(path)
    assert str(info.value).startswith(f"{path}:2:")


def _csv_with(tmp_path, field: str, value: str):
    path = records.write_csv(SAMPLES[:2], tmp_path / "bad.csv")
    lines = path.read_text().splitlines(keepends=True)
    head = lines[0].strip().split(",")
    cells = lines[1].rstrip("\r\n")
    # rewrite row 1 (no quoted commas in SAMPLES[0] except kernels, handled by csv module)
    import csv
    import io

    row = next(csv.reader(io.StringIO(cells)))
    row[head.index(field)] = value
    out = io.StringIO()
    csv.writer(out).writerow(row)
    path.write_text(lines[0] + out.getvalue() + "".join(lines[2:]))
    return path


@pytest.mark.parametrize(
    "field, value, match",
    [
        ("M", "many", "field 'M' must be a number"),
        ("device_us", "1.2.3", "field 'device_us' must be a number"),
        ("kernels", "{not json", "field 'kernels' must be a JSON object"),
        ("kernels", "[1]", "field 'kernels' must be an object"),
        ("valid", "maybe", "field 'valid' must be a boolean"),
    ],
)
def test_malformed_csv_names_file_and_line(tmp_path, field, value, match):
    path = _csv_with(tmp_path, field, value)
    with pytest.raises(ValueError, match=match) as info:
        records.read_records(path)
    assert str(info.value).startswith(f"{path}:2:")


def test_csv_structure_errors(tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(ValueError, match="empty CSV"):
        records.read_csv(empty)
    path = records.write_csv(SAMPLES[:1], tmp_path / "short.csv")
    header = path.read_text().splitlines()[0]
    path.write_text(header + "\nrms_norm,torch\n")
    with pytest.raises(ValueError, match=f"{path}:2: fewer values"):
        records.read_csv(path)
    with pytest.raises(ValueError, match="unknown record format"):
        records.read_records(tmp_path / "run.parquet")
    with pytest.raises(ValueError, match="unknown record format"):
        records.write_records(SAMPLES, tmp_path / "run.txt")


def test_recorded_path_and_load_recorded(tmp_path, capsys):
    assert records.card_slug("NVIDIA H200") == "nvidia-h200"
    assert records.card_slug("NVIDIA A100-SXM4-80GB") == "nvidia-a100-sxm4-80gb"
    path = records.recorded_path("NVIDIA H200", "2026-11-29", tmp_path)
    assert path == tmp_path / "nvidia-h200-2026-11-29.jsonl"
    with pytest.raises(ValueError, match="YYYY-MM-DD"):
        records.recorded_path("NVIDIA H200", "29/11/2026", tmp_path)

    assert records.load_recorded(data_dir=tmp_path) == []
    assert "no recorded runs" in capsys.readouterr().err

    h200_late = [_record(date="2026-12-01T00:00:00Z")]
    records.write_jsonl(SAMPLES, path)
    records.write_jsonl(h200_late, records.recorded_path("NVIDIA H200", "2026-12-01", tmp_path))
    records.write_jsonl(SAMPLES[:1], records.recorded_path("Tesla T4", "2026-11-30", tmp_path))
    (tmp_path / "notes.jsonl").write_text("not a recorded run, ignored by name\n")
    assert records.load_recorded("NVIDIA H200", tmp_path) == SAMPLES + h200_late
    assert records.load_recorded("nvidia-h200", tmp_path) == SAMPLES + h200_late
    assert len(records.load_recorded(data_dir=tmp_path)) == len(SAMPLES) + 2
    assert records.load_recorded("NVIDIA B200", tmp_path) == []
    assert "nvidia-b200-*.jsonl" in capsys.readouterr().err

    # a large set ships gzipped, named card-date-what.jsonl.gz; it sorts by its date
    import gzip

    text = "".join(records.record_to_json(r) + "\n" for r in SAMPLES[:2])
    with gzip.open(tmp_path / "nvidia-h200-2026-11-30-population.jsonl.gz", "wt") as f:
        f.write(text)
    (tmp_path / "nvidia-h200-2026-11-30.jsonl.gz").write_bytes(gzip.compress(b"{}"))  # no "what"
    assert records.load_recorded("NVIDIA H200", tmp_path) == SAMPLES + SAMPLES[:2] + h200_late


def test_shipped_data_is_well_formed():
    # every recorded run in normlab/data/ parses (no file yet is fine: an empty list)
    for path in records.recorded_files():
        assert records.read_jsonl(path), f"{path} is empty"


def test_dtype_names():
    assert records.parse_dtype("bf16") is torch.bfloat16
    assert records.parse_dtype("torch.float32") is torch.float32
    assert records.dtype_name(torch.float16) == "fp16"
    with pytest.raises(ValueError, match="unknown dtype"):
        records.parse_dtype("int8")
    with pytest.raises(TypeError):
        records.parse_dtype(16)


# ---- commands and paths in records ----------------------------------------------------------

# An absolute path at the start of a word: "/root/...", "=/tmp/x", "'/home/..."
_ABSOLUTE_PATH = re.compile(r"(?:^|[\s=\"'(\[,:])(/[A-Za-z0-9_.~-][^\s\"',)\]]*)")


def _shipped_files():
    data_dir = records.DATA_DIR
    return sorted(data_dir.glob("*.jsonl")) + sorted(data_dir.glob("*.log"))


def test_shipped_records_and_logs_name_no_machine_path():
    files = _shipped_files()
    assert any(p.suffix == ".jsonl" for p in files) and any(p.suffix == ".log" for p in files)
    found = {}
    for path in files:
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            hits = _ABSOLUTE_PATH.findall(line)
            if hits:
                found.setdefault(path.name, []).append((n, hits[:3]))
    assert not found, f"absolute machine paths in normlab/data: {found}"
    for path in records.recorded_files():
        for rec in records.read_jsonl(path):
            words = shlex.split(rec.command)
            assert words[:1] in (["python"], ["python3"]), rec.command
            assert not any(w.startswith("/") or "=/" in w for w in words), rec.command


def test_absolute_path_pattern_finds_machine_paths():
    for line in ("wrote 3 records to /root/out/x.jsonl", "--out=/tmp/a.csv", "'/home/u/r'"):
        assert _ABSOLUTE_PATH.search(line), line
    for line in ("copy roofline: 4253 GB/s", "fwd/bwd 12 µs/call", "out/x.jsonl", "(a / b)"):
        assert not _ABSOLUTE_PATH.search(line), line


def test_portable_command(tmp_path):
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    argv = [
        "/opt/venvs/lab/bin/python3.11", str(root / "scripts" / "x.py"),
        "--out", str(root / "out" / "r.jsonl"), f"--log={root}/logs/a b.log",
        "--cache", "/tmp/run-17/cache.json", "--op", "rms_norm,layer_norm", "rel/path.csv",
    ]
    assert records.portable_command(argv, repo_root=root) == (
        "python scripts/x.py --out out/r.jsonl '--log=logs/a b.log' --cache cache.json "
        "--op rms_norm,layer_norm rel/path.csv"
    )
    # a program named without a path is kept; the repository root itself is "."
    assert records.portable_command(["python3", "-m", "normlab", "bench", "--out", str(root)],
                                    repo_root=root) == "python3 -m normlab bench --out ."
    # a path that only starts like the root is outside it
    outside = records.portable_command(["python", f"{root}-old/x.jsonl"], repo_root=root)
    assert outside == "python x.jsonl"


def test_bench_records_a_portable_command(tmp_path, capsys):
    from normlab import __main__ as cli

    out = tmp_path / "r.jsonl"
    argv = ["bench", "--no-progress", "--op", "rms_norm", "--impl", "eager", "--shapes", "4x64",
            "--direction", "fwd", "--reps", "2", "--out", str(out)]
    assert cli.main(argv) == 0
    (rec,) = records.read_jsonl(out)
    assert rec.command == (
        "python -m normlab bench --no-progress --op rms_norm --impl eager --shapes 4x64 "
        "--direction fwd --reps 2 --out r.jsonl"
    )
