"""The distributions users install: ``make wheel`` builds them into ``dist/`` and installs the
wheel that every test runs against.

- one wheel for CPython 3.11 and every later version (``abi3``: the column buffers need the
  buffer protocol of 3.11's stable ABI), tagged ``manylinux_2_28`` (glibc 2.28 or later) and
  honestly so (auditwheel reads the glibc symbol versions the extension needs), stripped;
- it installs and works on each later CPython this machine has (3.12, 3.13);
- an sdist that builds a working wheel by itself, the way ``pip install rmqstore-*.tar.gz``
  builds it (maturin as the PEP 517 backend, no zig).
"""

from __future__ import annotations

import glob
import importlib.metadata
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import textwrap
import time
import zipfile
from pathlib import Path

import pytest
import rmqstore
import rmqstore._rmqstore
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from packaging.utils import parse_wheel_filename

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

TAG = "cp311-abi3-manylinux_2_28_x86_64"
#: Oldest glibc the wheel claims (and may claim: the issue asks for manylinux_2_28 or older).
WHEEL_GLIBC = (2, 28)
ABI3_BASELINE = "3.11"
EXTENSION = "rmqstore/_rmqstore.abi3.so"
KiB, MiB = 1024, 1024 * 1024
#: A stripped extension is about 1.2 MB (the wheel 0.6 MB without the JVM connector's jar, 2.1 MB
#: with it: tests/package/test_wheel_jar.py); with debug info the extension was 7.4 MB.
MAX_EXTENSION_BYTES = 4 * MiB
MAX_WHEEL_BYTES = 4 * MiB
#: Libraries an extension for manylinux may load: glibc's own (never libpython: an extension
#: takes the interpreter's symbols from the process that imports it).
SYSTEM_LIBRARIES = {
    "libc.so.6",
    "libm.so.6",
    "libdl.so.2",
    "libpthread.so.0",
    "librt.so.1",
    "libgcc_s.so.1",
    "ld-linux-x86-64.so.2",
}
#: CPython versions after 3.11 the abi3 wheel is installed on.
LATER_PYTHONS = ("3.12", "3.13")

# Exercises the package through its public API in a fresh interpreter: appends, dispatch, reads
# by queue and key, an Arrow batch (the buffer protocol of the stable ABI), the error tree.
SMOKE = textwrap.dedent(
    """
    import sys

    import rmqstore
    import rmqstore._rmqstore
    from rmqstore import (
        GetMessageStatus, Message, MessageStore, PutMessageStatus, StoreConfig,
        StoreCorruptedError,
    )

    expected, arrow = sys.argv[1], sys.argv[2] == "arrow"
    assert "%d.%d" % sys.version_info[:2] == expected, sys.version
    assert rmqstore._rmqstore.__file__.endswith("_rmqstore.abi3.so"), rmqstore._rmqstore.__file__
    cfg = StoreConfig(mapped_file_size_commit_log=1 << 20)
    with MessageStore("store", cfg) as store:
        r = store.put_message(Message("TopicA", b"hello", tags="TagA", keys=["k1"]))
        assert r.status is PutMessageStatus.PUT_OK, r
        assert store.put_messages("TopicA", 0, [b"a", b"b"], tags="TagB").ok
        assert store.wait_dispatched(30)
        got = store.get_message("g", "TopicA", 0, 0, 8, subscription="TagA || TagB")
        assert got.status is GetMessageStatus.FOUND, got
        assert [m.body for m in got.messages] == [b"hello", b"a", b"b"]
        assert [m.commit_log_offset for m in store.query_message("TopicA", "k1")] == [
            r.wrote_offset
        ]
        if arrow:
            batch = store.read_batch("TopicA", 0, 0, 10)
            assert batch.column("body").to_pylist() == [b"hello", b"a", b"b"]
            assert batch.column("tags").to_pylist() == ["TagA", "TagB", "TagB"]
    try:
        MessageStore("store", StoreConfig(mapped_file_size_commit_log=2 << 20))
    except StoreCorruptedError:
        pass
    else:
        raise AssertionError("a store reopened with another segment size")
    with MessageStore("store", cfg, read_only=True) as store:
        assert store.get_max_offset_in_queue("TopicA", 0) == 3
    print("smoke ok", sys.version_info[:3], rmqstore.__version__)
    """
)


