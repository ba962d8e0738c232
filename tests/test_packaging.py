"""The wheel ships only what the package reads: code, py.typed and the recorded records."""

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import normlab

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_contents(tmp_path):
    src = tmp_path / "src"  # a copy, so the build leaves nothing in the checkout
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "normlab", src / "normlab", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(tmp_path), str(src)],
        check=True,
    )
    (wheel,) = tmp_path.glob("normlab-*.whl")
    assert wheel.name.startswith(f"normlab-{normlab.__version__}-")
    with zipfile.ZipFile(wheel) as z:
        infos = z.infolist()
        names = {i.filename for i in infos}
    unpacked = sum(i.file_size for i in infos)
    # about 1.3 MiB of recorded runs (the first H200 run's records as text, 0.9 MiB) and the code
    assert unpacked < 2.25 * 2**20, f"wheel unpacks to {unpacked / 2**20:.2f} MiB"
    assert "normlab/py.typed" in names
    assert any(n.endswith("licenses/LICENSE") for n in names)
    assert not any("/dev/" in n or n.endswith(".ipynb") for n in names)
    # the records' run logs and README are provenance, in the repository: the package reads none
    assert not any(n.startswith("normlab/data/") and n.endswith((".log", ".md")) for n in names)
    assert any(n.startswith("normlab/data/") and n.endswith(".jsonl") for n in names)
    # load_recorded reads the gzipped population, normlab.bench.devdata the two JSON files
    shipped = {Path(n).name for n in names if n.startswith("normlab/data/")}
    for path in (ROOT / "normlab" / "data").glob("*.json*"):
        assert path.name in shipped, f"{path.name} is read by the package but not in the wheel"
