"""Atomic writes: a file or a folder holds its complete old or its complete new content at every instant.

* **Files** go to a temporary sibling and are renamed into place (``os.replace`` is atomic on POSIX and
  Windows); :class:`AtomicFiles` writes several files of one output so that all of them are replaced or
  none. JSON is written strict (:func:`dumps_json`: non-finite numbers become ``null``).
* **Folders** are built under a hidden sibling and swapped in by :func:`atomic_dir`: at every instant the
  path holds the complete old or the complete new folder (``renameat2(RENAME_EXCHANGE)`` on Linux,
  ``renamex_np(RENAME_SWAP)`` on macOS; elsewhere a rename scheme whose hidden names say which folder is
  complete, recovered by :func:`recover_swap`). The hidden folders a killed swap leaves are recovered or
  removed by the next replacement of the same path.
* A full disk while writing is one :class:`~drmix.errors.DiskFullError` naming the output, which is left as
  it was (:mod:`drmix.io.checks`).

Hand-written: no library swaps folders atomically.
"""
from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import logging
import math
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from drmix.errors import ConfigError, DrmixError
from drmix.io.checks import disk_full_error, is_disk_full, make_parent, umask_mode, writable, write_target

log = logging.getLogger(__name__)


# -- atomic files ------------------------------------------------------------------------------------------
def _stage(path: Path, data: bytes) -> str:
    """Write ``data`` to a new temporary sibling of ``path`` (fsynced, the umask's mode); return its name.
    ``path`` is where the file lands (:func:`write_target`: a link's target)."""
    if path.is_dir():
        raise ConfigError("expected a file path, found a folder.", path=path, fix="name a file, not a folder.")
    make_parent(path)
    with writable(path.parent):
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        if hasattr(os, "fchmod"):  # POSIX: the mode open() would give, not mkstemp's 0600
            os.fchmod(fd, umask_mode())
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException as e:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(e, Exception) and not isinstance(e, DrmixError) and is_disk_full(e):
            raise disk_full_error(e, path) from None
        raise
    return tmp


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Replace the file ``path`` (through a symbolic link: its target; the link is kept) in one rename."""
    path = write_target(path)
    tmp = _stage(path, data)
    try:
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


class AtomicFiles:
    """Several files of one output replaced together: each is written to a temporary sibling as it is
    given, and all are renamed into place when the block ends without error (none when it raises, so a
    full disk leaves every file as it was)::

        with AtomicFiles() as files:
            files.write_json(out / "eval.json", obj)
            files.write_text(out / "eval.md", text)
    """

    def __init__(self) -> None:
        self._staged: list[tuple[str, Path]] = []

    def write_bytes(self, path: str | Path, data: bytes) -> None:
        path = write_target(path)
        self._staged.append((_stage(path, data), path))

    def write_text(self, path: str | Path, text: str) -> None:
        self.write_bytes(path, text.encode("utf-8"))

    def write_json(self, path: str | Path, obj: Any, *, indent: int | None = 2) -> None:
        self.write_text(path, dumps_json(obj, indent=indent) + "\n")

    def __enter__(self) -> "AtomicFiles":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        staged, self._staged = self._staged, []
        if exc_type is None:
            for tmp, path in staged:
                os.replace(tmp, path)
            return
        for tmp, _ in staged:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        if isinstance(exc, Exception) and not isinstance(exc, DrmixError) and is_disk_full(exc):
            paths = ", ".join(str(p) for _, p in staged) or "the output"
            raise disk_full_error(exc, paths) from None


def finite_json(obj: Any) -> Any:
    """``obj`` with every non-finite float (NaN, ±inf) replaced by None, so JSON files hold ``null``.

    ``json.dumps`` would otherwise write bare ``NaN`` / ``Infinity``, which is not JSON.
    """
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_json(v) for v in obj]
    if hasattr(obj, "item") and getattr(obj, "ndim", None) == 0:
        return finite_json(obj.item())  # numpy / torch scalars
    return obj


def dumps_json(obj: Any, *, indent: int | None = None) -> str:
    """Strict JSON text of ``obj`` (non-finite numbers become ``null``)."""
    return json.dumps(finite_json(obj), indent=indent, ensure_ascii=False, allow_nan=False)


def atomic_write_json(path: str | Path, obj: Any, *, indent: int | None = 2) -> None:
    atomic_write_text(path, dumps_json(obj, indent=indent) + "\n")


# -- atomic folders ----------------------------------------------------------------------------------------
def _fault_point(step: str) -> None:
    """Called between the filesystem operations of a swap, with the name of the step just done.

    Does nothing; the swap tests replace it with ``os._exit`` to kill the process at each step."""


_USE_EXCHANGE = True   # tests set False to prove the rename fallback
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2   # linux/fs.h
_RENAME_SWAP = 2       # macOS sys/stdio.h


def _exchange(a: Path, b: Path) -> bool:
    """Swap the names ``a`` and ``b`` in one step; False when this system or filesystem cannot."""
    if not _USE_EXCHANGE:
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return False
    fa, fb = os.fsencode(a), os.fsencode(b)
    if sys.platform.startswith("linux") and hasattr(libc, "renameat2"):
        result = libc.renameat2(_AT_FDCWD, fa, _AT_FDCWD, fb, _RENAME_EXCHANGE)
    elif sys.platform == "darwin" and hasattr(libc, "renamex_np"):
        result = libc.renamex_np(fa, fb, _RENAME_SWAP)
    else:
        return False
    if result == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
        return False  # a filesystem without the exchange (some network and FUSE ones): the fallback
    raise OSError(err, os.strerror(err), str(a), None, str(b))


def _swap_pattern(name: str) -> re.Pattern[str]:
    # ".NAME.drmix-XXXXXXXX.tmp|new|old" (this module), ".NAME.XXXXXXXX.tmp|old" (mkdtemp names of earlier
    # versions); XXXXXXXX: tempfile's letters. A user's ".NAME.old" matches neither.
    return re.compile(rf"\.{re.escape(name)}\.(?:drmix-([a-z0-9_]+)\.(tmp|new|old)|([a-z0-9_]{{8}})\.(tmp|old))")


def _locked(p: Path) -> bool:
    """Whether a live process holds the swap lock on folder ``p`` (its swap is under way, not killed)."""
    try:
        import fcntl
    except ImportError:  # Windows: no advisory locks on folders
        return False
    try:
        fd = os.open(p, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # closing releases the probe's lock
    return False


def _lock(p: Path) -> int | None:
    """Hold the swap lock on folder ``p`` until the returned descriptor is closed (released at a kill)."""
    try:
        import fcntl

        fd = os.open(p, os.O_RDONLY)
    except (ImportError, OSError):
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        pass
    return fd


def swap_leftovers(path: str | Path) -> list[tuple[Path, str]]:
    """The hidden folders a killed replacement of ``path`` left beside it, newest first, each with its
    state: ``tmp`` (a folder being built, or after an exchange the previous output), ``new`` (a complete new
    output not yet in place) or ``old`` (the complete previous output). Folders in use by a live swap are
    not listed."""
    path = Path(path)
    parent, pattern = path.parent, _swap_pattern(path.name)
    prefix = "." + path.name + "."
    found: list[tuple[float, Path, str]] = []
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return []
    for entry in entries:
        if not entry.name.startswith(prefix):
            continue
        m = pattern.fullmatch(entry.name)
        if m is None or not entry.is_dir(follow_symlinks=False):
            continue
        p = Path(entry.path)
        if _locked(p):
            continue
        with contextlib.suppress(OSError):
            found.append((entry.stat(follow_symlinks=False).st_mtime, p, m.group(2) or m.group(4)))
    return [(p, state) for _, p, state in sorted(found, key=lambda t: -t[0])]


def _remove(p: Path) -> None:
    if p.is_symlink() or not p.is_dir():
        with contextlib.suppress(FileNotFoundError):
            os.unlink(p)
    else:
        shutil.rmtree(p, ignore_errors=True)


def recover_swap(path: str | Path) -> Path | None:
    """Finish what a killed replacement of ``path`` left: when ``path`` is missing, put back the complete
    folder (a ``new`` one, else the ``old`` one); remove every other hidden leftover. Returns the leftover
    put back at ``path``, or None. Called by :func:`atomic_dir` and by the output check of every command
    that replaces a folder (:func:`drmix.outputs.claim_output`)."""
    path = Path(path)
    leftovers = swap_leftovers(path)
    if not leftovers:
        return None
    restored = None
    if not os.path.lexists(path):
        for want in ("new", "old"):
            candidates = [p for p, state in leftovers if state == want]
            if candidates:
                with writable(path.parent):
                    os.rename(candidates[0], path)
                restored = candidates[0]
                log.warning("%s: put back the %s output from %s (a replacement was interrupted)", path,
                            "new" if want == "new" else "previous", candidates[0].name)
                break
    removed = [p for p, _ in leftovers if p != restored]
    for p in removed:
        _remove(p)
    if removed:
        log.info("%s: removed %d hidden folder(s) of an interrupted replacement", path, len(removed))
    return restored


@contextlib.contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Yield a temporary directory that replaces ``path`` only when the block succeeds.

    At every instant ``path`` holds the complete previous folder or the complete new one: the new folder is
    built under a hidden sibling ``.NAME.drmix-XXXXXXXX.tmp`` and the two names are exchanged in one step
    (``renameat2(RENAME_EXCHANGE)`` / ``renamex_np(RENAME_SWAP)``); the previous folder, now under the
    hidden name, is then deleted. Where no exchange exists the complete new folder is first renamed
    ``.NAME.drmix-XXXXXXXX.new``, the previous one ``....old``, then the new one into place: a kill between
    the two renames leaves ``path`` missing, and :func:`recover_swap` (run by the next replacement and by
    the commands' output checks) puts the complete folder back. Leftovers of killed swaps are recovered or
    removed the same way, before the new folder is built.

    A file at ``path`` is refused (never renamed or replaced); callers that replace a folder given by the
    user check it first with :func:`drmix.outputs.claim_output`. Nothing beside ``path`` is touched (a
    user's ``.NAME.old`` is not one of these names). A full disk while building raises
    :class:`~drmix.errors.DiskFullError` naming ``path``, which is left as it was.

    A symbolic link at ``path`` is kept: the folder it points at (its final target, created when missing) is
    the one replaced, beside that target; a loop of links is a one-line ConfigError.
    """
    path = write_target(path)
    if path.exists() and not path.is_dir():
        raise ConfigError("the output path is a file; a folder is written here.", path=path,
                          fix="choose a new folder (the file is left as it is).")
    make_parent(path)
    recover_swap(path)
    with writable(path.parent):
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.drmix-", suffix=".tmp", dir=path.parent))
    lock = _lock(tmp)  # a concurrent recover_swap leaves a live swap's folders alone
    try:
        os.chmod(tmp, umask_mode(directory=True))
        _fault_point("created")
        try:
            yield tmp
        except BaseException as e:
            if isinstance(e, Exception) and not isinstance(e, DrmixError) and is_disk_full(e, tmp):
                raise disk_full_error(e, path) from None
            raise
        _fault_point("built")
        if not os.path.lexists(path):
            os.rename(tmp, path)
            _fault_point("renamed")
        elif _exchange(tmp, path):
            _fault_point("exchanged")   # path: the new folder; tmp: the previous one
            _remove(tmp)
        else:
            _swap_by_renames(tmp, path)
    except BaseException:
        _remove(tmp)  # the unfinished new folder, or the previous one after the exchange
        raise
    finally:
        if lock is not None:
            os.close(lock)


def _swap_by_renames(tmp: Path, path: Path) -> None:
    """The fallback of :func:`atomic_dir`: tmp -> .new (complete), path -> .old, .new -> path, remove .old."""
    stem = tmp.name[: -len(".tmp")]
    new, old = tmp.with_name(stem + ".new"), tmp.with_name(stem + ".old")
    os.rename(tmp, new)
    _fault_point("marked-new")
    held = _lock(path)
    try:
        os.rename(path, old)
        _fault_point("moved-old")
        try:
            os.rename(new, path)
        except BaseException:
            os.rename(old, path)
            raise
        _fault_point("moved-new")
    finally:
        if held is not None:
            os.close(held)
    _remove(old)


def write_jsonl_atomic(path: str | Path, rows: list[dict[str, Any]]) -> None:
    atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
