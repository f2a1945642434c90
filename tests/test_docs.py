"""The docs stay true to the tree: every relative link of README.md and docs/ leads to a
file (and a heading, when it names one) that exists, and every module the pages name
exists (docs/architecture.md is the map of the code, issue 34).

Links and anchors are resolved as GitHub renders Markdown: a link is relative to its
page, an anchor is the slug of a heading of the page it points at. Module names are
checked wherever they appear outside fenced code: ``scheduler/x/y.py`` and
``scheduler/x/`` as paths from the repository's root, ``scheduler.x.y`` as a module
(or a module's attribute), and in backticks a bare ``y.py`` or ``y/`` after such a path
on the same line or paragraph, as a sibling of it (``scheduler/api/task.py``, ``job.py``).
docs/adding-code.md is left out of the module check: its recipes name the files of past
commits, some since moved.
"""

from __future__ import annotations

import importlib
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
HISTORY = {ROOT / "docs" / "adding-code.md"}  # names the files of past commits

_FENCE = re.compile(r"^\s*(```|~~~)")
_CODE_SPAN = re.compile(r"`[^`]*`")
_LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_PATH = re.compile(r"(?<![\w./-])scheduler/[\w./-]*")
_DOTTED = re.compile(r"(?<![\w./-])scheduler(?:\.\w+)+")
_BARE = re.compile(r"^[\w-]+(?:\.py|\.html|/)$")


def _rel(page: Path) -> str:
    return str(page.relative_to(ROOT))


def _prose(page: Path) -> Iterator[tuple[int, str]]:
    """The page's lines outside fenced code blocks, numbered from 1."""
    fenced = False
    for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield n, line


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text: inline markup and punctuation dropped,
    lower case, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = text.lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every anchor of ``page``'s headings; a repeated slug gets -1, -2... as on GitHub."""
    seen: Counter[str] = Counter()
    out = set()
    for _, line in _prose(page):
        m = _HEADING.match(line)
        if not m:
            continue
        base = slug(m[2])
        out.add(base if not seen[base] else f"{base}-{seen[base]}")
        seen[base] += 1
    return out


def links(page: Path) -> Iterator[tuple[int, str]]:
    """The relative links and images of ``page``, outside code."""
    for n, line in _prose(page):
        for m in _LINK.finditer(_CODE_SPAN.sub("", line)):
            target = m[1]
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            yield n, target


def broken_links(page: Path) -> list[str]:
    out = []
    for n, target in links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        where = f"{_rel(page)}:{n}: {target}"
        if not dest.exists():
            out.append(f"{where}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            out.append(f"{where}: no heading #{anchor} in {_rel(dest)}")
    return out


def _module_exists(dotted: str) -> bool:
    """``scheduler.x.y`` is a module, or an attribute (chain) of the longest module
    prefix of it."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        candidate = ROOT.joinpath(*parts[:i])
        if candidate.with_suffix(".py").is_file() or (candidate / "__init__.py").is_file():
            obj: object = importlib.import_module(".".join(parts[:i]))
            for attr in parts[i:]:
                if not hasattr(obj, attr):
                    return False
                obj = getattr(obj, attr)
            return True
    return False


def missing_modules(page: Path) -> list[str]:
    out = []
    base: Path | None = None
    for n, line in _prose(page):
        if not line.strip() or line.lstrip().startswith("|"):
            base = None  # a bare name is read against a path of its own paragraph or row
        where = f"{_rel(page)}:{n}"
        for m in _PATH.finditer(line):
            path = m[0].rstrip(".")
            if not (ROOT / path).exists():
                out.append(f"{where}: {path} does not exist")
        for m in _DOTTED.finditer(line):
            if not _module_exists(m[0]):
                out.append(f"{where}: {m[0]} is no module (or attribute of one)")
        for span in _CODE_SPAN.findall(line):
            token = span.strip("`")
            if token.startswith("scheduler/"):
                full = ROOT / token
                base = full if token.endswith("/") else full.parent
            elif base is not None and _BARE.match(token) and not (base / token).exists():
                out.append(f"{where}: {token} is not in {base.relative_to(ROOT)}/")
    return out


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_every_relative_link_leads_to_a_file_and_heading_that_exist(page: Path) -> None:
    assert broken_links(page) == []


@pytest.mark.parametrize("page", [p for p in PAGES if p not in HISTORY], ids=_rel)
def test_every_module_a_page_names_exists(page: Path) -> None:
    assert missing_modules(page) == []


def test_the_architecture_page_names_the_modules_of_each_path() -> None:
    """The map walks the path of a pod and of a preemption through real modules."""
    page = ROOT / "docs" / "architecture.md"
    text = page.read_text(encoding="utf-8")
    named = set(_PATH.findall(text))
    assert len(named) > 50
    for section in ("## The path of a pod", "## The path of a preemption"):
        assert section in text


def test_every_page_is_in_the_index() -> None:
    index = (ROOT / "docs" / "README.md").read_text(encoding="utf-8")
    for page in PAGES:
        if page.parent == ROOT or page == ROOT / "docs" / "README.md":
            continue
        listed = f"]({page.relative_to(ROOT / 'docs')})" in index
        assert listed, f"{_rel(page)} not in docs/README.md"


def test_the_front_door_stays_short() -> None:
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) < 300


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("Queues", "queues"),
        ("A cluster to talk to: `--serve`", "a-cluster-to-talk-to---serve"),
        ("Writes, in kube-scheduler's order", "writes-in-kube-schedulers-order"),
        ("DRA: devices (`resource.k8s.io/v1`)", "dra-devices-resourcek8siov1"),
        ("2026-11-26, at `7800bc1`: failover", "2026-11-26-at-7800bc1-failover"),
        ("See [Queues](queues.md) first", "see-queues-first"),
    ],
    ids=["word", "code", "apostrophe", "dots", "date", "link"],
)
def test_slugs_are_githubs(heading: str, anchor: str) -> None:
    assert slug(heading) == anchor


def test_a_repeated_heading_gets_a_number(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text("# A\n\n## Runs\n\n```\n## not a heading\n```\n\n## Runs\n", encoding="utf-8")
    assert anchors(page) == {"a", "runs", "runs-1"}
