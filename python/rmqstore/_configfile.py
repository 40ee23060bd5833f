"""RocketMQ's ``ConfigManager`` protocol for the JSON files under a store's ``config/`` folder.

RocketMQ's broker keeps its metadata (``topics.json``, ``consumerOffset.json``, ...) as JSON
files with a ``.bak`` copy of the previous version (``org.apache.rocketmq.common.ConfigManager``):

* ``load`` reads the file; when it is missing, empty or cannot be decoded, the bad file is
  deleted and ``<name>.bak`` is loaded instead (``loadBak``);
* ``persist`` moves the current file to ``<name>.bak``, writes the new content and forces it.

:class:`ConfigFile` follows that protocol with two differences that only make it safer: the new
content is written to ``<name>.tmp`` and forced before it is renamed into place (RocketMQ writes
the file in place, so a crash mid-write leaves a torn file for the next load to discard), and a
file that cannot be decoded is only deleted once its ``.bak`` has loaded: when neither is
usable, :class:`~rmqstore.errors.StoreCorruptedError` is raised (``.path`` names the file) and
nothing is changed (RocketMQ would start from an empty table).

Decoding is strict where RocketMQ's fastjson2 is lenient (it reads ``"0_0"`` as the number 0,
``12.5`` as 12, ``true`` as 1, and keeps the last of two equal keys): content that fastjson2
would have to guess at is undecodable here. Files that are symbolic links or not regular files
(a FIFO would block a reader forever) are refused without reading them, and so are files larger
than :data:`MAX_CONFIG_FILE_BYTES`; neither is deleted or replaced.
"""

from __future__ import annotations

import contextlib
import errno as errno_mod
import json
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, NoReturn, TypeVar

from .errors import StoreCorruptedError, StoreIOError

__all__ = [
    "MAX_CONFIG_FILE_BYTES",
    "ConfigFile",
    "UndecodableError",
    "dump_json",
    "parse_json",
]

#: The largest config file read (64 MiB): a consumer offset table of about three million
#: queues. A larger file is refused, not truncated or replaced.
MAX_CONFIG_FILE_BYTES = 64 * 1024 * 1024

#: The longest integer literal read: 20 characters hold every Java ``long`` (with its sign).
_MAX_INT_LITERAL = 20


class UndecodableError(Exception):
    """Content that is not what the file must hold (the reason is the message)."""


T = TypeVar("T")


# -- strict JSON ------------------------------------------------------------------------------

_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BARE_INT_KEY = re.compile(r"([{,]\s*)(-?[0-9]+)(\s*:)")


def _quote_bare_int_keys(text: str) -> str:
    """fastjson writes ``Map<Integer, ...>`` keys unquoted (``{0:12}``); quote them.

    Only text outside string literals is touched, so a name is never rewritten.
    """
    out: list[str] = []
    pos = 0
    for match in _JSON_STRING.finditer(text):
        out.append(_BARE_INT_KEY.sub(r'\1"\2"\3', text[pos : match.start()]))
        out.append(match.group())
        pos = match.end()
    out.append(_BARE_INT_KEY.sub(r'\1"\2"\3', text[pos:]))
    return "".join(out)


def _reject_constant(name: str) -> NoReturn:
    raise UndecodableError(f"non-JSON constant {name}")


def _bounded_int(literal: str) -> int:
    if len(literal) > _MAX_INT_LITERAL:
        raise UndecodableError(
            f"an integer of {len(literal.lstrip('-'))} digits (a Java long has at most 19)"
        )
    return int(literal)


def _finite_float(literal: str) -> float:
    value = float(literal)
    if value in (float("inf"), float("-inf")):
        raise UndecodableError(f"number {literal[:40]} is out of range")
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise UndecodableError(f"key {key[:200]!r} appears twice in one object")
        obj[key] = value
    return obj


def _loads(text: str) -> Any:
    return json.loads(
        text,
        object_pairs_hook=_unique_keys,
        parse_constant=_reject_constant,
        parse_int=_bounded_int,
        parse_float=_finite_float,
    )


