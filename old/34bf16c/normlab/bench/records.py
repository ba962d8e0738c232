"""One record per measured (op, impl, shape, dtype, direction), read and written as JSONL or CSV.

Recorded runs ship in ``normlab/data/`` as ``<card-slug>-<YYYY-MM-DD>.jsonl`` (one file per card
and date); :func:`load_recorded` reads them for the notebooks.
"""

from __future__ import annotations

import csv
import dataclasses
import gzip
import io
import json
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

DATA_DIR = Path(__file__).resolve().parent.parent / "data"
REPO_ROOT = DATA_DIR.parent.parent
# card-date.jsonl, or card-date-what.jsonl.gz (a large set, such as a shape population).
_RECORDED_NAME = re.compile(
    r"^(?P<card>.+?)-(?P<date>\d{4}-\d{2}-\d{2})(?:\.jsonl|-(?P<what>[a-z0-9_-]+)\.jsonl\.gz)$")

# A kernel may beat the measured copy by noise (the H200 peer run: compile RMSNorm fwd 32768x8192 at
# 4270 GB/s vs a 4242 GB/s copy, +0.7%); 5% above it is a measurement bug, not a result.
ROOFLINE_SLACK = 1.05

_DTYPE_NAMES = {
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
    "fp16": torch.float16,
    "float16": torch.float16,
    "half": torch.float16,
    "fp32": torch.float32,
    "float32": torch.float32,
    "float": torch.float32,
    "fp64": torch.float64,
    "float64": torch.float64,
}
_SHORT = {
    torch.bfloat16: "bf16",
    torch.float16: "fp16",
    torch.float32: "fp32",
    torch.float64: "fp64",
}


