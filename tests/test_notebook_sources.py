"""The committed notebooks' cells are exactly what scripts/make_notebooks.py generates."""

import importlib.util
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]


def test_notebooks_match_their_generator(tmp_path):
    spec = importlib.util.spec_from_file_location("make_notebooks",
                                                  ROOT / "scripts" / "make_notebooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(tmp_path)
    generated = sorted(tmp_path.glob("*.ipynb"))
    committed = sorted((ROOT / "notebooks").glob("*.ipynb"))
    assert [p.name for p in generated] == [p.name for p in committed]
    for new, old in zip(generated, committed, strict=True):
        new_cells = [c.source for c in nbformat.read(new, 4).cells]
        old_cells = [c.source for c in nbformat.read(old, 4).cells]
        assert new_cells == old_cells, f"{old.name} differs from scripts/make_notebooks.py"
