"""Building the interop tests' Maven projects (``java/``, the store harness, and ``broker/``, the
broker harness; both compile ``shared-java/`` too) for a profile, once: the build is skipped while
the jar and the classpath file are newer than the pom and every source, including the shared ones.
"""

from __future__ import annotations

import dataclasses
import fcntl
import os
import shutil
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

INTEROP_DIR = Path(__file__).resolve().parent
#: The Java sources both harnesses compile (a second source root of each pom).
SHARED_JAVA_DIR = INTEROP_DIR / "shared-java"
#: Held while Maven runs: two pytest processes never run Maven at once (they would write the
#: same target/ folders and the same local repository).
BUILD_LOCK = INTEROP_DIR / ".maven-build.lock"
MAVEN_TIMEOUT = 900


class BuildError(RuntimeError):
    """Maven could not build a harness."""


def m2_repository() -> Path:
    """Maven's local repository: ``~/.m2/repository``, or ``$MAVEN_REPO_LOCAL`` if set."""
    return Path(os.environ.get("MAVEN_REPO_LOCAL", Path.home() / ".m2" / "repository"))


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


@dataclasses.dataclass(frozen=True)
class MavenProject:
    """One harness's Maven project and its profiles."""

    #: What the harness is, for error messages.
    name: str
    directory: Path
    #: The jar ``package`` makes (artifactId-version.jar).
    jar: str
    #: The profile active without ``-P``.
    default_profile: str
    #: Maven profile -> its build directory.
    profiles: Mapping[str, Path]
    #: A RocketMQ artifact id the project needs: when the local repository has it, Maven is
    #: tried offline first.
    needs: str
    #: The shared sources the pom adds (``../shared-java``).
    shared: Path = SHARED_JAVA_DIR

    def sources(self) -> list[Path]:
        """The pom and every file under ``src/`` and the shared ``src/``."""
        return [
            self.directory / "pom.xml",
            *_files(self.directory / "src"),
            *_files(self.shared / "src"),
        ]

    def outputs(self, profile: str) -> tuple[Path, Path]:
        """The jar and the classpath file of a profile's build."""
        target = self.profiles[profile]
        return target / self.jar, target / "classpath.txt"

    def built(self, profile: str) -> bool:
        """The jar and classpath file exist and are newer than the pom and every source."""
        outputs = self.outputs(profile)
        if not all(p.exists() for p in outputs):
            return False
        built = min(p.stat().st_mtime for p in outputs)
        return all(p.stat().st_mtime <= built for p in self.sources())

    def _maven(self, mvn: str, profile: str, offline: bool) -> subprocess.CompletedProcess[str]:
        cmd = [
            mvn,
            "-B",
            "-q",
            *(["-o"] if offline else []),
            *(["-P", profile] if profile != self.default_profile else []),
            *(
                [f"-Dmaven.repo.local={m2_repository()}"]
                if "MAVEN_REPO_LOCAL" in os.environ
                else []
            ),
            "package",
        ]
        return subprocess.run(
            cmd,
            cwd=self.directory,
            capture_output=True,
            text=True,
            timeout=MAVEN_TIMEOUT,
            check=False,
        )

    def build(self, profile: str) -> str:
        """Builds the project for ``profile`` if needed (offline first when the local repository
        already has RocketMQ, online otherwise or when that fails); returns its classpath
        (``java -cp``). Raises BuildError when Maven fails."""
        target = self.profiles[profile]
        with open(BUILD_LOCK, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not self.built(profile):
                mvn = shutil.which("mvn")
                if mvn is None:
                    raise BuildError(f"building the {self.name}: mvn is not on PATH")
                started = time.time()
                warm = (m2_repository() / "org" / "apache" / "rocketmq" / self.needs).exists()
                proc = self._maven(mvn, profile, offline=True) if warm else None
                if proc is None or proc.returncode != 0:
                    proc = self._maven(mvn, profile, offline=False)
                if proc.returncode != 0:
                    raise BuildError(
                        f"building the {self.name} ({profile}) failed (mvn exit "
                        f"{proc.returncode}):\n{proc.stdout[-5000:]}\n{proc.stderr[-5000:]}"
                    )
                # Maven leaves a jar or classpath file it finds up to date untouched (a pom
                # edit that keeps the dependencies, a comment): they are current as of the
                # build's start. A source saved during the build stays newer than that.
                for p in self.outputs(profile):
                    if p.stat().st_mtime < started:
                        os.utime(p, (started, started))
        return f"{target / 'classes'}{os.pathsep}{(target / 'classpath.txt').read_text().strip()}"