def parse_dtype(dtype: torch.dtype | str) -> torch.dtype:
    """torch dtype from a dtype or a short name ("bf16", "fp16", "fp32", "torch.bfloat16")."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if not isinstance(dtype, str):
        raise TypeError(f"dtype must be a torch.dtype or a string, got {type(dtype).__name__}")
    key = dtype.strip().lower().removeprefix("torch.")
    if key not in _DTYPE_NAMES:
        raise ValueError(f"unknown dtype {dtype!r}: expected one of bf16, fp16, fp32, fp64")
    return _DTYPE_NAMES[key]


def dtype_name(dtype: torch.dtype | str) -> str:
    """Short name ("bf16") of a dtype, as stored in records."""
    return _SHORT[parse_dtype(dtype)]


_PYTHON_NAME = re.compile(r"^python[0-9.]*$")


def portable_command(argv, repo_root: str | Path = REPO_ROOT) -> str:
    """The command line ``argv`` (a list of arguments) as a record's ``command``: run from the
    repository root, naming no directory of the machine it ran on.

    A Python interpreter given by path (a venv's ``/.../bin/python3.11``) becomes ``python``;
    an absolute path under ``repo_root`` (also as ``--opt=/path``) becomes relative to it; any
    other absolute path keeps only its file name. Relative arguments are kept as given.
    """
    root = Path(repo_root).resolve()

    def portable_path(token: str) -> str:
        if not token.startswith("/"):
            return token
        path = Path(token)
        try:
            return path.resolve().relative_to(root).as_posix() or "."
        except ValueError:
            return path.name or "."

    words = [str(a) for a in argv]
    out = []
    for i, word in enumerate(words):
        if i == 0 and "/" in word and _PYTHON_NAME.match(Path(word).name):
            out.append("python")
        elif word.startswith("-") and "=" in word:
            option, value = word.split("=", 1)
            out.append(f"{option}={portable_path(value)}")
        else:
            out.append(portable_path(word))
    return shlex.join(out)


def card_slug(card: str) -> str:
    """File-name form of a card name: "NVIDIA H200" -> "nvidia-h200"."""
    slug = re.sub(r"[^a-z0-9]+", "-", card.lower()).strip("-")
    return slug or "unknown"


@dataclass
class Record:
    """One measurement. Times are per call in µs; ``device_us`` is the sum of the call's kernel
    durations (GPU) or the wall time (CPU/interpreter, where ``mode`` says so and nothing here
    speaks about GPU bandwidth). ``strategy`` is the norm strategy or the loss ``form``;
    ``layout`` the norm layout; ``block_cap`` the loss tile cap (None = the impl's default)."""

    op: str
    impl: str
    strategy: str | None
    layout: str | None
    M: int
    N: int
    dtype: str
    direction: str
    device_us: float | None
    wall_us: float
    bytes: int
    gbps: float | None
    roofline_gbps: float | None
    frac_roofline: float | None
    datasheet_gbps: float | None
    peak_extra_bytes: int | None
    kernels: dict[str, float]
    card: str
    sm_count: int
    torch: str
    triton: str
    mode: str
    date: str
    commit: str
    command: str
    block_cap: int | None = None
    valid: bool = True
    note: str = ""
    shape_set: str | None = None  # the population a record belongs to ("population", ...)

    @property
    def shape(self) -> str:
        return f"{self.M}x{self.N}"

    @property
    def label(self) -> str:
        """impl with its options, e.g. "normlab[two_stage,row]"."""
        opts = [o for o in (self.strategy, self.layout) if o not in (None, "", "auto")]
        if self.block_cap is not None:
            opts.append(f"cap={self.block_cap}")
        return f"{self.impl}[{','.join(opts)}]" if opts else self.impl


FIELDS = tuple(f.name for f in dataclasses.fields(Record))
_REQUIRED = tuple(f.name for f in dataclasses.fields(Record) if f.default is dataclasses.MISSING)
_INT = {"M", "N", "bytes", "sm_count"}
_OPT_INT = {"peak_extra_bytes", "block_cap"}
_FLOAT = {"wall_us"}
_OPT_FLOAT = {"device_us", "gbps", "roofline_gbps", "frac_roofline", "datasheet_gbps"}
_STR = {
    "op",
    "impl",
    "dtype",
    "direction",
    "card",
    "torch",
    "triton",
    "mode",
    "date",
    "commit",
    "command",
    "note",
}
_OPT_STR = {"strategy", "layout", "shape_set"}


def check_sanity(rec: Record) -> Record:
    """Mark a record invalid (never drop it) when its numbers cannot be a result: a time that is
    not positive, or (GPU only) a bandwidth above the measured copy roofline (by more than
    ROOFLINE_SLACK) or above the datasheet. On CPU there is no L2 flush and tiny inputs live in
    cache, so beating a DRAM copy there is no bug. Returns the same record."""
    problems = []
    for name in ("device_us", "wall_us"):
        value = getattr(rec, name)
        if value is not None and not value > 0:
            problems.append(f"{name}={value} is not positive")
    gpu = rec.mode == "gpu"
    if (
        gpu
        and rec.gbps is not None
        and rec.roofline_gbps
        and rec.gbps > ROOFLINE_SLACK * rec.roofline_gbps
    ):
        problems.append(
            f"{rec.gbps:.0f} GB/s exceeds the measured copy roofline "
            f"{rec.roofline_gbps:.0f} GB/s: a measurement bug (warm L2? missed kernel?)"
        )
    if gpu and rec.gbps is not None and rec.datasheet_gbps and rec.gbps > rec.datasheet_gbps:
        problems.append(f"{rec.gbps:.0f} GB/s exceeds the datasheet {rec.datasheet_gbps:.0f} GB/s")
    if problems:
        rec.valid = False
        rec.note = "; ".join(filter(None, [rec.note, *problems]))
    return rec


# --------------------------------------------------------------------------------------------
# Validation shared by both formats
# --------------------------------------------------------------------------------------------


def _coerce(name: str, value, where: str, from_text: bool):
    """Check (JSON) or parse (CSV text) one field; raise ValueError naming file and line."""

    def bad(expected: str):
        return ValueError(f"{where}: field {name!r} must be {expected}, got {value!r}")

    if from_text and isinstance(value, str):
        if value == "" and (name in _OPT_INT | _OPT_FLOAT | _OPT_STR):
            return None
        try:
            if name in _INT | _OPT_INT:
                return int(value)
            if name in _FLOAT | _OPT_FLOAT:
                return float(value)
            if name == "valid":
                if value not in ("True", "False", "true", "false", "1", "0"):
                    raise bad("a boolean")
                return value in ("True", "true", "1")
            if name == "kernels":
                value = json.loads(value)
        except (ValueError, json.JSONDecodeError) as exc:
            if isinstance(exc, ValueError) and str(exc).startswith(where):
                raise
            raise bad("a number" if name != "kernels" else "a JSON object") from None
    if value is None and name in _OPT_INT | _OPT_FLOAT | _OPT_STR:
        return None
    if name in _INT | _OPT_INT:
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad("an integer")
    elif name in _FLOAT | _OPT_FLOAT:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad("a number")
        value = float(value)
    elif name in _STR | _OPT_STR:
        if not isinstance(value, str):
            raise bad("a string")
    elif name == "valid":
        if not isinstance(value, bool):
            raise bad("a boolean")
    elif name == "kernels":
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool)
            for k, v in value.items()
        ):
            raise bad("an object of kernel name -> µs")
        value = {k: float(v) for k, v in value.items()}
    return value


def _from_mapping(row: dict, where: str, from_text: bool) -> Record:
    if not isinstance(row, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(row).__name__}")
    missing = [name for name in _REQUIRED if name not in row]
    if missing:
        raise ValueError(f"{where}: missing field(s) {', '.join(missing)}")
    unknown = sorted(set(row) - set(FIELDS))
    if unknown:
        raise ValueError(f"{where}: unknown field(s) {', '.join(unknown)}")
    return Record(**{k: _coerce(k, v, where, from_text) for k, v in row.items()})


# --------------------------------------------------------------------------------------------
# JSONL and CSV
# --------------------------------------------------------------------------------------------


def record_to_json(rec: Record) -> str:
    return json.dumps(dataclasses.asdict(rec), sort_keys=False)


