"""README.md's Python examples run as written: each ```python block alone, in a fresh
interpreter (isolated: only the installed package), in an empty working folder of its own; and
the blocks without Spark one after another in one folder, as a reader trying them in turn would
(so their stores' settings agree). The Spark block starts its own local session and runs under
the ``spark`` marker."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
BIN = Path(sys.executable).parent
_FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


def python_blocks() -> list[tuple[int, str]]:
    """``(line number, code)`` of every ```python block of README.md."""
    text = README.read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start()) + 1, m[1]) for m in _FENCE.finditer(text)]


def _uses_spark(code: str) -> bool:
    return "pyspark" in code or "rmqstore.spark" in code


BLOCKS = python_blocks()


def _run_block(line: int, code: str, cwd: Path, script: Path) -> None:
    script.write_text(code, encoding="utf-8")
    env = {
        **os.environ,
        # As in a shell with this virtualenv activated (Spark's Python workers run `python3`).
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "VIRTUAL_ENV": str(BIN.parent),
        # This machine's network is loopback only.
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    r = subprocess.run(
        [sys.executable, "-I", str(script)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    output = f"README.md line {line}:\n{code}\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}"
    if r.returncode != 0 or "Traceback" in r.stderr:
        pytest.fail(output, pytrace=False)


def test_readme_has_its_examples() -> None:
    """The parser finds the blocks (a test of none would pass on nothing)."""
    assert len(BLOCKS) >= 4, BLOCKS
    assert sum(_uses_spark(code) for _, code in BLOCKS) >= 1


@pytest.mark.parametrize(
    ("line", "code"),
    [
        pytest.param(line, code, id=f"line{line}", marks=[pytest.mark.spark])
        if _uses_spark(code)
        else pytest.param(line, code, id=f"line{line}")
        for line, code in BLOCKS
    ],
)
def test_readme_example_runs_alone(line: int, code: str, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    _run_block(line, code, work, tmp_path / "example.py")


def test_readme_examples_run_in_turn_in_one_folder(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    for i, (line, code) in enumerate(BLOCKS):
        if not _uses_spark(code):
            _run_block(line, code, work, tmp_path / f"example{i}.py")
