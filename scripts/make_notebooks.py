"""Write each notebook from its text source: notebooks/src/NN-name.py -> notebooks/NN-name.ipynb.

    python scripts/make_notebooks.py     # then scripts/execute_notebooks.py to fill the outputs

The sources are in the percent format that jupytext reads: a cell starts at a `# %%` line
(`# %% [markdown]` for prose, each line commented with `# `); lines before the first marker are
the file's header. tests/test_notebook_sources.py checks that the committed notebooks' cells are
exactly what this writes; outputs are left to the executed notebooks.
"""

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "notebooks" / "src"
OUT = ROOT / "notebooks"
KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}


def _uncomment(line: str) -> str:
    if line in ("#", ""):  # an empty prose line, or the blank line before the next cell
        return ""
    if not line.startswith("# "):
        raise ValueError(f"markdown line does not start with '# ': {line!r}")
    return line[2:]


def read_cells(text: str) -> list:
    """The cells of a percent-format source."""
    cells, kind, lines = [], None, []

    def close():
        if kind is None:
            return
        body = "\n".join(_uncomment(x) if kind == "markdown" else x for x in lines).strip("\n")
        cells.append(new_markdown_cell(body) if kind == "markdown" else new_code_cell(body))

    for line in text.splitlines():
        if line.startswith("# %%"):
            close()
            kind, lines = ("markdown" if line.strip() == "# %% [markdown]" else "code"), []
        elif kind is not None:
            lines.append(line)
    close()
    return cells


def main(out: Path = OUT, src: Path = SRC) -> None:
    for source in sorted(src.glob("*.py")):
        nb = new_notebook(cells=read_cells(source.read_text(encoding="utf-8")),
                          metadata={"kernelspec": KERNELSPEC, "language_info": {"name": "python"}})
        nbformat.write(nb, out / f"{source.stem}.ipynb")
        print("wrote", source.stem)


if __name__ == "__main__":
    main()
