"""Issue 21: the wheel carries the JVM connector's jar (``make wheel`` builds the jar first),
with the JNI library (linked for the wheel's glibc baseline) and arrow-c-data inside it, and
an installed wheel finds it by itself: ``rmqstore.spark.jar_path()`` names a file of the
installed package, and ``local_session()`` reads through ``rmqstore-jvm`` with nothing else
set. The sdist has no Java build, so neither it nor a wheel built from it has the jar."""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import textwrap
import zipfile
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerNeedSection

JAR_ENTRY = "rmqstore/jars/rmqstore-spark.jar"
LIBRARY = "rmqstore/native/linux-x86_64/librmqstore_jni.so"
SERVICES = "META-INF/services/org.apache.spark.sql.sources.DataSourceRegister"
#: The glibc the wheel's tag claims (tests/package/test_wheel.py checks the tag itself).
WHEEL_GLIBC = (2, 28)


@pytest.fixture(scope="module")
def jar_bytes(wheel: Path) -> bytes:
    with zipfile.ZipFile(wheel) as z:
        assert JAR_ENTRY in z.namelist(), "the wheel has no connector jar"
        return z.read(JAR_ENTRY)


def _glibc_versions(library: bytes) -> set[tuple[int, ...]]:
    """The GLIBC_x.y symbol versions a shared library needs (its .gnu.version_r)."""
    elf = ELFFile(io.BytesIO(library))
    needed: set[tuple[int, ...]] = set()
    for section in elf.iter_sections():
        if isinstance(section, GNUVerNeedSection):
            for _file, auxes in section.iter_versions():
                for aux in auxes:
                    if m := re.fullmatch(r"GLIBC_([\d.]+)", aux.name):
                        needed.add(tuple(int(p) for p in m[1].split(".")))
    return needed


def test_the_wheel_carries_the_jar_with_the_library_and_the_service(jar_bytes: bytes) -> None:
    with zipfile.ZipFile(io.BytesIO(jar_bytes)) as jar:
        names = set(jar.namelist())
        services = jar.read(SERVICES).decode().split()
        library = jar.read(LIBRARY)
    assert services == ["rmqstore.spark.RmqStoreJvmSource"]
    assert "rmqstore/spark/RmqStoreJvmSource.class" in names
    assert "org/apache/arrow/c/Data.class" in names  # arrow-c-data, which Spark lacks
    assert "arrow_cdata_jni/x86_64/libarrow_cdata_jni.so" in names
    assert library[:4] == b"\x7fELF"


def test_the_jni_library_needs_no_glibc_newer_than_the_wheel_tag(jar_bytes: bytes) -> None:
    """zig links it against glibc 2.28's symbols (the Makefile's JNI_GLIBC), as the wheel's
    extension: a symbol version newer than the wheel's tag would keep the JVM from loading it
    on systems the tag promises (System.load fails with "version `GLIBC_2.x' not found")."""
    with zipfile.ZipFile(io.BytesIO(jar_bytes)) as jar:
        library = jar.read(LIBRARY)
    needed = _glibc_versions(library)
    assert needed, "no GLIBC symbol versions read"
    assert max(needed) <= WHEEL_GLIBC, sorted(needed)


def test_the_sdist_has_no_jar(sdist: Path) -> None:
    with tarfile.open(sdist) as tar:
        assert not [n for n in tar.getnames() if n.endswith(".jar")]


def test_the_installed_package_has_the_wheels_jar(jar_bytes: bytes) -> None:
    """The test virtualenv's package (``make wheel`` installed it) has the jar the wheel has,
    and ``jar_path()`` names it without RMQSTORE_SPARK_JAR."""
    from rmqstore.spark import JAR_ENV

    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    code = "from rmqstore.spark import jar_path; print(jar_path())"
    env = {k: v for k, v in os.environ.items() if k != JAR_ENV}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    path = Path(out.stdout.strip())
    assert path == site / JAR_ENTRY
    assert path.read_bytes() == jar_bytes


# In a fresh virtualenv with only the wheel installed (PySpark is taken from the test
# virtualenv through a .pth line placed after the fresh one's site-packages): jar_path() is the
# installed file, and a one-line session reads a store through the JVM connector.
FRESH = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    import rmqstore
    from rmqstore.spark import jar_path, local_session

    assert "RMQSTORE_SPARK_JAR" not in os.environ
    package = Path(rmqstore.__file__).parent
    assert Path(jar_path()) == package / "jars" / "rmqstore-spark.jar", jar_path()
    assert Path(sys.prefix) in package.parents, package
    with rmqstore.MessageStore("store") as store:
        assert store.put_messages("TopicA", 1, [b"a", b"bc", b"def"]).ok
        assert store.wait_dispatched(30)
    spark = local_session("fresh-venv")
    rows = spark.read.format("rmqstore-jvm").load("store").select("queue_id", "body").collect()
    assert sorted((r.queue_id, bytes(r.body)) for r in rows) == [
        (1, b"a"), (1, b"bc"), (1, b"def")
    ], rows
    spark.stop()
    print("fresh ok", jar_path())
    """
)


def test_a_fresh_virtualenv_reads_through_the_jar_of_the_wheel(wheel: Path, tmp_path: Path) -> None:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java runtime (java on PATH or JAVA_HOME)")
    from rmqstore.spark import JAR_ENV

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    python = venv / "bin" / "python"
    subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "--no-deps", wheel],
        check=True,
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    )
    fresh_site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(fresh_site) / "zz-test-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in os.environ.items() if k not in (JAR_ENV, "PYSPARK_PYTHON")}
    env.pop("PYSPARK_DRIVER_PYTHON", None)
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.run(
        [python, "-c", FRESH],
        cwd=work,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"fresh ok {Path(fresh_site) / JAR_ENTRY}" in proc.stdout
