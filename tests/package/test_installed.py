"""The tests run against the installed wheel, never against the source tree."""

from __future__ import annotations

import importlib.metadata
import sys
import sysconfig
from pathlib import Path

import rmqstore
import rmqstore._rmqstore

REPO = Path(__file__).resolve().parents[2]


def test_running_in_a_virtualenv() -> None:
    assert sys.prefix != sys.base_prefix


def test_package_and_extension_come_from_site_packages() -> None:
    site_packages = Path(sysconfig.get_paths()["purelib"]).resolve()
    platlib = Path(sysconfig.get_paths()["platlib"]).resolve()
    assert site_packages.name == "site-packages"
    assert site_packages.is_relative_to(Path(sys.prefix).resolve())
    package = Path(rmqstore.__file__).resolve()
    extension = Path(rmqstore._rmqstore.__file__).resolve()
    assert package == site_packages / "rmqstore" / "__init__.py"
    assert extension.parent == platlib / "rmqstore"
    assert extension.suffix == ".so"
    # The one abi3 extension of the wheel, for CPython 3.11 and later (tests/package/test_wheel.py).
    assert extension.name == "_rmqstore.abi3.so"
    for path in (package, extension):
        assert not path.is_relative_to(REPO / "python"), path


def test_source_tree_is_not_on_sys_path() -> None:
    source = (REPO / "python").resolve()
    assert all(Path(p or ".").resolve() != source for p in sys.path)


def test_installed_distribution_matches_the_extension() -> None:
    assert importlib.metadata.version("rmqstore") == rmqstore.__version__
    assert rmqstore.__version__ == rmqstore._rmqstore.__version__
