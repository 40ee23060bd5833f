"""Issue 6: Apache RocketMQ's own store as the referee.

The session fixture ``rocketmq`` builds the Java harness in ``java/`` with Maven once (offline
when the local repository already holds the dependencies, online otherwise) and returns a
runner. Without ``java`` or ``mvn`` every interop test is skipped with a reason that names what
is missing; a failing build fails the tests (it never skips them).
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

# Appended, not prepended: ``from conftest import ...`` in tests/ must keep finding
# tests/conftest.py.
sys.path.append(str(Path(__file__).resolve().parent))
pytest.register_assert_rewrite("interop_harness", "broker_harness", "maven_build")

from broker_harness import BrokerHarness, build_broker_harness  # noqa: E402 - path above
from interop_harness import JavaHarness, build_harness  # noqa: E402 - path above
from maven_build import BuildError  # noqa: E402 - path above


def _java_and_classpath(
    skipped: str, needs: str, build: Callable[[str], str], profile: str
) -> tuple[str, str]:
    """``java``'s path and the harness built for ``profile`` (its classpath). Skips with
    ``skipped`` and ``needs`` in the reason when java or mvn is not on PATH; fails (never skips)
    when the build fails."""
    java, mvn = shutil.which("java"), shutil.which("mvn")
    missing = [name for name, path in (("java", java), ("mvn", mvn)) if path is None]
    if missing:
        pytest.skip(f"{skipped}: {' and '.join(missing)} not found on PATH; {needs}")
    assert java is not None
    try:
        classpath = build(profile)
    except BuildError as e:
        pytest.fail(str(e), pytrace=False)
    return java, classpath


def _harness(tmp_path_factory: pytest.TempPathFactory, profile: str) -> JavaHarness:
    java, classpath = _java_and_classpath(
        "INTEROP TESTS SKIPPED",
        "issue 6's compatibility proof against Apache RocketMQ's store needs Java 17 and Maven",
        build_harness,
        profile,
    )
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


#: Broker harness profiles and the RocketMQ versions they run.
BROKER_VERSIONS = {"rmq551": "5.5.1 broker/store, 5.5.0 name server/client", "rmq533": "5.3.3"}


@pytest.fixture(scope="session", params=list(BROKER_VERSIONS))
def broker(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> BrokerHarness:
    """A real RocketMQ broker and name server with real clients (``broker/``), one JVM per
    run, on 127.0.0.1 only."""
    java, classpath = _java_and_classpath(
        "BROKER INTEROP TESTS SKIPPED",
        "the broker round trip needs Java 17 and Maven",
        build_broker_harness,
        request.param,
    )
    return BrokerHarness(
        java=java,
        classpath=classpath,
        home=tmp_path_factory.mktemp(f"broker-home-{request.param}"),
        version=BROKER_VERSIONS[request.param],
    )
