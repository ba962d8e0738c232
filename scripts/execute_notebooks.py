"""Execute the notebooks with nbclient and save them with clean metadata.

    python scripts/execute_notebooks.py                      # all notebooks, in place (CPU refresh)
    python scripts/execute_notebooks.py --out runs/h200      # executed copies into runs/h200/
    python scripts/execute_notebooks.py notebooks/02-*.ipynb --timeout 900

Each notebook runs in a fresh ``python3`` kernel whose working directory is ``notebooks/`` and
whose ``PYTHONPATH`` starts with the repository root, so ``import normlab`` finds this checkout.
Saved notebooks keep their outputs (nbval compares them) but lose volatile metadata: execution
timings, widget state, and the widget-view outputs that would point at that missing state.
With ``--out``, a ``summary.json`` (notebook, passed, seconds, error) is written beside the
copies; the exit status is non-zero when any notebook failed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
import traceback
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
WIDGET_PLACEHOLDER = "[interactive widget: run this cell in JupyterLab to use it]"


def clean(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Strip run-specific metadata; keep outputs, tags and the python3 kernelspec."""
    nb.metadata = nbformat.from_dict({
        "kernelspec": KERNELSPEC,
        "language_info": {"name": "python"},
    })
    for cell in nb.cells:
        cell.metadata = nbformat.from_dict(
            {k: v for k, v in cell.metadata.items() if k in ("tags",)}
        )
        for out in cell.get("outputs", []):
            data = out.get("data")
            if data and WIDGET_MIME in data:
                # The widget state is not saved, so the view could not render; say what it was.
                del data[WIDGET_MIME]
                data["text/plain"] = WIDGET_PLACEHOLDER
    return nb


def execute(path: Path, out_dir: Path | None, timeout: int, kernel: str) -> dict:
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb, timeout=timeout, kernel_name=kernel, allow_errors=False,
        # nbclient needs the widget state to route Output-widget messages; clean() drops it.
        record_timing=False, store_widget_state=True,
        resources={"metadata": {"path": str(path.parent)}},
    )
    start = time.perf_counter()
    cells: list[dict] = []  # per executed code cell: index and seconds since the start

    def on_cell_executed(cell, cell_index, execute_reply=None, **_):
        cells.append({"cell": cell_index, "s": round(time.perf_counter() - start, 1)})

    client.on_cell_executed = on_cell_executed
    error = tb = None
    try:
        client.execute()
    except CellExecutionError as exc:
        lines = ANSI.sub("", str(exc)).strip().splitlines()
        error = lines[-1] if lines else type(exc).__name__
    except Exception as exc:  # kernel died, timeout: report it and go on with the others
        error = f"{type(exc).__name__}: {exc}"
        tb = traceback.format_exc().splitlines()[-12:]
    seconds = time.perf_counter() - start
    target = (out_dir / path.name) if out_dir else path
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(clean(nb), target)
    return {"notebook": path.name, "passed": error is None, "seconds": round(seconds, 1),
            "error": error, "traceback": tb, "cells": cells, "saved": str(target)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("notebooks", nargs="*", type=Path,
                        help="notebooks to run (default: notebooks/[0-9]*.ipynb)")
    parser.add_argument("--out", type=Path, default=None,
                        help="write executed copies here instead of in place")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per cell (default 600)")
    parser.add_argument("--kernel", default="python3", help="kernel name (default python3)")
    args = parser.parse_args(argv)

    paths = args.notebooks or sorted(NOTEBOOKS.glob("[0-9][0-9]-*.ipynb"))
    if not paths:
        parser.error(f"no notebooks found in {NOTEBOOKS}")
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        parser.error(f"not a file: {', '.join(missing)}")
    # The kernel is a subprocess: it inherits this environment, so it imports this checkout.
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT),
                                                             os.environ.get("PYTHONPATH")]))
    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")

    results = []
    for path in paths:
        result = execute(path.resolve(), args.out.resolve() if args.out else None,
                         args.timeout, args.kernel)
        results.append(result)
        status = "ok    " if result["passed"] else "FAILED"
        print(f"{status} {result['notebook']:<44} {result['seconds']:7.1f} s"
              + (f"  {result['error']}" if result["error"] else ""), flush=True)
    if args.out:
        (args.out / "summary.json").write_text(json.dumps(results, indent=1) + "\n")
    failed = [r for r in results if not r["passed"]]
    print(f"{len(results) - len(failed)}/{len(results)} notebooks passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
