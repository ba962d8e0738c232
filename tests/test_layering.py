"""Imports point one way: kernels and the harness never pull in the notebook stack."""

import subprocess
import sys

import pytest

HEAVY = ("ipywidgets", "plotly")

_PROBE = """
import importlib, json, pkgutil, sys
import normlab
after_normlab = sorted(m for m in sys.modules if m.split('.')[0] in {heavy} or
                       m.startswith(('normlab.bench', 'normlab.viz')))
import normlab.losses, normlab.norms
for pkg in (normlab.norms, normlab.losses):
    for info in pkgutil.iter_modules(pkg.__path__):
        importlib.import_module(pkg.__name__ + '.' + info.name)
after_kernels = sorted(m for m in sys.modules if m.split('.')[0] in {heavy} or
                       m.startswith(('normlab.bench', 'normlab.viz')))
{extra}
after_extra = sorted(m for m in sys.modules if m.split('.')[0] in {heavy})
print(json.dumps([after_normlab, after_kernels, after_extra]))
"""


def _probe(extra: str):
    code = _PROBE.format(heavy=set(HEAVY), extra=extra)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    import json

    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "extra",
    [
        "import normlab.bench, normlab.bench.sweep, normlab.bench.registry",
        "import normlab.__main__",
    ],
)
def test_kernels_and_bench_import_no_notebook_stack(extra):
    after_normlab, after_kernels, after_extra = _probe(extra)
    assert after_normlab == [], "import normlab pulled in " + ", ".join(after_normlab)
    assert after_kernels == [], "the kernel modules pulled in " + ", ".join(after_kernels)
    assert after_extra == [], f"{extra!r} pulled in " + ", ".join(after_extra)


def test_figures_and_report_need_no_widgets():
    """normlab.viz's figures and the headless report load plotly but not ipywidgets; the widgets
    module loads on first use of viz.widgets."""
    *_, after_viz = _probe("import normlab.viz, normlab.report")
    assert "plotly" in after_viz and "ipywidgets" not in after_viz, after_viz
    *_, after_widgets = _probe("import normlab.viz; normlab.viz.widgets.PRESETS")
    assert "ipywidgets" in after_widgets