def write_jsonl(records, path: str | Path, *, append: bool = False) -> Path:
    """One record a line; gzipped where ``path`` ends in .gz (as ``read_jsonl`` reads it), with
    mtime 0 so the same records give the same bytes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(record_to_json(rec) + "\n" for rec in records)
    if path.suffix == ".gz":
        if append:
            raise ValueError(f"{path}: cannot append to a gzipped file")
        path.write_bytes(gzip.compress(text.encode("utf-8"), compresslevel=9, mtime=0))
    else:
        with path.open("a" if append else "w", encoding="utf-8") as f:
            f.write(text)
    return path


def replace_jsonl(records, path: str | Path) -> Path:
    """Write ``records`` to a sibling temporary file, then rename it over ``path``: a run killed
    while writing leaves the previous complete file, never a truncated line."""
    path = Path(path)
    tmp = path.with_name(f".tmp.{path.name}")  # the same suffix: gzipped as ``path`` is
    write_jsonl(records, tmp)
    tmp.replace(path)
    return path


def read_jsonl(path: str | Path) -> list[Record]:
    path = Path(path)
    records = []
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{where}: not valid JSON ({exc.msg})") from None
            records.append(_from_mapping(row, where, from_text=False))
    return records


def write_csv(records, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        for rec in records:
            row = dataclasses.asdict(rec)
            row["kernels"] = json.dumps(row["kernels"])
            writer.writerow({k: ("" if v is None else v) for k, v in row.items()})
    return path


def read_csv(path: str | Path) -> list[Record]:
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    reader = csv.DictReader(io.StringIO(text, newline=""))
    if reader.fieldnames is None:
        raise ValueError(f"{path}:1: empty CSV file, expected a header row")
    records = []
    for row in reader:
        where = f"{path}:{reader.line_num}"
        if None in row:
            raise ValueError(f"{where}: more values than header fields")
        row = {k: v for k, v in row.items() if not (v is None and k not in _REQUIRED)}
        if any(v is None for v in row.values()):
            raise ValueError(f"{where}: fewer values than header fields")
        records.append(_from_mapping(row, where, from_text=True))
    return records


def write_records(records, path: str | Path) -> Path:
    """Write to ``.jsonl`` or ``.csv`` (chosen by the suffix)."""
    suffix = Path(path).suffix.lower()
    if suffix == ".jsonl":
        return write_jsonl(records, path)
    if suffix == ".csv":
        return write_csv(records, path)
    raise ValueError(f"{path}: unknown record format {suffix!r}, expected .jsonl or .csv")


def read_records(path: str | Path) -> list[Record]:
    """Read ``.jsonl`` (or ``.jsonl.gz``) or ``.csv``; a malformed file raises ValueError naming
    file and line."""
    name = Path(path).name.lower()
    if name.endswith((".jsonl", ".jsonl.gz")):
        return read_jsonl(path)
    if name.endswith(".csv"):
        return read_csv(path)
    suffix = Path(path).suffix.lower()
    raise ValueError(f"{path}: unknown record format {suffix!r}, expected .jsonl or .csv")


# --------------------------------------------------------------------------------------------
# Recorded runs shipped with the package
# --------------------------------------------------------------------------------------------


def recorded_path(card: str, date: str, data_dir: str | Path = DATA_DIR) -> Path:
    """Where a run on ``card`` at ``date`` (YYYY-MM-DD) is recorded."""
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", date):
        raise ValueError(f"date must be YYYY-MM-DD, got {date!r}")
    return Path(data_dir) / f"{card_slug(card)}-{date}.jsonl"


def recorded_files(card: str | None = None, data_dir: str | Path = DATA_DIR) -> list[Path]:
    """Recorded JSONL files (``.jsonl.gz`` too), oldest first; only ``card``'s (name or slug)
    if given."""
    files = []
    for path in sorted(Path(data_dir).glob("*.jsonl*")):
        match = _RECORDED_NAME.match(path.name)
        if match and (card is None or match["card"] == card_slug(card)):
            files.append(path)
    return sorted(files, key=lambda p: (_RECORDED_NAME.match(p.name)["date"], p.name))


def load_recorded(card: str | None = None, data_dir: str | Path = DATA_DIR) -> list[Record]:
    """All records shipped in ``normlab/data/`` (only ``card``'s if given). Prints a one-line
    message to stderr and returns [] when there is none."""
    files = recorded_files(card, data_dir)
    if not files:
        which = f" for card {card!r} ({card_slug(card)}-*.jsonl)" if card else ""
        print(f"normlab.bench: no recorded runs{which} in {data_dir}", file=sys.stderr)
        return []
    return [rec for path in files for rec in read_jsonl(path)]


__all__ = [
    "DATA_DIR",
    "FIELDS",
    "ROOFLINE_SLACK",
    "Record",
    "card_slug",
    "check_sanity",
    "dtype_name",
    "load_recorded",
    "parse_dtype",
    "read_csv",
    "read_jsonl",
    "read_records",
    "recorded_files",
    "recorded_path",
    "replace_jsonl",
    "write_csv",
    "write_jsonl",
    "write_records",
]