def parse_json(raw: bytes) -> Any:
    """Strict JSON from UTF-8 bytes, also reading fastjson's unquoted integer keys; raises
    :class:`UndecodableError` (never another exception) for anything else."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UndecodableError(f"not UTF-8 ({e})") from None
    if not text.strip():
        raise UndecodableError("empty")
    try:
        try:
            return _loads(text)
        except json.JSONDecodeError:
            return _loads(_quote_bare_int_keys(text))
    except (json.JSONDecodeError, RecursionError, ValueError) as e:
        raise UndecodableError(f"not JSON ({str(e)[:200]})") from None


def dump_json(doc: Any) -> bytes:
    """``doc`` as pretty-printed JSON (ASCII, so any name survives) with a final newline."""
    return json.dumps(doc, indent=4, allow_nan=False).encode("ascii") + b"\n"


# -- files ----------------------------------------------------------------------------------------


def io_error(action: str, err: OSError, path: Path) -> StoreIOError:
    code = err.errno if err.errno is not None else errno_mod.EIO
    reason = err.strerror or str(err)
    return StoreIOError(code, f"{action} {os.fspath(path)}: {reason}", os.fspath(path))


def corrupted(message: str, path: Path) -> StoreCorruptedError:
    err = StoreCorruptedError(message)
    err.path = os.fspath(path)
    return err


def fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class ConfigFile(Generic[T]):
    """One JSON file of a store's ``config/`` folder (``<config_dir>/<name>``), its ``.bak``
    and ``.tmp``, read and written with RocketMQ's ``ConfigManager`` protocol (see the module
    documentation). ``decode`` turns the parsed JSON into the caller's value or raises
    :class:`UndecodableError`; ``what`` names the file's content in messages."""

    def __init__(
        self,
        config_dir: str | os.PathLike[str],
        name: str,
        decode: Callable[[Any], T],
        what: str,
    ) -> None:
        self.dir = Path(config_dir)
        self.path = self.dir / name
        self.bak = self.dir / (name + ".bak")
        self.tmp = self.dir / (name + ".tmp")
        self._decode = decode
        self.what = what

    # -- folder ---------------------------------------------------------------------------

    def make_dir(self) -> None:
        """Creates the config folder (and its parents) when missing; refuses a symbolic link."""
        try:
            st = os.lstat(self.dir)
        except FileNotFoundError:
            pass
        except OSError as e:
            raise io_error("inspect config folder", e, self.dir) from e
        else:
            if stat.S_ISLNK(st.st_mode):
                raise corrupted(
                    f"{self.what}: {self.dir} is a symbolic link; the store does not follow "
                    "links for the files it writes",
                    self.dir,
                )
            if stat.S_ISDIR(st.st_mode):
                return
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            fsync_dir(self.dir.parent)
        except OSError as e:
            raise io_error("create config folder", e, self.dir) from e

    # -- reading --------------------------------------------------------------------------

    def read(self, path: Path) -> bytes | None:
        """The bytes of ``path``, ``None`` when it does not exist. A symbolic link, a file that
        is not regular or one over :data:`MAX_CONFIG_FILE_BYTES` raises
        :class:`~rmqstore.errors.StoreCorruptedError`; other failures
        :class:`~rmqstore.errors.StoreIOError`."""
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(path, flags)
        except FileNotFoundError:
            return None
        except OSError as e:
            if e.errno == errno_mod.ELOOP:
                raise corrupted(
                    f"{self.what}: {path} is a symbolic link; the store does not follow links "
                    "for the files it writes",
                    path,
                ) from None
            raise io_error("read", e, path) from e
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise corrupted(f"{self.what}: {path} is not a regular file", path)
            if st.st_size > MAX_CONFIG_FILE_BYTES:
                raise corrupted(
                    f"{self.what}: {path} is {st.st_size} bytes, more than the "
                    f"{MAX_CONFIG_FILE_BYTES} this store reads",
                    path,
                )
            chunks: list[bytes] = []
            total = 0
            while chunk := os.read(fd, 1 << 20):
                total += len(chunk)
                if total > MAX_CONFIG_FILE_BYTES:
                    raise corrupted(
                        f"{self.what}: {path} grew past the {MAX_CONFIG_FILE_BYTES} bytes this "
                        "store reads",
                        path,
                    )
                chunks.append(chunk)
            return b"".join(chunks)
        except OSError as e:
            raise io_error("read", e, path) from e
        finally:
            os.close(fd)

    def _decoded(self, raw: bytes) -> T:
        return self._decode(parse_json(raw))

    def load(self) -> tuple[T | None, str | None]:
        """``ConfigManager.load``: the decoded file, or its ``.bak`` when the file is missing or
        undecodable (then the bad file is deleted, as RocketMQ does, and the second value says
        why the file was passed over). ``(None, None)`` when neither exists. When the file is
        undecodable and the ``.bak`` missing, or the ``.bak`` is needed and undecodable,
        :class:`~rmqstore.errors.StoreCorruptedError` names the file and nothing changes."""
        raw = self.read(self.path)
        problem: str
        if raw is None:
            problem = "missing"
        else:
            try:
                value = self._decoded(raw)
            except UndecodableError as e:
                problem = str(e)
            else:
                self.remove_stray_tmp()
                return value, None
        raw_bak = self.read(self.bak)
        if raw_bak is None:
            if raw is None:
                self.remove_stray_tmp()
                return None, None
            raise corrupted(
                f"{self.what}: {self.path} is unusable ({problem}) and there is no {self.bak}",
                self.path,
            )
        try:
            value = self._decoded(raw_bak)
        except UndecodableError as e:
            raise corrupted(
                f"{self.what}: {self.path} is unusable ({problem}) and so is {self.bak} ({e})"
                if raw is not None
                else f"{self.what}: {self.path} is missing and {self.bak} is unusable ({e})",
                self.path,
            ) from None
        if raw is not None:
            try:
                self.path.unlink()
            except FileNotFoundError:
                pass
            except OSError as e:
                raise io_error("delete unusable", e, self.path) from e
        self.remove_stray_tmp()
        return value, problem

    def remove_stray_tmp(self) -> None:
        """A temp file left by a crash before its rename holds nothing committed: drop it
        (``unlink`` removes a link itself, never its target)."""
        with contextlib.suppress(OSError):
            self.tmp.unlink()

    # -- writing --------------------------------------------------------------------------

    def replace(self, data: bytes) -> None:
        """Write temp + fsync, current -> ``.bak``, temp -> current; the caller then calls
        :meth:`sync_dir`.

        On a failure the temp file is removed and the current file is as it was: if it had
        been moved to ``.bak`` already when the rename failed, it is linked back from there
        (and should that fail too, loading falls back to the ``.bak``, which holds it).
        """
        step, path = "write", self.tmp
        moved_to_bak = False
        try:
            with contextlib.suppress(FileNotFoundError):
                self.tmp.unlink()
            fd = os.open(
                self.tmp,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o644,
            )
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                step = "sync"
                os.fsync(fd)
            finally:
                os.close(fd)
            step, path = "back up", self.path
            try:
                os.replace(self.path, self.bak)
                moved_to_bak = True
            except FileNotFoundError:
                pass  # first write, or the file was unusable at load
            step = "replace"
            os.replace(self.tmp, self.path)
        except OSError as e:
            with contextlib.suppress(OSError):
                self.tmp.unlink()
            if moved_to_bak:
                with contextlib.suppress(OSError):
                    os.link(self.bak, self.path)
            raise io_error(f"{self.what}: {step}", e, path) from e

    def sync_dir(self) -> None:
        """Forces the folder, so the renames of :meth:`replace` are durable."""
        try:
            fsync_dir(self.dir)
        except OSError as e:
            raise io_error(f"{self.what}: sync folder", e, self.dir) from e
