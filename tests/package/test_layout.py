"""The source tree keeps the shape issue 16 gave it: files small enough to be about one thing,
and comments that cite the project's own documents (whose sections exist) rather than a spec
outside the repository."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Lines of non-test code a source file may hold ("about 800": a file past it should split).
MAX_CODE_LINES = 800


def _sources() -> list[Path]:
    rust = [
        *(ROOT / "rust" / "core" / "src").rglob("*.rs"),
        *(ROOT / "rust" / "py" / "src").rglob("*.rs"),
    ]
    python = list((ROOT / "python" / "rmqstore").rglob("*.py"))
    return sorted(rust + python)


def _code_lines(path: Path) -> int:
    """Lines before a Rust file's test module (`#[cfg(test)]` followed by `mod`)."""
    lines = path.read_text().splitlines()
    for i, line in enumerate(lines[:-1]):
        if line.startswith("#[cfg(test)]") and lines[i + 1].startswith("mod "):
            return i
    return len(lines)


def test_no_source_file_holds_more_than_about_800_lines_of_code() -> None:
    sizes = {p.relative_to(ROOT).as_posix(): _code_lines(p) for p in _sources()}
    assert len(sizes) > 50  # the walk found the tree
    too_big = {name: n for name, n in sizes.items() if n > MAX_CODE_LINES}
    assert too_big == {}


def _anchors(doc: Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings."""
    out = set()
    for line in doc.read_text().splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^a-z0-9 _-]", "", title).replace(" ", "-"))
    return out


def _cited_files() -> list[Path]:
    dirs = ("rust", "python", "tests", "benches")
    exts = {".rs", ".py", ".pyi", ".md"}
    return [
        p
        for d in dirs
        for p in (ROOT / d).rglob("*")
        if p.suffix in exts and p.is_file() and "target" not in p.parts
    ]


def test_comments_cite_sections_that_exist_in_the_repository() -> None:
    docs = {name: _anchors(ROOT / "docs" / name) for name in ("format.md", "architecture.md")}
    cite = re.compile(r"docs/(format|architecture)\.md#([a-z0-9_-]+)")
    checked, missing, outside = 0, [], []
    for path in _cited_files():
        text = path.read_text(errors="replace")
        if path.name != "test_layout.py" and ("STORE_SPEC" in text or "shared/spec" in text):
            outside.append(path.relative_to(ROOT).as_posix())
        for doc, anchor in cite.findall(text):
            checked += 1
            if anchor not in docs[f"{doc}.md"]:
                missing.append(f"{path.relative_to(ROOT).as_posix()}: docs/{doc}.md#{anchor}")
    assert checked > 30  # the citations were found
    assert missing == []
    assert outside == []


@pytest.mark.parametrize("doc", ["architecture.md", "format.md", "perf-log.md"])
def test_the_documents_a_newcomer_reads_are_linked_from_the_readme(doc: str) -> None:
    assert (ROOT / "docs" / doc).is_file()
    assert f"docs/{doc}" in (ROOT / "README.md").read_text()
