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
import logging
import os
import re
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Generic, NoReturn, Self, TypeGuard, TypeVar

from .errors import StoreClosedError, StoreCorruptedError, StoreIOError

__all__ = [
    "MAX_CONFIG_FILE_BYTES",
    "ConfigFile",
    "ConfigManager",
    "UndecodableError",
    "dump_json",
    "is_json_int",
    "parse_json",
    "strict_loads",
]

#: The largest config file read (64 MiB): a consumer offset table of about three million
#: queues. A larger file is refused, not truncated or replaced.
MAX_CONFIG_FILE_BYTES = 64 * 1024 * 1024

_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1


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


def _finite_float(literal: str) -> float:
    value = float(literal)
    if value in (float("inf"), float("-inf")):
        raise UndecodableError(f"number {literal[:40]} is out of range")
    return value


def strict_loads(
    text: str,
    *,
    int_error: Callable[[str], Exception],
    duplicate_error: Callable[[str], Exception],
) -> Any:
    """``json.loads`` for values a Java reader would have to guess at: an integer outside a
    Java ``long`` raises ``int_error(literal)`` (before it is converted, so a 5,000-digit
    literal costs nothing), a key given twice in one object ``duplicate_error(key)``, and
    NaN, Infinity or a float out of range :class:`UndecodableError`. Deep nesting raises
    ``RecursionError`` and bad JSON ``json.JSONDecodeError``, for the caller to name."""

    def number(literal: str) -> int:
        if len(literal.lstrip("-")) <= 19:
            value = int(literal)
            if _I64_MIN <= value <= _I64_MAX:
                return value
        raise int_error(literal)

    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        obj: dict[str, Any] = {}
        for key, value in pairs:
            if key in obj:
                raise duplicate_error(key)
            obj[key] = value
        return obj

    return json.loads(
        text,
        object_pairs_hook=unique,
        parse_constant=_reject_constant,
        parse_int=number,
        parse_float=_finite_float,
    )


def _loads(text: str) -> Any:
    return strict_loads(
        text,
        int_error=lambda literal: UndecodableError(
            f"an integer of {len(literal.lstrip('-'))} digits is outside a Java long"
        ),
        duplicate_error=lambda key: UndecodableError(
            f"key {key[:200]!r} appears twice in one object"
        ),
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


def is_json_int(value: object) -> TypeGuard[int]:
    """Whether a decoded JSON value is an integer (``True`` and ``False`` are not)."""
    return isinstance(value, int) and not isinstance(value, bool)


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


class ConfigManager(Generic[T]):
    """What every manager of a config file shares (RocketMQ's ``ConfigManager``): the file,
    loaded at construction with the ``.bak`` fallback (a warning on ``logger`` names the file
    passed over; the decoded value, or None when neither file exists, is left in
    ``self._loaded`` for the subclass), a lock that serialises its calls, and ``close``. A
    closed manager refuses further calls (:meth:`_check_open`)."""

    def __init__(
        self,
        config_dir: str | os.PathLike[str],
        name: str,
        decode: Callable[[Any], T],
        what: str,
        logger: logging.Logger,
    ) -> None:
        self._file = ConfigFile(config_dir, name, decode, what)
        self._lock = threading.Lock()
        self._closed = False
        self._file.make_dir()
        loaded, problem = self._file.load()
        if problem is not None:
            logger.warning(
                "%s: %s is %s; loaded the previous version from %s",
                what,
                self._file.path,
                problem,
                self._file.bak,
            )
        self._loaded: T | None = loaded

    @property
    def path(self) -> Path:
        """The file, ``<config_dir>/<name>``."""
        return self._file.path

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Waits for a call in progress, then refuses further calls. Idempotent.

        Nothing needs writing: every change was durable when it returned.
        """
        with self._lock:
            self._closed = True

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"{type(self).__name__}({os.fspath(self._file.dir)!r}, {state})"

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"{self._file.what} {os.fspath(self._file.path)} is closed")
