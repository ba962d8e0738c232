"""The docs stay true to the code: relative links resolve, and docs/planner.md's sections name
rules that exist and are the sections the planners' comments point to."""

import re
from pathlib import Path

import pytest

from normlab.losses import config as loss_config
from normlab.losses import online
from normlab.norms import config as norm_config

ROOT = Path(__file__).resolve().parents[1]
PLANNER = ROOT / "docs" / "planner.md"
MARKDOWN = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").rglob("*.md")),
    ROOT / "benchmarks" / "data" / "README.md",
    ROOT / "normlab" / "data" / "README.md",
]


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but - and _ dropped, spaces to -."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {anchor(m[1]) for m in re.finditer(r"^#+\s+(.*)$", path.read_text(), re.MULTILINE)}


def test_anchor_follows_github():
    assert anchor("The forward's block") == "the-forwards-block"
    assert anchor("form=auto by vocabulary class") == "formauto-by-vocabulary-class"
    assert anchor("Shifted rows (forward)") == "shifted-rows-forward"


@pytest.mark.parametrize("doc", MARKDOWN, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc):
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", doc.read_text()):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, fragment = target.partition("#")
        dest = (doc.parent / path) if path else doc
        if not dest.exists():
            broken.append(target)
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
            broken.append(target)
    assert not broken, f"{doc.relative_to(ROOT)}: {broken}"


def planner_sections() -> dict[str, tuple[str, str]]:
    """docs/planner.md's ### sections: anchor -> (the ## part it is in, its text)."""
    sections, part = {}, ""
    for block in re.split(r"^(?=##+ )", PLANNER.read_text(), flags=re.MULTILINE):
        heading, _, body = block.partition("\n")
        if heading.startswith("## "):
            part = heading
        elif heading.startswith("### "):
            sections[anchor(heading[4:])] = (part, body)
    return sections


def test_planner_pointers_resolve():
    """Every (docs/planner.md#...) in the package's comments names a section of the page."""
    sections = planner_sections()
    cited = set()
    for source in (ROOT / "normlab").rglob("*.py"):
        cited |= set(re.findall(r"docs/planner\.md#([\w-]+)", source.read_text()))
    assert cited, "no comment points into docs/planner.md"
    assert not cited - set(sections), sorted(cited - set(sections))


@pytest.mark.parametrize("part, module", [("## Norms", norm_config), ("## Losses", loss_config),
                                          ("## Loss kernels", online)])  # fmt: skip
def test_planner_sections_name_real_rules(part, module):
    """Each section opens with the names it covers (`A` · `b`); each is in its planner."""
    sections = [(a, body) for a, (p, body) in planner_sections().items()
                if p.split(" (")[0] == part]  # fmt: skip
    assert sections
    for name, body in sections:
        lead = body.strip().split("\n\n")[0]
        names = re.findall(r"`([A-Za-z_][\w.]*)`", lead)
        assert names, f"{name}: opens with no names"
        missing = [n for n in names if "." not in n and not hasattr(module, n)]
        assert not missing, f"{name}: {missing} not in {module.__name__}"


def test_every_switch_is_listed():
    """Each NORMLAB_* variable the package reads (but the mode and the commit, which the README
    and the bench's records describe) has a row in docs/planner.md's table of switches."""
    read = set()
    for source in (ROOT / "normlab").rglob("*.py"):
        read |= set(re.findall(r"environ(?:\.get\(|\[)\"(NORMLAB_\w+)\"", source.read_text()))
    table = PLANNER.read_text().partition("## The switches")[2]
    listed = set(re.findall(r"^\| `(NORMLAB_\w+)", table, re.MULTILINE))
    missing = read - {"NORMLAB_MODE", "NORMLAB_COMMIT"} - listed
    assert not missing, sorted(missing)
    assert listed <= read, sorted(listed - read)