@pytest.fixture(scope="module")
def extension_bytes(wheel: Path) -> bytes:
    """The wheel's one extension module."""
    with zipfile.ZipFile(wheel) as z:
        [so] = [n for n in z.namelist() if n.endswith(".so")]
        return z.read(so)


def _run(args: list[str | Path], cwd: Path | None = None, timeout: float = 600, **env: str) -> str:
    r = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", **env},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert r.returncode == 0, f"{args} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
    return r.stdout


def _venv(python: Path | str, folder: Path, *packages: str | Path) -> Path:
    """A fresh virtualenv of ``python`` with ``packages`` installed (no dependencies pulled
    in): its interpreter."""
    _run([python, "-m", "venv", folder])
    venv_python = folder / "bin" / "python"
    _run([venv_python, "-m", "pip", "install", "--quiet", "--no-deps", *packages])
    return venv_python


def _smoke(python: Path, version: str, cwd: Path, *, arrow: bool) -> None:
    cwd.mkdir()
    out = _run([python, "-I", "-c", SMOKE, version, "arrow" if arrow else "no-arrow"], cwd=cwd)
    assert "smoke ok" in out


def _find_python(version: str) -> Path | None:
    """A working CPython ``version`` interpreter: on PATH, or one pyenv installed."""
    candidates = [shutil.which(f"python{version}")]
    pyenv_root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    candidates += sorted(glob.glob(f"{pyenv_root}/versions/{version}.*/bin/python{version}"))
    for candidate in candidates:
        if candidate is None:
            continue
        r = subprocess.run(
            [candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            check=False,
        )
        if r.returncode == 0 and r.stdout.strip() == version:
            return Path(candidate)
    return None


def test_wheel_is_one_abi3_wheel_for_cpython_311_and_later(wheel: Path) -> None:
    name, version, _build, tags = parse_wheel_filename(wheel.name)
    assert name == "rmqstore"
    assert str(version) == rmqstore.__version__
    assert sorted(str(t) for t in tags) == [TAG]
    with zipfile.ZipFile(wheel) as z:
        dist_info = f"rmqstore-{version}.dist-info"
        metadata = z.read(f"{dist_info}/METADATA").decode()
        wheel_file = z.read(f"{dist_info}/WHEEL").decode()
        names = z.namelist()
    assert "Requires-Python: >=3.11\n" in metadata
    assert f"Tag: {TAG}\n" in wheel_file
    assert "Root-Is-Purelib: false\n" in wheel_file
    assert [n for n in names if n.endswith(".so")] == [EXTENSION]


def test_abi3audit_finds_only_the_stable_abi_of_python_311(wheel: Path) -> None:
    """Every Python symbol the extension uses is in 3.11's stable ABI, so later CPythons load
    it."""
    report = json.loads(_run([BIN / "abi3audit", "--report", "--strict", wheel]))
    [result] = report["specs"][str(wheel)]["wheel"]
    assert result["name"] == "_rmqstore.abi3.so"
    audit = result["result"]
    assert audit["is_abi3"]
    assert audit["is_abi3_baseline_compatible"]
    assert audit["baseline"] == ABI3_BASELINE
    assert audit["computed"] <= ABI3_BASELINE
    assert audit["non_abi3_symbols"] == []


def test_auditwheel_confirms_manylinux_2_28_or_older(wheel: Path) -> None:
    """auditwheel reads the glibc symbol versions the extension needs: the oldest manylinux it
    is consistent with must be no newer than the tag the wheel claims, and that tag no newer
    than manylinux_2_28."""
    out = " ".join(_run([BIN / "auditwheel", "show", wheel]).split())
    m = re.search(
        r'consistent with the following platform tag: "manylinux_(\d+)_(\d+)_x86_64"', out
    )
    assert m, out
    needed = (int(m[1]), int(m[2]))
    claimed = re.fullmatch(r"cp311-abi3-manylinux_(\d+)_(\d+)_x86_64", TAG)
    assert claimed
    assert needed <= (int(claimed[1]), int(claimed[2])) <= WHEEL_GLIBC, out


def test_extension_is_stripped_and_links_only_system_libraries(extension_bytes: bytes) -> None:
    elf = ELFFile(io.BytesIO(extension_bytes))
    sections = [s.name for s in elf.iter_sections()]
    assert [s for s in sections if s.startswith((".debug", ".zdebug"))] == []
    assert ".symtab" not in sections, "the extension's symbol table is not stripped"
    dynsym = elf.get_section_by_name(".dynsym")
    assert dynsym is not None
    exported = {s.name for s in dynsym.iter_symbols() if s["st_shndx"] != "SHN_UNDEF"}
    assert "PyInit__rmqstore" in exported
    [dynamic] = [s for s in elf.iter_sections() if isinstance(s, DynamicSection)]
    needed = {t.needed for t in dynamic.iter_tags() if t.entry.d_tag == "DT_NEEDED"}
    assert needed <= SYSTEM_LIBRARIES, needed


def test_wheel_and_extension_sizes_are_sane(wheel: Path, extension_bytes: bytes) -> None:
    assert 100 * KiB < len(extension_bytes) <= MAX_EXTENSION_BYTES, len(extension_bytes)
    assert 100 * KiB < wheel.stat().st_size <= MAX_WHEEL_BYTES, wheel.stat().st_size


def test_the_installed_package_is_this_wheel(wheel: Path, extension_bytes: bytes) -> None:
    """``make wheel`` installed the wheel in dist/, so every other test runs against it."""
    installed = Path(rmqstore._rmqstore.__file__)
    assert installed.name == "_rmqstore.abi3.so"
    assert installed.read_bytes() == extension_bytes
    wheel_file = importlib.metadata.distribution("rmqstore").read_text("WHEEL")
    assert wheel_file is not None
    assert f"Tag: {TAG}\n" in wheel_file
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if name.startswith("rmqstore/") and name.endswith(".py"):
                assert (installed.parent.parent / name).read_bytes() == z.read(name), name


@pytest.mark.parametrize("version", LATER_PYTHONS)
def test_wheel_installs_and_runs_on_later_cpython(
    version: str, wheel: Path, tmp_path: Path
) -> None:
    python = _find_python(version)
    if python is None:
        pytest.fail(
            f"no CPython {version} here (python{version} on PATH or pyenv's): the abi3 wheel is "
            f"checked on it; install one, e.g. `pyenv install {version}`"
        )
    pyarrow = f"pyarrow=={importlib.metadata.version('pyarrow')}"
    venv_python = _venv(python, tmp_path / "venv", wheel, pyarrow)
    _smoke(venv_python, version, tmp_path / "work", arrow=True)


def test_sdist_builds_a_working_wheel_by_itself(sdist: Path, tmp_path: Path) -> None:
    """The sdist unpacked alone in a temporary folder builds a wheel the way pip builds it
    for a user (maturin as the PEP 517 backend, release profile), and that wheel works in a
    fresh virtualenv."""
    with tarfile.open(sdist) as tar:
        names = tar.getnames()
        tar.extractall(tmp_path / "src", filter="data")
    top = f"rmqstore-{rmqstore.__version__}"
    # maturin dates every file of the sdist 2006-07-24 (reproducible archives), and cargo
    # takes a crate whose sources are older than its compiled artifact for up to date: with the
    # kept target folder below, the wheel would hold the core compiled from an earlier sdist.
    # Dating the sources now makes cargo compile this sdist's crates (the registry
    # dependencies, fingerprinted by version, stay compiled).
    now = time.time()
    for f in (tmp_path / "src").rglob("*"):
        os.utime(f, (now, now), follow_symlinks=False)
    for needed in ("pyproject.toml", "Cargo.toml", "Cargo.lock", "README.md"):
        assert f"{top}/{needed}" in names, needed
    assert not [n for n in names if n.split("/")[1] in {"tests", "benches", "target", "dist"}]
    out = tmp_path / "wheels"
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",  # maturin from this virtualenv: no download
            "--wheel-dir",
            out,
            tmp_path / "src" / top,
        ],
        timeout=1200,
        # Only compiled dependencies are kept between runs; the sources are the sdist's.
        CARGO_TARGET_DIR=str(REPO / "target" / "sdist-check"),
        PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    [built] = out.glob("rmqstore-*.whl")
    assert "-cp311-abi3-" in built.name, built.name
    venv_python = _venv(sys.executable, tmp_path / "venv", built)
    _smoke(venv_python, "{}.{}".format(*sys.version_info[:2]), tmp_path / "work", arrow=False)
