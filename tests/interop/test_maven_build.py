"""The harnesses' Maven build (``maven_build.py``): Maven runs when the pom, a source of the
project or a shared source is newer than the jar and the classpath file, and afterwards the build
counts as done, even where Maven left an output it found up to date untouched."""

from __future__ import annotations

import dataclasses
import shutil
import time
from pathlib import Path

import pytest
from interop_harness import JAVA_DIR, PROJECT
from maven_build import SHARED_JAVA_DIR

pytestmark = pytest.mark.interop


@pytest.mark.usefixtures("rocketmq")
def test_rebuilt_after_a_pom_or_shared_source_change_and_then_built(tmp_path: Path) -> None:
    # A copy of the store harness's project beside a copy of the shared sources (its pom adds
    # ../shared-java); the rocketmq fixture has built the real one, so Maven works offline.
    shutil.copytree(JAVA_DIR, tmp_path / "java", ignore=shutil.ignore_patterns("target"))
    shutil.copytree(SHARED_JAVA_DIR, tmp_path / "shared-java")
    project = dataclasses.replace(
        PROJECT,
        directory=tmp_path / "java",
        profiles={"rmq5": tmp_path / "java" / "target"},
        shared=tmp_path / "shared-java",
    )
    jar, classpath_file = project.outputs("rmq5")
    assert not project.built("rmq5")
    classpath = project.build("rmq5")
    assert project.built("rmq5")
    assert classpath.startswith(f"{tmp_path / 'java' / 'target' / 'classes'}:")
    assert (tmp_path / "java" / "target" / "classes" / "rmqshared" / "Json.class").exists()
    # Built: a second call leaves the outputs alone.
    stamps = (jar.stat().st_mtime_ns, classpath_file.stat().st_mtime_ns)
    project.build("rmq5")
    assert (jar.stat().st_mtime_ns, classpath_file.stat().st_mtime_ns) == stamps

    # A pom edit that keeps the dependencies: Maven rewrites neither the jar nor the classpath
    # file, and the build must still count as done afterwards.
    time.sleep(1.1)
    pom = tmp_path / "java" / "pom.xml"
    pom.write_text(pom.read_text() + "<!-- edited -->\n")
    assert not project.built("rmq5")
    project.build("rmq5")
    assert project.built("rmq5")

    # A shared source saved again: stale for this project too; rebuilt, then built.
    time.sleep(1.1)
    shared = tmp_path / "shared-java" / "src" / "main" / "java" / "rmqshared" / "Json.java"
    shared.write_text(shared.read_text())
    assert not project.built("rmq5")
    project.build("rmq5")
    assert project.built("rmq5")
