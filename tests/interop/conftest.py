"""Issue 6: Apache RocketMQ's own store as the referee.

The session fixture ``rocketmq`` builds the Java harness in ``java/`` with Maven once (offline
when the local repository already holds the dependencies, online otherwise) and returns a
runner. Without ``java`` or ``mvn`` every interop test is skipped with a reason that names what
is missing; a failing build fails the tests (it never skips them).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
pytest.register_assert_rewrite("interop_harness")

from interop_harness import JAVA_DIR, JavaHarness  # noqa: E402 - needs the path above

MAVEN_TIMEOUT = 900


def _m2_repository() -> Path:
    """Maven's local repository: ``~/.m2/repository``, or ``$MAVEN_REPO_LOCAL`` if set."""
    return Path(os.environ.get("MAVEN_REPO_LOCAL", Path.home() / ".m2" / "repository"))


def _sources() -> list[Path]:
    return [JAVA_DIR / "pom.xml", *sorted((JAVA_DIR / "src").rglob("*.java"))]


#: Maven profile -> its build directory (pom.xml): the current 5.x release, and 4.9.x.
PROFILES = {"rmq5": JAVA_DIR / "target", "rmq4": JAVA_DIR / "target" / "rmq4"}


def _built(target: Path) -> bool:
    """The jar and classpath exist and are newer than the pom and every source file."""
    classpath_file = target / "classpath.txt"
    jar = target / "rmq-interop-harness-1.0.jar"
    if not (classpath_file.exists() and jar.exists()):
        return False
    built = min(classpath_file.stat().st_mtime, jar.stat().st_mtime)
    return all(p.stat().st_mtime <= built for p in _sources())


def _maven(mvn: str, profile: str, offline: bool) -> subprocess.CompletedProcess[str]:
    cmd = [
        mvn,
        "-B",
        "-q",
        *(["-o"] if offline else []),
        *(["-P", profile] if profile != "rmq5" else []),
        "package",
    ]
    if "MAVEN_REPO_LOCAL" in os.environ:
        cmd.insert(1, f"-Dmaven.repo.local={_m2_repository()}")
    return subprocess.run(
        cmd, cwd=JAVA_DIR, capture_output=True, text=True, timeout=MAVEN_TIMEOUT, check=False
    )


def build_harness(profile: str = "rmq5") -> str:
    """Builds the harness for a profile if needed; returns its classpath (``java -cp``)."""
    target = PROFILES[profile]
    target.mkdir(parents=True, exist_ok=True)
    with open(JAVA_DIR / "target" / ".build-lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two pytest processes never run Maven at once
        if not _built(target):
            mvn = shutil.which("mvn")
            assert mvn is not None
            warm = (_m2_repository() / "org" / "apache" / "rocketmq" / "rocketmq-store").exists()
            proc = _maven(mvn, profile, offline=True) if warm else None
            if proc is None or proc.returncode != 0:
                proc = _maven(mvn, profile, offline=False)
            if proc.returncode != 0:
                pytest.fail(
                    f"building the RocketMQ interop harness ({profile}) failed "
                    f"(mvn exit {proc.returncode}):\n{proc.stdout[-5000:]}\n{proc.stderr[-5000:]}",
                    pytrace=False,
                )
    return f"{target / 'classes'}{os.pathsep}{(target / 'classpath.txt').read_text().strip()}"


def _harness(tmp_path_factory: pytest.TempPathFactory, profile: str) -> JavaHarness:
    java, mvn = shutil.which("java"), shutil.which("mvn")
    missing = [name for name, path in (("java", java), ("mvn", mvn)) if path is None]
    if missing:
        pytest.skip(
            f"INTEROP TESTS SKIPPED: {' and '.join(missing)} not found on PATH; issue 6's "
            "compatibility proof against Apache RocketMQ's store needs Java 17 and Maven"
        )
    assert java is not None
    classpath = build_harness(profile)
    return JavaHarness(
        java=java, classpath=classpath, home=tmp_path_factory.mktemp(f"jvm-home-{profile}")
    )


@pytest.fixture(scope="session")
def rocketmq(tmp_path_factory: pytest.TempPathFactory) -> JavaHarness:
    """Apache RocketMQ's store, current 5.x release (pom.xml's rocketmq.version)."""
    return _harness(tmp_path_factory, "rmq5")


@pytest.fixture(scope="session")
def rocketmq4(tmp_path_factory: pytest.TempPathFactory) -> JavaHarness:
    """Apache RocketMQ's store, 4.9.x line (profile rmq4)."""
    return _harness(tmp_path_factory, "rmq4")


@pytest.fixture(params=["rmq5", "rmq4"])
def referee(request: pytest.FixtureRequest) -> JavaHarness:
    """Both published lines of RocketMQ's store, one after the other."""
    name = "rocketmq" if request.param == "rmq5" else "rocketmq4"
    harness: JavaHarness = request.getfixturevalue(name)
    return harness
